"""The one HTTP client every `servingctl` command uses to reach the REST API.

Owns finding the API (--api-url, --local, $SERVINGCTL_API_URL, or the local twin found through the
state file `servingctl local up` writes: never a guessed port), SigV4 signing with the user's usual
AWS credentials for the deployed API (API Gateway with IAM auth; a loopback URL is the twin, signed
with the twin's own user, servingctl_cli.sigv4), the twin's state file, and turning error answers into ApiError and
network failures into Unreachable ("cannot connect to URL"). httpx and botocore load only when a
request is made, so `--help` stays fast. Commands add its flags with add_api_arguments(parser)
and call connect(args).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import urlsplit

from servingctl_cli.settings import API_URL_ENV, CliSettings

if TYPE_CHECKING:
    import httpx
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

TWIN_START_WAIT_S = 120  # a twin starts in 10-30 s (moto, the state machines, the world)
EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com$")
# Exit codes shared by every command (130: interrupted by Ctrl-C, as shells report SIGINT).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# API field -> the flag or argument a person typed (for fields a command does not map itself).
FLAGS = {
    "path.name": "NAME",
    "body.lease_minutes": "--lease",
    "body.minutes": "--minutes",
    "body.allow_shared_pool": "--allow-shared-pool",
    "body.poll": "--poll-interval",
    "query.profile": "--profile",
    "query.limit": "--limit",
    "path.execution_id": "EXECUTION",
}


class ApiError(Exception):
    """The API answered an error (4xx/5xx); message and field come from its ErrorBody."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.field = status, message, field


# The status of an answer that does not match the API's model (the API said something this CLI cannot read).
MISMATCH_STATUS = 502


def answer_as(model: type[M], answer: Any, what: str) -> M:
    """The API's answer read through its model (servingctl.api.models); an answer that does not match
    is an ApiError naming each field at fault: a CLI and an API of different versions say so."""
    from pydantic import ValidationError

    try:
        return model.model_validate(answer)
    except ValidationError as exc:
        raise _mismatch(exc, model.__name__, what) from None


def answers_as(model: type[M], answer: Any, what: str) -> list[M]:
    """A list answer read through the model of its items (answer_as), the item at fault named by its index."""
    if not isinstance(answer, list):
        raise ApiError(
            MISMATCH_STATUS, f"{what}: the API's answer is not a list of {model.__name__}: got {type(answer).__name__}"
        )
    return [answer_as(model, item, f"{what}, item {index}") for index, item in enumerate(answer)]


def _mismatch(exc: Exception, shape: str, what: str) -> ApiError:
    from pydantic import ValidationError

    assert isinstance(exc, ValidationError)
    problems = [f"{'.'.join(str(p) for p in e['loc']) or 'the answer'}: {e['msg']}" for e in exc.errors()]
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return ApiError(
        MISMATCH_STATUS,
        f"{what}: the API's answer is not {shape} as this servingctl reads it: {'; '.join(problems[:5])}{more}; "
        "is servingctl the version of the API it talks to?",
    )


class Unreachable(Exception):
    """No API to talk to (not configured, or not answering)."""


def state_dir() -> Path:
    """~/.cache/servingctl (or $XDG_CACHE_HOME/servingctl)."""
    base = CliSettings.from_env().cache_home
    return Path(base) / "servingctl"


def twin_state_path() -> Path:
    """Where `servingctl local up` records its API URL while it runs."""
    return state_dir() / "twin.json"


def write_twin_state(
    api_url: str | None, poll: dict[str, Any] | None = None, region: str | None = None, aws_endpoint_url: str | None = None
) -> Path:
    """Record the running twin (its API URL, its pid, poll settings scaled to its clock, the region
    its API checks signatures for and its emulated AWS endpoint), or with api_url None that it is
    starting: commands run meanwhile wait for it instead of finding none."""
    path = twin_state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = (
        {"api_url": api_url, "pid": os.getpid(), "poll": poll, "region": region, "aws_endpoint_url": aws_endpoint_url}
        if api_url
        else {"starting": True, "pid": os.getpid()}
    )
    path.write_text(json.dumps(record))
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


