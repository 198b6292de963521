"""The one HTTP client every `servingctl` command uses to reach the REST API.

Owns finding the API (--api-url, --local, $SERVINGCTL_API_URL, or the local twin found through its
state file or on 127.0.0.1:8700), SigV4 signing with the user's usual AWS credentials for the
deployed API (API Gateway with IAM auth), the twin's state file, and turning error answers into
ApiError. Commands add its flags with add_api_arguments(parser) and call connect(args).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

DEFAULT_TWIN_PORT = 8700
API_URL_ENV = "SERVINGCTL_API_URL"
EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com$")
PROBE_TIMEOUT_S = 0.5
# Exit codes shared by every command.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class ApiError(Exception):
    """The API answered an error (4xx/5xx); message and field come from its ErrorBody."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.field = status, message, field


class Unreachable(Exception):
    """No API to talk to (not configured, or not answering)."""


def state_dir() -> Path:
    """~/.cache/servingctl (or $XDG_CACHE_HOME/servingctl)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servingctl"


def twin_state_path() -> Path:
    """Where `servingctl local up` records its API URL while it runs."""
    return state_dir() / "twin.json"


def write_twin_state(api_url: str, poll: dict[str, Any]) -> Path:
    """Record the running twin (its API URL, its pid, and poll settings scaled to its clock)."""
    path = twin_state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"api_url": api_url, "pid": os.getpid(), "poll": poll}))
    return path


def clear_twin_state() -> None:
    """Forget the twin (it stopped); only the process that wrote the file removes it."""
    state = read_twin_state()
    if state is not None and state.get("pid") == os.getpid():
        twin_state_path().unlink(missing_ok=True)


def read_twin_state() -> dict[str, Any] | None:
    """The running twin's record, None when there is none or its process is gone."""
    try:
        state = json.loads(twin_state_path().read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if isinstance(state, dict) else None


class SigV4(httpx.Auth):
    """Signs each request like the AWS CLI does (service execute-api), with the botocore credentials."""

    requires_request_body = True

    def __init__(self, credentials: Any, region: str) -> None:
        self.credentials, self.region = credentials, region

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Add Authorization, X-Amz-Date (and X-Amz-Security-Token) to the request."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        signed = {"host", "content-type", "idempotency-key"}
        aws = AWSRequest(
            method=request.method, url=str(request.url), data=request.content,
            headers={k: v for k, v in request.headers.items() if k.lower() in signed},
        )
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(aws)
        for key, value in aws.headers.items():
            request.headers[key] = value
        yield request


class Client:
    """GET/POST JSON against the API; errors become ApiError, connection problems Unreachable."""

    def __init__(self, base_url: str, *, auth: httpx.Auth | None = None, local: bool = False,
                 poll: dict[str, Any] | None = None, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.local = local
        self.poll = poll  # the twin's suggested wait-loop pacing, None for a deployed API
        self._http = httpx.Client(base_url=self.base_url, auth=auth, timeout=30.0, trust_env=not local, transport=transport,
                                  headers={"Accept": "application/json", "User-Agent": "servingctl"})

    def _answer(self, response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        if response.status_code >= 400:
            if isinstance(body, dict) and "message" in body:
                raise ApiError(response.status_code, str(body["message"]), body.get("field"))
            raise ApiError(response.status_code, response.text[:300] or response.reason_phrase)
        return body

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return self._answer(self._http.request(method, path, **kwargs))
        except httpx.TransportError as exc:
            raise Unreachable(f"{self.base_url}: {exc}") from exc

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET path and return the parsed JSON."""
        return self._send("GET", path, params={k: v for k, v in (params or {}).items() if v is not None})

    def post(self, path: str, body: dict[str, Any] | None = None, *, idempotent: bool = False) -> Any:
        """POST a JSON body; idempotent=True sends a fresh Idempotency-Key (kept across httpx retries)."""
        headers = {"Idempotency-Key": str(uuid.uuid4())} if idempotent else {}
        return self._send("POST", path, json=body or {}, headers=headers)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()


def add_api_arguments(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """--api-url, --local, --aws-profile, --region and --json (every API command takes them;
    json_flag=False for a command that has its own --json)."""
    group = parser.add_argument_group("API")
    group.add_argument("--api-url", help=f"the deployed API's URL (default ${API_URL_ENV}, else the local twin if it runs)")
    group.add_argument("--local", action="store_true", help="talk to the local twin (servingctl local up)")
    group.add_argument("--aws-profile", help="AWS credentials profile that signs requests (default: the usual chain)")
    group.add_argument("--region", help="region of the deployed API (default: from its URL)")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def _probe(url: str) -> bool:
    try:
        return httpx.get(f"{url}/openapi.json", timeout=PROBE_TIMEOUT_S, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _twin() -> Client | None:
    state = read_twin_state()
    if state is not None:
        return Client(str(state["api_url"]), local=True, poll=state.get("poll"))
    url = f"http://127.0.0.1:{DEFAULT_TWIN_PORT}"
    return Client(url, local=True) if _probe(url) else None


def _signed(url: str, aws_profile: str | None, region: str | None) -> Client:
    import boto3

    session = boto3.Session(profile_name=aws_profile)
    host = urlsplit(url).hostname or ""
    found = EXECUTE_API_HOST.match(host)
    region = region or (found.group(1) if found else None) or session.region_name
    if not region:
        raise Unreachable(f"{url}: cannot tell the API's region; pass --region")
    credentials = session.get_credentials()
    if credentials is None:
        raise Unreachable("no AWS credentials found to sign requests (aws configure, AWS_PROFILE or --aws-profile)")
    return Client(url, auth=SigV4(credentials, region))


def connect(args: argparse.Namespace) -> Client:
    """The API the user means: --api-url, --local, $SERVINGCTL_API_URL, else the running local twin."""
    if args.api_url:
        return _signed(args.api_url, args.aws_profile, args.region)
    if args.local:
        twin = _twin()
        if twin is None:
            raise Unreachable(f"--local: no twin is running (no {twin_state_path()} and nothing on 127.0.0.1:{DEFAULT_TWIN_PORT}); "
                              "start one with `servingctl local up`")
        return twin
    if os.environ.get(API_URL_ENV):
        return _signed(os.environ[API_URL_ENV], args.aws_profile, args.region)
    twin = _twin()
    if twin is None:
        raise Unreachable(f"no API: pass --api-url, set {API_URL_ENV}, or run `servingctl local up`")
    return twin


def api_command(command: Callable[[argparse.Namespace, Client], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: connect, run, and turn API errors into a printed reason and an exit code."""

    def run(args: argparse.Namespace) -> int:
        try:
            client = connect(args)
        except Unreachable as exc:
            return _fail(args, str(exc), EXIT_UNREACHABLE)
        try:
            return command(args, client)
        except ApiError as exc:
            field = f" ({exc.field})" if exc.field else ""
            return _fail(args, f"{exc.status}{field}: {exc.message}", EXIT_FAILED, status=exc.status, field=exc.field)
        except Unreachable as exc:
            return _fail(args, str(exc), EXIT_UNREACHABLE)
        finally:
            client.close()

    return run


def _fail(args: argparse.Namespace, message: str, code: int, **extra: Any) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"error": message, **extra}))
    else:
        print(f"servingctl {args.command}: error: {message}", file=sys.stderr)
    return code
