"""The CLI's HTTP client: SigV4 signing for the deployed API, finding the API, errors and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from botocore.credentials import Credentials

from servingctl_cli import client
from servingctl_cli.main import main
from servingctl_cli.sigv4 import SigV4


def test_requests_to_the_deployed_api_are_sigv4_signed_for_execute_api() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"ok": True})

    url = "https://a1b2c3d4e5.execute-api.ap-northeast-1.amazonaws.com/v1"
    api = client.Client(
        url, auth=SigV4(Credentials("AKIDEXAMPLE", "secret", "token"), "ap-northeast-1"), transport=httpx.MockTransport(answer)
    )
    assert api.post("/profiles/x/start", {"lease_minutes": 60}, idempotent=True) == {"ok": True}
    [request] = seen
    authorization = request.headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/ap-northeast-1/execute-api/aws4_request" in authorization
    assert "idempotency-key" in authorization.split("SignedHeaders=")[1]  # the key cannot be swapped in transit
    assert request.headers["X-Amz-Security-Token"] == "token" and "X-Amz-Date" in request.headers
    assert json.loads(request.content) == {"lease_minutes": 60}


def test_error_answers_become_api_errors_with_the_field() -> None:
    transport = httpx.MockTransport(
        lambda r: httpx.Response(
            400, json={"status": 400, "error": "BadRequest", "message": "lease_minutes: too long", "field": "body.lease_minutes"}
        )
    )
    api = client.Client("http://127.0.0.1:1", local=True, transport=transport)
    with pytest.raises(client.ApiError) as raised:
        api.post("/profiles/x/start", {})
    assert (raised.value.status, raised.value.field) == (400, "body.lease_minutes")


def test_api_gateways_access_refusal_is_read_for_its_message() -> None:
    said = "User: arn:aws:iam::210987654321:user/m is not authorized to perform: execute-api:Invoke on resource: arn:..."
    transport = httpx.MockTransport(lambda r: httpx.Response(403, json={"Message": said}))
    api = client.Client("http://127.0.0.1:1", local=True, transport=transport)
    with pytest.raises(client.ApiError) as raised:
        api.get("/profiles")
    assert (raised.value.status, raised.value.message, raised.value.field) == (403, said, None)


def test_api_gateways_request_validator_refusal_shows_its_detail() -> None:
    detail = '[object instance has properties which are not allowed by the schema: ["colour"]]'
    transport = httpx.MockTransport(lambda r: httpx.Response(400, json={"message": "Invalid request body", "detail": detail}))
    api = client.Client("http://127.0.0.1:1", local=True, transport=transport)
    with pytest.raises(client.ApiError) as raised:
        api.post("/profiles/x/start", {"colour": "red"})
    assert (raised.value.status, raised.value.message) == (400, f"Invalid request body: {detail}")


def test_the_region_comes_from_the_api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    api = client._signed("https://abc123.execute-api.eu-west-1.amazonaws.com/v1", None, None)
    assert isinstance(api._http.auth, SigV4) and api._http.auth.region == "eu-west-1"


def test_the_twin_is_found_through_its_state_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(client.API_URL_ENV, raising=False)
    assert client.read_twin_state() is None
    client.write_twin_state("http://127.0.0.1:18700", {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5})
    args = type("Args", (), {"api_url": None, "local": False, "aws_profile": None, "region": None})()
    found = client.connect(args)
    assert found.base_url == "http://127.0.0.1:18700" and found.local and found.poll["interval_s"] == 1
    client.clear_twin_state()
    assert not client.twin_state_path().exists()


def test_a_twin_still_starting_is_waited_for_then_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(client.API_URL_ENV, raising=False)
    client.write_twin_state(None)  # what `servingctl local up` records before moto and the world are up
    polls: list[float] = []

    def twin_comes_up(seconds: float) -> None:  # the twin finishes starting while the command waits
        polls.append(seconds)
        if len(polls) == 2:
            client.write_twin_state("http://127.0.0.1:18704", {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5})

    monkeypatch.setattr(client.time, "sleep", twin_comes_up)
    args = type("Args", (), {"api_url": None, "local": True, "aws_profile": None, "region": None})()
    found = client.connect(args)
    assert found.base_url == "http://127.0.0.1:18704" and len(polls) == 2
    assert f"waiting for the local twin (pid {os.getpid()}) to finish starting" in capsys.readouterr().err

    client.write_twin_state(None)
    monkeypatch.setattr(client.time, "sleep", lambda seconds: client.clear_twin_state())  # it fails to start
    with pytest.raises(client.Unreachable, match=f"the local twin \\(pid {os.getpid()}\\) stopped while starting"):
        client.connect(args)


def test_no_api_at_all_exits_3_with_what_to_do_and_never_guesses_a_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(client.API_URL_ENV, raising=False)

    def no_probe(*args: object, **kwargs: object) -> None:
        raise AssertionError("discovery must not probe a fixed port")

    monkeypatch.setattr(httpx, "get", no_probe)
    assert main(["status", "--local"]) == client.EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert "--local: no twin is running" in err and "servingctl local up" in err
    assert main(["status"]) == client.EXIT_UNREACHABLE
    assert "no API: pass --api-url" in capsys.readouterr().err


def test_a_loopback_api_url_is_the_twin_signed_as_its_user_with_its_pacing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)  # none of the user's credentials needed
    client.write_twin_state("http://127.0.0.1:18701", {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}, "eu-west-1")
    for url, poll, region in (
        ("http://127.0.0.1:18701/", {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}, "eu-west-1"),
        ("http://localhost:18702", None, "us-east-1"),
        ("http://[::1]:18703", None, "us-east-1"),
    ):
        args = type("Args", (), {"api_url": url, "local": False, "aws_profile": None, "region": None})()
        found = client.connect(args)
        auth = found._http.auth
        assert isinstance(auth, SigV4) and found.local and found.poll == poll, url
        # The twin's region from its state file (the reference registry's when the file names another twin).
        assert auth.region == region and auth.credentials.access_key == "AKIATWINLOCALUSER000", url
    assert not client.is_loopback("https://abc123.execute-api.eu-west-1.amazonaws.com/v1")
    assert not client.is_loopback("http://127.0.0.1.example.com")


def test_a_network_failure_says_cannot_connect_to_the_url() -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = client.Client(f"http://127.0.0.1:{port}", local=True)
    with pytest.raises(client.Unreachable, match=rf"^cannot connect to http://127.0.0.1:{port} \(.*refused"):
        api.get("/profiles")


@pytest.mark.parametrize(
    ("message", "field", "said"),
    [
        (
            "lease_minutes: must be between 5 and 720 minutes (the max_lease_minutes of m); got 2000",
            "body.lease_minutes",
            "--lease must be between 5 and 720 minutes (the max_lease_minutes of m); got 2000",
        ),
        (
            "invalid request: lease_minutes: must be at least 5; poll.interval_s: must be at least 1",
            None,
            "--lease must be at least 5; --poll-interval must be at least 1",
        ),
        ("unknown profile 'x'; known profiles: a, b", "path.name", "unknown profile 'x'; known profiles: a, b"),
        ("invalid request: body: must be a JSON object", "body", "must be a JSON object"),
    ],
)
def test_api_errors_are_rendered_with_the_flags_a_person_typed(message: str, field: str | None, said: str) -> None:
    rendered = client.for_people(client.ApiError(400, message, field))
    assert rendered == said
    assert "400" not in rendered and "body." not in rendered and "Value error" not in rendered


def test_help_loads_neither_matplotlib_nor_boto3_nor_the_engine_and_status_no_engine(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    probe = (
        "import sys\nfrom servingctl_cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(k for k, v in sys.modules.items() if v is not None)))"
    )
    heavy = ("matplotlib", "boto3", "botocore", "servingctl.loadgen", "rich", "httpx", "pydantic")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # no twin: status goes as far as finding none
    env.pop(client.API_URL_ENV, None)
    for argv, banned in ((["--help"], heavy), (["status"], heavy[:4]), (["start", "--help"], heavy[:4])):
        done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True, env=env)
        loaded = done.stdout.strip().splitlines()[-1].split()
        assert not [m for m in loaded if m.split(".")[0] in banned or m.startswith(banned)], argv


def test_an_answer_that_does_not_match_the_apis_model_names_each_field_at_fault() -> None:
    from servingctl.api.models import ExecutionProgress, ProfileSummary

    answer = {"execution_arn": "arn:aws:states:us-east-1:1:execution:m:start-x", "execution_id": "start-x", "action": "start"}
    answer |= {"phase": "capacity", "phases": [], "started_at": "2026-12-03T09:00:00Z"}
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=answer | {"elapsed_s": "soon"}))
    api = client.Client("http://127.0.0.1:1", local=True, transport=transport)
    with pytest.raises(client.ApiError) as caught:
        client.answer_as(ExecutionProgress, api.get("/executions/start-x"), "GET /executions/start-x")
    error = caught.value
    assert error.status == client.MISMATCH_STATUS
    assert error.message.startswith(
        "GET /executions/start-x: the API's answer is not ExecutionProgress as this servingctl reads it"
    )
    for field in ("profile: Field required", "status: Field required", "elapsed_s: Input should be a valid number"):
        assert field in error.message
    assert "is servingctl the version of the API it talks to?" in error.message
    # A list names the item at fault, and an answer that is no list says so.
    good = {"name": "a", "phase": "STOPPED", "pool": "p", "instance_type": "t", "model": "m", "endpoint_url": "u"}
    listed = [good | {"routing_header": "X: a"}, good]
    with pytest.raises(client.ApiError, match=r"GET /profiles, item 1: .*routing_header: Field required"):
        client.answers_as(ProfileSummary, listed, "GET /profiles")
    with pytest.raises(client.ApiError, match=r"not a list of ProfileSummary: got dict"):
        client.answers_as(ProfileSummary, good, "GET /profiles")
    assert client.answers_as(ProfileSummary, listed[:1], "GET /profiles")[0].routing_header == "X: a"
