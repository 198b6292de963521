"""The twin's API Gateway request validators without a twin: template.yaml's models and gateway
responses refuse a body as API Gateway does (400, its message, the validator's detail naming a
property not allowed or missing), pass what only the handler can judge (duplicate keys, bounds of the
registry, fields of an open model), and refuse a missing required parameter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servingctl_twin.apigateway.validators import MethodValidation, Validators, check, load_validators
from servingctl_twin.eventbridge.rules import load_template

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"
START, KEEPALIVE, BENCHMARKS = "/profiles/{name}/start", "/profiles/{name}/keepalive", "/benchmarks"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def validators() -> Validators:
    return load_validators(load_template(TEMPLATE), "ServingApi")


def _refused(validators: Validators, resource: str, body: bytes, headers: dict[str, str] = JSON) -> dict[str, str] | None:
    answer = check(validators, "POST", resource, headers, {}, body)
    if answer is None:
        return None
    status, data = answer
    assert status == 400
    parsed: dict[str, str] = json.loads(data)  # the rendered template is JSON: the detail's quotes escaped
    return parsed


def test_the_template_answers_a_refused_body_or_parameter_with_the_validators_detail(validators: Validators) -> None:
    for kind in ("BAD_REQUEST_BODY", "BAD_REQUEST_PARAMETERS"):
        response = validators.responses[kind]
        assert response.status == 400 and "$context.error.validationErrorString" in response.template


@pytest.mark.parametrize(
    ("resource", "body", "detail"),
    [
        (START, b'{"colour": "red"}', '[object instance has properties which are not allowed by the schema: ["colour"]]'),
        (
            START,
            b'{"poll": {"interval": 5}}',
            '[object instance has properties which are not allowed by the schema: ["interval"]]',
        ),
        (KEEPALIVE, b'{"minute": 60}', '[object instance has properties which are not allowed by the schema: ["minute"]]'),
        (BENCHMARKS, b"{}", '[object has missing required properties (["profile"])]'),
        (BENCHMARKS, b"", '[object has missing required properties (["profile"])]'),
        (
            START,
            b'{"lease_minutes": "30"}',
            '[instance type (string) does not match any allowed primitive type (allowed: ["integer","null"])]',
        ),
        (
            START,
            b'{"lease_minutes": 30.0}',
            '[instance type (number) does not match any allowed primitive type (allowed: ["integer","null"])]',
        ),
        (
            START,
            b'{"allow_shared_pool": 1}',
            '[instance type (integer) does not match any allowed primitive type (allowed: ["boolean"])]',
        ),
        (
            KEEPALIVE,
            b'{"minutes": true}',
            '[instance type (boolean) does not match any allowed primitive type (allowed: ["integer","null"])]',
        ),
        (
            START,
            b'{"poll": "fast"}',  # the allowed types in name order, whatever the model's order
            '[instance type (string) does not match any allowed primitive type (allowed: ["null","object"])]',
        ),
        (START, b"[1, 2]", '[instance type (array) does not match any allowed primitive type (allowed: ["object"])]'),
        (START, b'{"lease_minutes": 4}', "[numeric instance is lower than the required minimum (minimum: 5, found: 4)]"),
        (
            START,
            b'{"poll": {"interval_s": 3601}}',
            "[numeric instance is greater than the required maximum (maximum: 3600, found: 3601)]",
        ),
        (START, b'{\n  "lease_minutes": 60,\n}', "[Unexpected character at line 3, column 1"),
        (START, b'{"lease_minutes": "\xff"}', "[Invalid UTF-8"),
    ],
)
def test_a_body_the_model_refuses_is_answered_as_api_gateway_does(
    validators: Validators, resource: str, body: bytes, detail: str
) -> None:
    refused = _refused(validators, resource, body)
    assert refused is not None and refused["message"] == "Invalid request body"
    assert refused["detail"].startswith(detail)


def test_every_error_of_a_body_is_listed(validators: Validators) -> None:
    refused = _refused(validators, START, b'{"colour": "red", "lease_minutes": 4}')
    assert refused is not None
    assert refused["detail"] == (
        '[object instance has properties which are not allowed by the schema: ["colour"], '
        "numeric instance is lower than the required minimum (minimum: 5, found: 4)]"
    )


@pytest.mark.parametrize(
    ("resource", "body", "headers"),
    [
        (START, b'{"lease_minutes": 5, "poll": {"interval_s": 3600}}', JSON),  # at the model's bounds
        (START, b'{"lease_minutes": 60, "lease_minutes": 30}', JSON),  # duplicate keys: the handler refuses them
        (START, b'{"lease_minutes": 100000}', JSON),  # above the profile's maximum: only the handler knows it
        (START, b"", JSON),  # no body: checked as {}
        (START, b"lease=30", {"Content-Type": "application/x-www-form-urlencoded"}),  # no model for the type
        (BENCHMARKS, b'{"profile": "x", "rounds": "3"}', JSON),  # the benchmark model is open: the handler checks
        (BENCHMARKS, b'{"profile": "x"}', {}),  # no Content-Type: API Gateway takes application/json
    ],
)
def test_what_the_model_allows_reaches_the_handler(
    validators: Validators, resource: str, body: bytes, headers: dict[str, str]
) -> None:
    assert _refused(validators, resource, body, headers) is None


def test_a_method_without_a_validator_is_not_checked(validators: Validators) -> None:
    assert check(validators, "GET", "/profiles", {}, {}, b"not json") is None


def test_a_missing_required_parameter_is_refused_before_the_body() -> None:
    rule = MethodValidation(
        schema={"type": "object"},
        validate_body=True,
        validate_parameters=True,
        required=(("querystring", "limit"), ("header", "Idempotency-Key")),
    )
    validators = Validators({("POST", "/x"): rule})
    status, data = check(validators, "POST", "/x", {"idempotency-key": "k"}, {}, b"[]") or (0, b"")
    assert status == 400
    assert json.loads(data) == {"message": "Missing required request parameters: [limit]"}  # API Gateway's default
    assert check(validators, "POST", "/x", {"Idempotency-Key": "k"}, {"limit": ["5"]}, b"{}") is None
