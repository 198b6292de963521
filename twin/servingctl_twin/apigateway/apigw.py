"""The twin's API Gateway: HTTP on 127.0.0.1 -> REST proxy events -> the real api Lambda handler.

Owns the translation both ways (an HTTP request becomes the proxy event API Gateway would send, the
handler's {statusCode, headers, body} becomes the HTTP answer), GET /openapi.json (the twin's own
convenience, unsigned), and what API Gateway refuses before the function runs, with its answers:
a body over the 10 MB payload quota (413), a route the API does not define and an unsigned request
(403 Missing Authentication Token), an unknown key, a wrongly scoped, expired or wrong SigV4
signature (403, verified with botocore's signer), and a caller the resource policy does not admit
(403, template.yaml's statements evaluated by servingctl_twin.iam), and a request its method's
validator rejects (400 as the template's gateway response renders it, servingctl_twin.apigateway.validators).
The routes themselves live only in servingctl.api (the handler is invoked through the twin's HandlerRouter, like every other
function), so there is no second implementation of them.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from servingctl_cli.sigv4 import TWIN_ACCESS_KEY_ID, TWIN_SECRET_ACCESS_KEY
from servingctl_twin import iam
from servingctl_twin.apigateway.validators import Validators, check

logger = logging.getLogger("servingctl_twin.apigateway.apigw")
ACCOUNT_ID = "123456789012"
API_ID = "twinapi001"
STAGE = "local"
# (payload bytes) -> (answer bytes, function error or None), e.g. a bound HandlerRouter call.
Invoke = Callable[[bytes], tuple[bytes, str | None]]
MAX_PAYLOAD_BYTES = 10 * 1024 * 1024  # API Gateway's REST API payload quota (10 MB): larger is a 413
SIGNATURE_SKEW = timedelta(minutes=5)  # a SigV4 signature older or newer than this is refused
SERVICE = "execute-api"


@dataclass(frozen=True)
class Principal:
    """An IAM identity the twin's API Gateway knows by its access key (what IAM resolves a key to)."""

    arn: str
    access_key_id: str
    secret_access_key: str
    user_id: str
    org_id: str | None = None
    # The identity's own policy statements; None: not modelled (its account's callers are admitted
    # unless the resource policy denies). Given, a caller of the API's account needs an Allow from
    # it or from the resource policy, as IAM decides for a same-account caller.
    policy: tuple[iam.Statement, ...] | None = field(default=None, compare=False)

    @property
    def account(self) -> str:
        """The principal's account ID."""
        return self.arn.split(":")[4]


# The twin's user: the CLI, the demo and the tests sign with its key (servingctl_cli.sigv4).
LOCAL_PRINCIPAL = Principal(
    f"arn:aws:iam::{ACCOUNT_ID}:user/local", TWIN_ACCESS_KEY_ID, TWIN_SECRET_ACCESS_KEY, "AIDATWINLOCALUSER"
)


@dataclass(frozen=True)
class Refusal:
    """What API Gateway answers instead of calling the function: status, error type and body."""

    status: int
    error_type: str
    body: dict[str, str]

    def headers(self) -> dict[str, str]:
        """The answer's headers (x-amzn-ErrorType names the refusal, as API Gateway's do)."""
        return {"Content-Type": "application/json", "x-amzn-ErrorType": self.error_type}


MISSING_TOKEN = Refusal(403, "MissingAuthenticationTokenException", {"message": "Missing Authentication Token"})
TOO_LARGE = Refusal(413, "RequestEntityTooLargeException", {"message": "Request Too Long"})


def _invalid_signature(message: str) -> Refusal:
    return Refusal(403, "InvalidSignatureException", {"message": message})


def _authorization(header: str) -> dict[str, str] | None:
    """Credential, SignedHeaders and Signature of an AWS4-HMAC-SHA256 Authorization header."""
    algorithm, _, rest = header.partition(" ")
    if algorithm != "AWS4-HMAC-SHA256":
        return None
    parts = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    return parts if {"Credential", "SignedHeaders", "Signature"} <= parts.keys() else None


