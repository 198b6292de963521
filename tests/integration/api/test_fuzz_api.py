"""Property-based fuzzing of the REST API (schemathesis, the committed OpenAPI document) against the
twin's HTTP API: the real handler behind the API Gateway translation never answers a server error,
answers only documented status codes, and its bodies match the document. Bounded examples keep it fast."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from servingctl.api.routes import OPENAPI_PATH
from servingctl.local.twin import Twin
from servingctl.local.world import Delays

schema = schemathesis.openapi.from_path(OPENAPI_PATH)


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0) as twin:
        assert twin.api_url is not None
        yield twin.api_url


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_error_and_answers_match_the_document(case: schemathesis.Case, api_url: str) -> None:
    case.call_and_validate(
        base_url=api_url, checks=[not_a_server_error, status_code_conformance, response_schema_conformance]
    )
