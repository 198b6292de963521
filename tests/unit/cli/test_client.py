"""The CLI's HTTP client: SigV4 signing for the deployed API, finding the API, errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from botocore.credentials import Credentials

from servingctl.cli import client
from servingctl.cli.main import main


def test_requests_to_the_deployed_api_are_sigv4_signed_for_execute_api() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"ok": True})

    url = "https://a1b2c3d4e5.execute-api.ap-northeast-1.amazonaws.com/v1"
    api = client.Client(url, auth=client.SigV4(Credentials("AKIDEXAMPLE", "secret", "token"), "ap-northeast-1"),
                        transport=httpx.MockTransport(answer))
    assert api.post("/profiles/x/start", {"lease_minutes": 60}, idempotent=True) == {"ok": True}
    [request] = seen
    authorization = request.headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/ap-northeast-1/execute-api/aws4_request" in authorization
    assert "idempotency-key" in authorization.split("SignedHeaders=")[1]  # the key cannot be swapped in transit
    assert request.headers["X-Amz-Security-Token"] == "token" and "X-Amz-Date" in request.headers
    assert json.loads(request.content) == {"lease_minutes": 60}


def test_error_answers_become_api_errors_with_the_field() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(400, json={"status": 400, "error": "BadRequest",
                                                                         "message": "lease_minutes: too long", "field": "body.lease_minutes"}))
    api = client.Client("http://127.0.0.1:1", local=True, transport=transport)
    with pytest.raises(client.ApiError) as raised:
        api.post("/profiles/x/start", {})
    assert (raised.value.status, raised.value.field) == (400, "body.lease_minutes")


def test_the_region_comes_from_the_api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKID")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    api = client._signed("https://abc123.execute-api.eu-west-1.amazonaws.com/v1", None, None)
    assert isinstance(api._http.auth, client.SigV4) and api._http.auth.region == "eu-west-1"


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


def test_no_api_at_all_exits_3_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(client.API_URL_ENV, raising=False)
    monkeypatch.setattr(client, "DEFAULT_TWIN_PORT", 1)  # nothing listens there
    assert main(["status", "--local"]) == client.EXIT_UNREACHABLE
    assert "servingctl local up" in capsys.readouterr().err