def authenticate(
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    region: str,
    principals: Mapping[str, Principal],
    now: datetime,
) -> Principal | Refusal:
    """The principal whose SigV4 signature (service execute-api, this region) the request carries,
    or API Gateway's refusal: recomputed with botocore's signer over the headers the caller signed."""
    lower = {k.lower(): v for k, v in headers.items()}
    if "authorization" not in lower:
        return MISSING_TOKEN
    parts = _authorization(lower["authorization"])
    if parts is None:
        return Refusal(
            403,
            "IncompleteSignatureException",
            {
                "message": (
                    "Authorization header requires 'Credential' parameter. Authorization header requires 'Signature' parameter. "
                    "Authorization header requires 'SignedHeaders' parameter. Authorization header requires existence of "
                    f"either a 'X-Amz-Date' or a 'Date' header. Authorization={lower['authorization']}"
                )
            },
        )
    scope = parts["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return Refusal(403, "IncompleteSignatureException", {"message": f"Credential is malformed: {parts['Credential']}"})
    key_id, day, scope_region, service, _ = scope
    principal = principals.get(key_id)
    if principal is None:
        return Refusal(403, "UnrecognizedClientException", {"message": "The security token included in the request is invalid."})
    if service != SERVICE:
        return _invalid_signature(f"Credential should be scoped to correct service: '{SERVICE}'. ")
    if scope_region != region:
        return _invalid_signature(f"Credential should be scoped to a valid region, not '{scope_region}'. ")
    stamp = lower.get("x-amz-date", "")
    try:
        signed_at = datetime.strptime(stamp, SIGV4_TIMESTAMP).replace(tzinfo=UTC)
    except ValueError:
        return Refusal(
            403,
            "IncompleteSignatureException",
            {"message": ("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")},
        )
    shown = now.strftime(SIGV4_TIMESTAMP)
    if signed_at < now - SIGNATURE_SKEW:
        return _invalid_signature(
            f"Signature expired: {stamp} is now earlier than "
            f"{(now - SIGNATURE_SKEW).strftime(SIGV4_TIMESTAMP)} ({shown} - 5 min.)"
        )
    if signed_at > now + SIGNATURE_SKEW:
        return _invalid_signature(
            f"Signature not yet current: {stamp} is still later than "
            f"{(now + SIGNATURE_SKEW).strftime(SIGV4_TIMESTAMP)} ({shown} + 5 min.)"
        )
    signed = {name: lower.get(name, "") for name in parts["SignedHeaders"].split(";")}
    request = AWSRequest(method=method, url=f"http://{lower.get('host', '')}{raw_path}", data=body, headers=signed)
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(principal.access_key_id, principal.secret_access_key), SERVICE, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if day != stamp[:8] or expected != parts["Signature"]:
        return _invalid_signature(
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method. Consult the service documentation for details."
        )
    return principal


def authorize(principal: Principal, resource_arn: str, statements: Sequence[iam.Statement], api_account: str) -> Refusal | None:
    """The resource policy's verdict (None: admitted). An explicit Deny refuses anyone; a principal of
    another account needs an Allow (its own policies are assumed to allow: the twin has none of theirs);
    the API's own account is admitted unless denied (its callers' policies decide on AWS)."""
    context = {"aws:PrincipalArn": (principal.arn,), "aws:PrincipalAccount": (principal.account,)}
    if principal.org_id:
        context["aws:PrincipalOrgID"] = (principal.org_id,)
    request = iam.Request(f"{SERVICE}:Invoke", resource_arn, context)
    applying = [s for s in statements if iam.principal_applies(s, principal.arn) and iam.statement_applies(s, request)]
    masked = resource_arn.replace(f":{api_account}:", f":{'*' * 8}{api_account[-4:]}:", 1)
    refused = f"User: {principal.arn} is not authorized to perform: {SERVICE}:Invoke on resource: {masked}"
    if any(s.get("Effect") == "Deny" for s in applying):
        return Refusal(403, "AccessDeniedException", {"Message": refused + " with an explicit deny"})
    if principal.account != api_account and not any(s.get("Effect") == "Allow" for s in applying):
        return Refusal(403, "AccessDeniedException", {"Message": refused})
    # A resource-policy Allow naming the account (its root) delegates to the account's identity
    # policies; only one naming the caller itself (or "*") admits it without them (IAM's evaluation
    # for a caller in the resource's account).
    direct = [s for s in applying if s.get("Effect") == "Allow" and _names_caller(s, principal.arn)]
    if principal.policy is not None and not direct:
        identity = iam.Policy(tuple((str(i), st) for i, st in enumerate(principal.policy)))
        if not identity.allowing(request):
            return Refusal(403, "AccessDeniedException", {"Message": refused})
    return None


def _names_caller(statement: iam.Statement, principal_arn: str) -> bool:
    """True when a statement's Principal is "*" or the caller's own ARN (not its account)."""
    given = statement.get("Principal")
    names = [given] if isinstance(given, str) else given.get("AWS", []) if isinstance(given, dict) else []
    return any(name in ("*", principal_arn) for name in ([names] if isinstance(names, str) else names))


def render_resource_policy(statements: Sequence[iam.Statement], region: str, account: str) -> list[iam.Statement]:
    """The policy as API Gateway stores it: execute-api:/... resources become this API's ARNs."""
    prefix = f"arn:aws:{SERVICE}:{region}:{account}:{API_ID}/"

    def expand(resource: str) -> str:
        return prefix + resource.removeprefix(f"{SERVICE}:/") if resource.startswith(f"{SERVICE}:/") else resource

    def resources(given: str | list[str]) -> list[str]:
        return [expand(r) for r in ([given] if isinstance(given, str) else given)]

    return [{**s, "Resource": resources(s["Resource"])} if "Resource" in s else s for s in statements]


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$")


def match_resource(templates: Sequence[str], path: str) -> tuple[str, dict[str, str] | None] | None:
    """The API Gateway resource (/profiles/{name}) a path matches and its path parameters (None: no
    resource of the API matches)."""
    for template in sorted(templates, key=lambda t: (t.count("{"), -len(t))):
        found = _template_regex(template).match(path)
        if found:
            return template, {k: unquote(v) for k, v in found.groupdict().items()} or None
    return None


def proxy_event(
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    templates: Sequence[str],
    *,
    source_ip: str = "127.0.0.1",
    now: datetime | None = None,
    principal: Principal = LOCAL_PRINCIPAL,
) -> dict[str, Any]:
    """The REST API (v1) proxy event API Gateway sends for this request, IAM-authorized as principal
    (a path no resource matches goes to /{proxy+}, as a catch-all resource would take it)."""
    parts = urlsplit(raw_path)
    path = parts.path or "/"
    resource, path_parameters = match_resource(templates, path) or ("/{proxy+}", {"proxy": path.lstrip("/")})
    query = parse_qs(parts.query, keep_blank_values=True)
    multi_headers: dict[str, list[str]] = {}
    for key, value in headers.items():
        multi_headers.setdefault(key, []).append(value)
    now = now or datetime.now(UTC)
    text_body: str | None
    encoded = False
    try:
        text_body = body.decode() if body else None
    except UnicodeDecodeError:
        text_body, encoded = base64.b64encode(body).decode(), True
    request_id = str(uuid.uuid4())
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": dict(headers) or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": path_parameters,
        "stageVariables": None,
        "requestContext": {
            "resourceId": "twin01",
            "resourcePath": resource,
            "httpMethod": method,
            "extendedRequestId": request_id[:16],
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "path": f"/{STAGE}{path}",
            "accountId": ACCOUNT_ID,
            "protocol": "HTTP/1.1",
            "stage": STAGE,
            "domainPrefix": API_ID,
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "requestId": request_id,
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": principal.account,
                "cognitoIdentityId": None,
                "caller": principal.user_id,
                "sourceIp": source_ip,
                "principalOrgId": principal.org_id,
                "accessKey": principal.access_key_id,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": principal.arn,
                "userAgent": headers.get("User-Agent") or headers.get("user-agent"),
                "user": principal.user_id,
            },
            "domainName": f"{API_ID}.execute-api.local",
            "deploymentId": "twin01",
            "apiId": API_ID,
        },
        "body": text_body,
        "isBase64Encoded": encoded,
    }


