"""The twin's API Gateway checks without a twin: SigV4 signatures recomputed with botocore (the CLI's
signer accepted; another secret, region, key, an old signature or a changed body refused with AWS's
answers) and template.yaml's resource policy (this account; another only through the organization
parameter; anyone outside the VPC endpoint when that parameter is set), and a body template.yaml's
model refuses answered 400 without calling the function."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.credentials import Credentials

from servingctl_cli.sigv4 import SigV4, twin_signer
from servingctl_twin import iam
from servingctl_twin.apigateway.apigw import (
    LOCAL_PRINCIPAL,
    MISSING_TOKEN,
    ApiGateway,
    Principal,
    Refusal,
    authenticate,
    authorize,
    render_resource_policy,
)
from servingctl_twin.apigateway.validators import load_validators
from servingctl_twin.eventbridge.rules import load_template

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"
ACCOUNT, REGION = "123456789012", "us-east-1"
PRINCIPALS = {LOCAL_PRINCIPAL.access_key_id: LOCAL_PRINCIPAL}
RESOURCE = f"arn:aws:execute-api:{REGION}:{ACCOUNT}:twinapi001/local/POST/profiles/x/start"
OTHER = Principal("arn:aws:iam::210987654321:user/mallory", "AKIAOTHER", "s", "AIDAMALLORY")


def _signed(auth: httpx.Auth, content: bytes = b'{"lease_minutes": 60}') -> httpx.Request:
    request = httpx.Request(
        "POST",
        "http://127.0.0.1:8700/profiles/x/start?dry=1",
        content=content,
        headers={"Content-Type": "application/json", "Idempotency-Key": "k1"},
    )
    return next(auth.auth_flow(request))


def _check(request: httpx.Request, body: bytes | None = None, now: datetime | None = None) -> Principal | Refusal:
    target = request.url.raw_path.decode()
    return authenticate(
        "POST",
        target,
        dict(request.headers),
        request.content if body is None else body,
        REGION,
        PRINCIPALS,
        now or datetime.now(UTC),
    )


def test_the_clis_signature_is_accepted_as_the_twins_user() -> None:
    assert _check(_signed(twin_signer())) == LOCAL_PRINCIPAL


@pytest.mark.parametrize(
    ("auth", "error_type", "message"),
    [
        (
            SigV4(Credentials(LOCAL_PRINCIPAL.access_key_id, "wrong"), REGION),
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided.",
        ),
        (
            SigV4(Credentials("AKIAUNKNOWN", "x"), REGION),
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ),
        (
            twin_signer("eu-west-1"),
            "InvalidSignatureException",
            "Credential should be scoped to a valid region, not 'eu-west-1'.",
        ),
    ],
)
def test_a_wrong_signature_is_refused_as_api_gateway_does(auth: httpx.Auth, error_type: str, message: str) -> None:
    refusal = _check(_signed(auth))
    assert isinstance(refusal, Refusal) and refusal.status == 403 and refusal.error_type == error_type
    assert refusal.body["message"].startswith(message)


def test_a_changed_body_an_old_signature_and_no_signature_are_refused() -> None:
    request = _signed(twin_signer())
    changed = _check(request, body=b'{"lease_minutes": 600}')
    assert isinstance(changed, Refusal) and changed.error_type == "InvalidSignatureException"
    late = _check(request, now=datetime.now(UTC) + timedelta(minutes=5, seconds=30))
    assert isinstance(late, Refusal) and late.body["message"].startswith("Signature expired:")
    assert _check(request, now=datetime.now(UTC) + timedelta(minutes=4, seconds=30)) == LOCAL_PRINCIPAL  # inside 5 min
    unsigned = httpx.Request("GET", "http://127.0.0.1:8700/profiles")
    assert _check(unsigned, body=b"") == MISSING_TOKEN


def _policy(**parameters: str) -> list[iam.Statement]:
    template = load_template(TEMPLATE)
    refs: dict[str, Any] = {name: p["Default"] for name, p in template["Parameters"].items() if "Default" in p}
    refs |= {"AWS::Partition": "aws", "AWS::AccountId": ACCOUNT, "AWS::Region": REGION, **parameters}
    statements = template["Resources"]["ServingApi"]["Properties"]["Auth"]["ResourcePolicy"]["CustomStatements"]
    return render_resource_policy(iam.resolve(statements, refs, iam.evaluate_conditions(template, refs)), REGION, ACCOUNT)


def test_by_default_this_account_only() -> None:
    policy = _policy()
    assert [s["Sid"] for s in policy] == ["ThisAccount"]
    assert policy[0]["Resource"] == [f"arn:aws:execute-api:{REGION}:{ACCOUNT}:twinapi001/*"]
    assert authorize(LOCAL_PRINCIPAL, RESOURCE, policy, ACCOUNT) is None
    refusal = authorize(OTHER, RESOURCE, policy, ACCOUNT)
    assert refusal is not None and refusal.status == 403 and refusal.error_type == "AccessDeniedException"
    assert refusal.body == {
        "Message": f"User: {OTHER.arn} is not authorized to perform: execute-api:Invoke on resource: "
        "arn:aws:execute-api:us-east-1:********9012:twinapi001/local/POST/profiles/x/start"
    }


def test_the_organization_parameter_admits_its_principals_only() -> None:
    policy = _policy(ApiOrganizationId="o-abcdefghij")
    member = Principal("arn:aws:iam::210987654321:user/colleague", "AKIAMEMBER", "s", "AIDAMEMBER", org_id="o-abcdefghij")
    assert authorize(member, RESOURCE, policy, ACCOUNT) is None
    assert authorize(OTHER, RESOURCE, policy, ACCOUNT) is not None


def test_the_vpc_endpoint_parameter_denies_every_request_from_elsewhere() -> None:
    refusal = authorize(LOCAL_PRINCIPAL, RESOURCE, _policy(ApiVpcEndpointId="vpce-0123456789abcdef0"), ACCOUNT)
    assert refusal is not None and refusal.body["Message"].endswith(" with an explicit deny")


def test_a_body_the_model_refuses_never_reaches_the_function() -> None:
    calls: list[bytes] = []

    def invoke(payload: bytes) -> tuple[bytes, str | None]:
        calls.append(payload)
        return json.dumps({"statusCode": 202, "body": "{}"}).encode(), None

    openapi = {"paths": {"/profiles/{name}/start": {"post": {}}}}
    gateway = ApiGateway(invoke, lambda: openapi, validators=load_validators(load_template(TEMPLATE), "ServingApi")).start()
    try:
        with httpx.Client(base_url=gateway.url, auth=twin_signer(), timeout=30) as client:
            refused = client.post("/profiles/x/start", json={"lease_minute": 60})
            assert refused.status_code == 400 and refused.headers["x-amzn-ErrorType"] == "BadRequestException"
            assert refused.json() == {
                "message": "Invalid request body",
                "detail": ('[object instance has properties which are not allowed by the schema: ["lease_minute"]]'),
            }
            assert calls == []
            assert client.post("/profiles/x/start", json={"lease_minutes": 60}).status_code == 202
            assert len(calls) == 1
    finally:
        gateway.stop()
