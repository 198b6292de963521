"""SigV4 signing of the CLI's requests to the deployed API (API Gateway with IAM auth) and to the
local twin's, which checks signatures as API Gateway does (servingctl_twin.apigateway.apigw) and knows one
user: the twin's own access key below, as moto knows its "testing" credentials."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

# The twin's IAM user (arn:aws:iam::123456789012:user/local): not a secret, it opens nothing on AWS.
TWIN_ACCESS_KEY_ID = "AKIATWINLOCALUSER000"
TWIN_SECRET_ACCESS_KEY = "twin-local-secret-access-key"
TWIN_REGION = "us-east-1"  # the reference registry's region; the twin's state file names its own


class SigV4(httpx.Auth):
    """Signs each request like the AWS CLI does (service execute-api), with the botocore credentials."""

    requires_request_body = True

    def __init__(self, credentials: Any, region: str) -> None:
        self.credentials, self.region = credentials, region

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Add Authorization, X-Amz-Date (and X-Amz-Security-Token) to the request."""
        signed = {"host", "content-type", "idempotency-key"}
        aws = AWSRequest(
            method=request.method,
            url=str(request.url),
            data=request.content,
            headers={k: v for k, v in request.headers.items() if k.lower() in signed},
        )
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(aws)
        for key, value in aws.headers.items():
            request.headers[key] = value
        yield request


def twin_signer(region: str | None = None) -> SigV4:
    """Signs as the twin's user, for the twin's API in region (default the reference registry's)."""
    return SigV4(Credentials(TWIN_ACCESS_KEY_ID, TWIN_SECRET_ACCESS_KEY), region or TWIN_REGION)