def _failure(answer: bytes) -> str:
    """The function error's type, message and stack trace from Lambda's error payload."""
    try:
        error = json.loads(answer)
    except ValueError:
        return answer.decode(errors="replace")
    trace = "".join(error.get("stackTrace") or [])
    return f"{error.get('errorType')}: {error.get('errorMessage')}\n{trace}".rstrip()


class _Server(ThreadingHTTPServer):
    # API Gateway takes bursts of connections: the socketserver default backlog of 5 resets them.
    request_queue_size = 256


class ApiGateway:
    """A threaded HTTP server on host:port invoking the api function for every request API Gateway
    would let through (routes of the OpenAPI document, signed by a known principal, admitted by the
    resource policy: its statements as template.yaml writes them, resolved; accepted by the method's
    request validator)."""

    def __init__(
        self,
        invoke: Invoke,
        openapi: Callable[[], dict[str, Any]],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        region: str = "us-east-1",
        resource_policy: Sequence[iam.Statement] = (),
        validators: Validators | None = None,
    ) -> None:
        self.invoke = invoke
        self.openapi = openapi
        self.routes = {template: {method.upper() for method in operations} for template, operations in openapi()["paths"].items()}
        self.region = region
        self.resource_policy = render_resource_policy(resource_policy, region, ACCOUNT_ID)
        self.validators = validators or Validators()
        self.principals: dict[str, Principal] = {LOCAL_PRINCIPAL.access_key_id: LOCAL_PRINCIPAL}
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __getattr__(self, name: str) -> Any:
                # Every method (do_GET, do_TRACE, ...) goes to the handler, like API Gateway's ANY.
                if name.startswith("do_"):
                    return lambda: gateway._handle(self)
                raise AttributeError(name)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (quiet: the twin prints world events)
                return

        self._server = _Server((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def add_principal(self, principal: Principal) -> Principal:
        """Know another IAM identity by its access key (another user, or another account's)."""
        self.principals[principal.access_key_id] = principal
        return principal

    @property
    def url(self) -> str:
        """Base URL of the API."""
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server's address is (host, port)
        return f"http://{host}:{port}"

    def start(self) -> ApiGateway:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="servingctl-apigw", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _refuse(self, request: BaseHTTPRequestHandler, refusal: Refusal) -> None:
        logger.info("refused %s %s: %s %s", request.command, request.path, refusal.status, refusal.body)
        self._send(request, refusal.status, refusal.headers(), json.dumps(refusal.body).encode())

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        if length > MAX_PAYLOAD_BYTES:
            # Read it all (a client still sending would not see the answer), keeping none of it.
            while length > 0 and (chunk := request.rfile.read(min(length, 1 << 20))):
                length -= len(chunk)
            self._refuse(request, TOO_LARGE)
            return
        body = request.rfile.read(length) if length else b""
        path = urlsplit(request.path).path or "/"
        if request.command == "GET" and path == "/openapi.json":
            self._send(request, 200, {"Content-Type": "application/json"}, json.dumps(self.openapi()).encode())
            return
        matched = match_resource(list(self.routes), path)
        if matched is None or request.command not in self.routes[matched[0]]:
            # API Gateway's answer to a method or resource the API does not define, signed or not.
            self._refuse(request, MISSING_TOKEN)
            return
        headers = dict(request.headers.items())
        now = datetime.now(UTC)
        principal = authenticate(request.command, request.path, headers, body, self.region, self.principals, now)
        if isinstance(principal, Refusal):
            self._refuse(request, principal)
            return
        resource_arn = f"arn:aws:{SERVICE}:{self.region}:{ACCOUNT_ID}:{API_ID}/{STAGE}/{request.command}{path}"
        refusal = authorize(principal, resource_arn, self.resource_policy, ACCOUNT_ID)
        if refusal is not None:
            self._refuse(request, refusal)
            return
        # The request validator runs after authorization, before the integration.
        query = parse_qs(urlsplit(request.path).query, keep_blank_values=True)
        invalid = check(self.validators, request.command, matched[0], headers, query, body)
        if invalid is not None:
            logger.info("refused %s %s: %s %s", request.command, request.path, *invalid)
            self._send(
                request, invalid[0], {"Content-Type": "application/json", "x-amzn-ErrorType": "BadRequestException"}, invalid[1]
            )
            return
        event = proxy_event(
            request.command,
            request.path,
            headers,
            body,
            list(self.routes),
            source_ip=request.client_address[0],
            now=now,
            principal=principal,
        )
        answer, error = self.invoke(json.dumps(event).encode())
        if error is not None:
            # The caller gets no details; the operator does, like API Gateway's execution log.
            logger.error("integration failure on %s %s: %s", request.command, request.path, _failure(answer))
            # What API Gateway answers when the integration fails: a 502 without details.
            self._send(request, 502, {"Content-Type": "application/json"}, b'{"message": "Internal server error"}')
            return
        response = json.loads(answer)
        headers = dict(response.get("headers") or {})
        for key, values in (response.get("multiValueHeaders") or {}).items():
            headers[key] = ", ".join(values)
        payload = response.get("body") or ""
        data = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
        self._send(request, int(response.get("statusCode", 200)), headers, data)

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, headers: Mapping[str, str], data: bytes) -> None:
        request.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("content-length", "connection"):
                request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(data)
