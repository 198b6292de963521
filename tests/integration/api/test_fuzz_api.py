"""Property-based fuzzing of the REST API (schemathesis, the committed OpenAPI document) against the
twin's HTTP API, every request SigV4-signed as the twin's user: the real handler behind the API
Gateway translation never answers a server error, answers only documented status codes, and its
bodies match the document. Bounded examples keep it fast."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
import schemathesis
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from servingctl.api.routes import OPENAPI_PATH
from servingctl_twin.apigateway.apigw import LOCAL_PRINCIPAL
from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

schema = schemathesis.openapi.from_path(OPENAPI_PATH)


class _SignedAsTheTwinsUser(requests.auth.AuthBase):
    """schemathesis sends with requests: sign each prepared request as the CLI does (host and body)."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body.encode() if isinstance(request.body, str) else request.body or b""
        signed = {k: v for k, v in request.headers.items() if k.lower() == "content-type"}
        aws = AWSRequest(method=request.method, url=request.url, data=body, headers=signed)
        credentials = Credentials(LOCAL_PRINCIPAL.access_key_id, LOCAL_PRINCIPAL.secret_access_key)
        SigV4Auth(credentials, "execute-api", "us-east-1").add_auth(aws)
        request.headers.update({k: v for k, v in aws.headers.items() if k in ("Authorization", "X-Amz-Date")})
        return request


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0) as twin:
        assert twin.api_url is not None
        yield twin.api_url


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_error_and_answers_match_the_document(case: schemathesis.Case, api_url: str) -> None:
    case.call_and_validate(
        base_url=api_url,
        auth=_SignedAsTheTwinsUser(),
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
    )
