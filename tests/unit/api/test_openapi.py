"""The committed OpenAPI document is the one the routes generate, and it documents what they answer."""

from __future__ import annotations

import json

from servingctl.api.routes import OPENAPI_PATH, openapi_document


def test_committed_openapi_is_current() -> None:
    committed = json.loads(OPENAPI_PATH.read_text())
    assert committed == openapi_document(), "api/openapi.json is stale: run `make openapi` and commit it"


def test_every_operation_documents_its_errors_and_iam_auth() -> None:
    document = openapi_document()
    operations = {(m.upper(), p): op for p, ops in document["paths"].items() for m, op in ops.items()}
    assert set(operations) == {
        ("GET", "/profiles"),
        ("GET", "/profiles/{name}"),
        ("GET", "/profiles/{name}/starts"),
        ("POST", "/profiles/{name}/start"),
        ("POST", "/profiles/{name}/stop"),
        ("POST", "/profiles/{name}/keepalive"),
        ("GET", "/executions/{execution_id}"),
        ("GET", "/ledger"),
        ("POST", "/benchmarks"),
        ("GET", "/benchmarks"),
        ("GET", "/benchmarks/{run_id}"),
        ("POST", "/benchmarks/{run_id}/cancel"),
        ("POST", "/benchmarks/{run_id}/dataset"),
    }
    for key, operation in operations.items():
        assert "422" not in operation["responses"], key  # validation errors answer 400
        if "{name}" in key[1]:
            assert "404" in operation["responses"], key
    for key in (("POST", "/profiles/{name}/start"), ("POST", "/profiles/{name}/stop"), ("POST", "/benchmarks")):
        assert {"202", "400", "404", "409"} <= set(operations[key]["responses"]), key
    assert document["security"] == [{"sigv4": []}]
    assert document["components"]["securitySchemes"]["sigv4"]["x-amazon-apigateway-authtype"] == "awsSigv4"
