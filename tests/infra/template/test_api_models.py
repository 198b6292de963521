"""The API's guards in template.yaml: the request validators' models say what the handler's strict
models say (fields, types, bounds, nothing unknown), each body route is validated and a refusal is
answered with the validator's detail, and the resource policy admits this account only by default, an
organization or a VPC endpoint by parameter."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from servingctl.api.models import CancelRequest, DatasetUploadRequest, KeepaliveRequest, StartRequest, StopRequest

VALIDATED = {
    "StartProfile": "StartRequest",
    "StopProfile": "StopRequest",
    "Keepalive": "KeepaliveRequest",
    "StartBenchmark": "BenchmarkRequest",
    "CancelBenchmark": "CancelRequest",
    "UploadBenchmarkDataset": "DatasetUploadRequest",
}


def _draft4(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """pydantic's JSON schema of a model as API Gateway's draft-4 model states it."""
    if "$ref" in schema:
        return _draft4(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema:
        [one] = [s for s in schema["anyOf"] if s.get("type") != "null"]
        nullable = _draft4(one, defs)
        return {**nullable, "type": [nullable["type"], "null"]}
    if "properties" in schema:
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {name: _draft4(value, defs) for name, value in schema["properties"].items()},
        } | ({"required": schema["required"]} if "required" in schema else {})
    return {key: schema[key] for key in ("type", "minimum", "maximum", "pattern") if key in schema}


def _api(template: dict) -> dict[str, Any]:
    return template["Resources"]["ServingApi"]["Properties"]


@pytest.mark.parametrize("model", [StartRequest, StopRequest, KeepaliveRequest, CancelRequest, DatasetUploadRequest])
def test_each_validator_model_says_what_the_handlers_model_says(template: dict, model: type[BaseModel]) -> None:
    schema = model.model_json_schema()
    stated = {k: v for k, v in _api(template)["Models"][model.__name__].items() if k != "$schema"}
    assert stated == _draft4(schema, schema.get("$defs", {}))


def test_every_body_route_is_validated_body_and_parameters(template: dict) -> None:
    events = template["Resources"]["ApiFunction"]["Properties"]["Events"]
    for event, model in VALIDATED.items():
        request_model = events[event]["Properties"]["RequestModel"]
        assert request_model["Model"] == model and model in _api(template)["Models"]
        assert request_model["ValidateBody"] is True and request_model["ValidateParameters"] is True
    posts = {name for name, e in events.items() if e["Properties"]["Method"] == "POST"}
    assert posts == set(VALIDATED)


def test_the_resource_policy_admits_this_account_and_widens_or_narrows_only_by_parameter(template: dict) -> None:
    this_account, organization, endpoint = _api(template)["Auth"]["ResourcePolicy"]["CustomStatements"]
    assert this_account["Effect"] == "Allow" and this_account["Action"] == "execute-api:Invoke"
    assert this_account["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}
    condition, allow, absent = organization["Fn::If"]
    assert condition == "HasApiOrganization" and absent == {"Ref": "AWS::NoValue"}
    assert allow["Effect"] == "Allow" and allow["Condition"] == {
        "StringEquals": {"aws:PrincipalOrgID": {"Ref": "ApiOrganizationId"}}
    }
    condition, deny, absent = endpoint["Fn::If"]
    assert condition == "HasApiVpcEndpoint" and absent == {"Ref": "AWS::NoValue"}
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"StringNotEquals": {"aws:SourceVpce": {"Ref": "ApiVpcEndpointId"}}}
    for name in ("ApiOrganizationId", "ApiVpcEndpointId"):
        assert template["Parameters"][name]["Default"] == ""


@pytest.mark.parametrize("kind", ["BAD_REQUEST_BODY", "BAD_REQUEST_PARAMETERS"])
def test_a_refused_body_or_parameter_is_answered_with_the_validators_detail(cfn: dict, kind: str) -> None:
    [api] = [r for r in cfn["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    response = api["Properties"]["Body"]["x-amazon-apigateway-gateway-responses"][kind]
    assert response["statusCode"] == "400"
    # A gateway response template is simple substitution (no VTL): messageString is already quoted.
    assert response["responseTemplates"]["application/json"] == (
        '{"message": $context.error.messageString, "detail": "$context.error.validationErrorString"}'
    )