class Client:
    """GET/POST JSON against the API; errors become ApiError, connection problems Unreachable."""

    def __init__(
        self,
        base_url: str,
        *,
        auth: httpx.Auth | None = None,
        local: bool = False,
        poll: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.local = local
        self.poll = poll  # the twin's suggested wait-loop pacing, None for a deployed API
        self._http = httpx.Client(
            base_url=self.base_url,
            auth=auth,
            timeout=30.0,
            trust_env=not local,
            transport=transport,
            headers={"Accept": "application/json", "User-Agent": "servingctl"},
        )

    def _answer(self, response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:
            # An S3 website, a proxy's page or API Gateway's XML: whatever answered is not this API.
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            raise Unreachable(
                f"{self.base_url} is not the servingctl API: it answered HTTP {response.status_code} "
                f"{response.reason_phrase} with {kind}, not JSON (check --api-url or ${API_URL_ENV})"
            ) from None
        if response.status_code >= 400:
            # API Gateway's access refusals say "Message"; every other answer, "message". Its request
            # validator's refusal adds the detail (template.yaml's BAD_REQUEST_BODY gateway response).
            message = (body.get("message") or body.get("Message")) if isinstance(body, dict) else None
            if message:
                detail = body.get("detail") if isinstance(body, dict) else None
                raise ApiError(
                    response.status_code,
                    f"{message}: {detail}" if detail else str(message),
                    body.get("field") if isinstance(body, dict) else None,
                )
            raise ApiError(response.status_code, response.text[:300] or response.reason_phrase)
        return body

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            return self._answer(self._http.request(method, path, **kwargs))
        except httpx.TimeoutException as exc:
            raise Unreachable(f"{self.base_url} did not answer in time ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot connect to {self.base_url} ({_reason(exc)})") from exc

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
        parser.add_argument("--json", action="store_true", help="machine-readable output (the same as --output json)")
    add_output_argument(parser)


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """--output table|json|yaml after the command too (a command whose --output is a directory keeps
    it: the global `servingctl --output FORMAT COMMAND` still applies)."""
    if "--output" not in parser._option_string_actions:
        parser.add_argument(
            "--output",
            dest="output_format",
            choices=("table", "json", "yaml"),
            default=argparse.SUPPRESS,  # unset here leaves the global flag's value
            help="output format (default: $SERVINGCTL_OUTPUT, the config file's output, else table)",
        )


def _reason(exc: Exception) -> str:
    """The OS's words for a network failure (Connection refused, Name or service not known, ...)."""
    text = str(exc) or type(exc).__name__
    return re.sub(r"^\[Errno -?\d+\] ", "", text)


def is_loopback(url: str) -> bool:
    """True for http(s)://127.x / [::1] / localhost URLs: the local twin, never the deployed API."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _when_up(state: dict[str, Any]) -> dict[str, Any]:
    """The record of a twin that was starting, once it is up (Unreachable if it stops or takes too long)."""
    pid = state["pid"]
    print(f"waiting for the local twin (pid {pid}) to finish starting...", file=sys.stderr, flush=True)
    deadline = time.monotonic() + TWIN_START_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = read_twin_state()
        if current is None or current["pid"] != pid:
            raise Unreachable(f"the local twin (pid {pid}) stopped while starting; its output says why")
        if not current.get("starting"):
            return current
    raise Unreachable(f"the local twin (pid {pid}) is still starting after {TWIN_START_WAIT_S} s")


def running_twin_state() -> dict[str, Any] | None:
    """The running twin's record, waited for while it starts; None when no twin runs."""
    state = read_twin_state()
    return _when_up(state) if state is not None and state.get("starting") else state


@overload
def _twin(url: str) -> Client: ...


@overload
def _twin(url: None = None) -> Client | None: ...


def _twin(url: str | None = None) -> Client | None:
    """The running twin from its state file (None when none runs; waited for while it starts), or
    the twin at url, signed as the twin's user, with the pacing and region the state file gives when
    it names that URL."""
    state = read_twin_state() or {}
    if url is None and state.get("starting"):
        state = _when_up(state)
    url = url or state.get("api_url")
    if url is None:
        return None
    from servingctl_cli.sigv4 import twin_signer

    same = str(state.get("api_url", "")).rstrip("/") == url.rstrip("/")
    return Client(
        url, local=True, poll=state.get("poll") if same else None, auth=twin_signer(state.get("region") if same else None)
    )


def _signed(url: str, aws_profile: str | None, region: str | None) -> Client:
    import boto3

    from servingctl_cli.sigv4 import SigV4

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


def _api(url: str, args: argparse.Namespace) -> Client:
    return _twin(url) if is_loopback(url) else _signed(url, args.aws_profile, args.region)


def connect(args: argparse.Namespace) -> Client:
    """The API the user means: --api-url, --local, $SERVINGCTL_API_URL, else the running local twin."""
    if args.api_url:
        return _api(args.api_url, args)
    if args.local:
        twin = _twin()
        if twin is None:
            raise Unreachable(f"--local: no twin is running (no live {twin_state_path()}); start one with `servingctl local up`")
        return twin
    api_url = CliSettings.from_env().api_url
    if api_url:
        return _api(api_url, args)
    twin = _twin()
    if twin is None:
        raise Unreachable(f"no API: pass --api-url, set {API_URL_ENV}, or run `servingctl local up`")
    return twin


def for_people(exc: ApiError, flags: dict[str, str] | None = None) -> str:
    """An API error as a person reads it: the input named as the flag they typed, no status codes.

    The API's messages are "field: what is allowed" parts joined by "; " (a body field, or a dotted
    path inside one); each part's field becomes the command's flag when it has one.
    """
    by_field = {key.split(".", 1)[-1]: flag for key, flag in {**FLAGS, **(flags or {})}.items()}
    parts = []
    for part in exc.message.removeprefix("invalid request: ").split("; "):
        field, sep, text = part.partition(": ")
        flag = by_field.get(field) or by_field.get(field.split(".")[0])
        if sep and field in ("body", ""):  # a rule about the whole request: its words are enough
            part = text
        parts.append(f"{flag} {text}" if sep and flag and flag.startswith("-") else part)
    return "; ".join(parts)


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
            return _fail(args, for_people(exc, getattr(args, "flags", None)), EXIT_FAILED, status=exc.status, field=exc.field)
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
