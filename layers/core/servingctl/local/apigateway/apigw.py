"""The twin's API Gateway: HTTP on 127.0.0.1 -> REST proxy events -> the real api Lambda handler.

Owns the translation both ways (an HTTP request becomes the proxy event API Gateway would send, the
handler's {statusCode, headers, body} becomes the HTTP answer) and GET /openapi.json. The routes
themselves live only in servingctl.api (the handler is invoked through the twin's HandlerRouter,
like every other function), so there is no second implementation of them.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

logger = logging.getLogger("servingctl.local.apigw")
ACCOUNT_ID = "123456789012"
API_ID = "twinapi001"
STAGE = "local"
# (payload bytes) -> (answer bytes, function error or None), e.g. a bound HandlerRouter call.
Invoke = Callable[[bytes], tuple[bytes, str | None]]


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$")


def match_resource(templates: list[str], path: str) -> tuple[str, dict[str, str] | None]:
    """The API Gateway resource (/profiles/{name}) a path matches and its path parameters."""
    for template in sorted(templates, key=lambda t: (t.count("{"), -len(t))):
        found = _template_regex(template).match(path)
        if found:
            return template, {k: unquote(v) for k, v in found.groupdict().items()} or None
    return "/{proxy+}", {"proxy": path.lstrip("/")}


def proxy_event(
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    templates: list[str],
    *,
    source_ip: str = "127.0.0.1",
    now: datetime | None = None,
) -> dict[str, Any]:
    """The REST API (v1) proxy event API Gateway sends for this request, IAM-authorized."""
    parts = urlsplit(raw_path)
    path = parts.path or "/"
    resource, path_parameters = match_resource(templates, path)
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
                "cognitoIdentityPoolId": None, "accountId": ACCOUNT_ID, "cognitoIdentityId": None,
                "caller": "AIDATWINLOCALUSER", "sourceIp": source_ip, "principalOrgId": None,
                "accessKey": "ASIATWINLOCALKEY", "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None, "userArn": f"arn:aws:iam::{ACCOUNT_ID}:user/local",
                "userAgent": headers.get("User-Agent") or headers.get("user-agent"), "user": "AIDATWINLOCALUSER",
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
    """A threaded HTTP server on host:port invoking the api function for every request."""

    def __init__(self, invoke: Invoke, openapi: Callable[[], dict[str, Any]], host: str = "127.0.0.1", port: int = 0) -> None:
        self.invoke = invoke
        self.openapi = openapi
        self.templates = list(openapi()["paths"])
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

    @property
    def url(self) -> str:
        """Base URL of the API."""
        host, port = self._server.server_address[:2]
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

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        if request.command == "GET" and urlsplit(request.path).path == "/openapi.json":
            self._send(request, 200, {"Content-Type": "application/json"}, json.dumps(self.openapi()).encode())
            return
        event = proxy_event(request.command, request.path, dict(request.headers.items()), body, self.templates,
                            source_ip=request.client_address[0])
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

