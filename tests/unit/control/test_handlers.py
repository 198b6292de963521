"""The two handlers on the sample events in events/ (real lambda:invoke payloads)."""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters

from servingctl.control.steps import ACTIONS
from servingctl.shared.errors import InvalidInput, ProfileNotFound, SmokeTestFailed
from servingctl.store import DynamoStore, Phase
from servingctl.store.dynamodb import create_table
from servingctl_twin.twin import publish_parameters

ROOT = Path(__file__).resolve().parents[3]
EVENTS = ROOT / "events"
REGISTRY = ROOT / "twin/servingctl_twin/reference_registry.json"


def event(folder: str, name: str) -> dict[str, Any]:
    return json.loads((EVENTS / folder / f"{name}.json").read_text())


def load_handler(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"handler_{name}", ROOT / "functions" / name / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def context() -> SimpleNamespace:
    return SimpleNamespace(
        function_name="servingctl-profile-steps",
        memory_limit_in_mb=256,
        aws_request_id="req-1",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:servingctl-profile-steps",
        get_remaining_time_in_millis=lambda: 180_000,
    )


@pytest.fixture
def lambda_env(monkeypatch: pytest.MonkeyPatch, aws_env: None) -> None:
    # Read from SSM by its path, as deployed.
    publish_parameters(boto3.client("ssm"), json.loads(REGISTRY.read_text()), "/servingctl/registry")
    parameters.clear_caches()
    monkeypatch.setenv("SERVINGCTL_REGISTRY", "ssm:/servingctl/registry")
    monkeypatch.setenv("SERVINGCTL_TABLE", "servingctl")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "servingctl")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "servingctl")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    create_table("servingctl", boto3.resource("dynamodb"))
    return


@pytest.mark.parametrize("name", sorted(p.stem for p in (EVENTS / "profile_steps").glob("*.json")))
def test_sample_events_are_invoke_payloads_of_known_actions(name: str) -> None:
    sample = event("profile_steps", name)
    assert set(sample) == {"action", "state", "execution"} and sample["action"] in ACTIONS
    assert sample["execution"].startswith("arn:aws:states:")


def test_profile_steps_runs_prepare_lock_and_current(lambda_env: None) -> None:
    app = load_handler("profile_steps")
    config = app.lambda_handler(event("profile_steps", "prepare_start"), context())
    assert config["profile"] == "deepseek-v4-flash" and config["settings"]["lock_lease_s"] == 3 * 60 + 300
    locked = app.lambda_handler(event("profile_steps", "acquire_lock"), context())
    assert locked["locks"] == ["profile:deepseek-v4-flash", "pool:g7e-2gpu"]
    assert DynamoStore("servingctl").get_lock("pool:g7e-2gpu").owner == locked["owner"]
    ecs = boto3.client("ecs")
    ecs.create_cluster(clusterName="self-hosted-llm-poc")
    ecs.register_task_definition(family="ds", containerDefinitions=[{"name": "vllm", "image": "vllm", "memory": 512}])
    ecs.create_service(
        cluster="self-hosted-llm-poc", serviceName="self-hosted-llm-poc-deepseek-v4-flash", taskDefinition="ds", desiredCount=0
    )
    assert app.lambda_handler(event("profile_steps", "check_current"), context()) == {"phase": "STOPPED", "ready": False}
    assert DynamoStore("servingctl").get_profile("deepseek-v4-flash").phase == Phase.STOPPED


def test_profile_steps_publishes_the_lifecycle_event_and_the_metric_its_step_announces(
    lambda_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="lifecycle")["QueueUrl"]
    queue = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    bus = boto3.client("events")
    bus.put_rule(Name="lifecycle", EventPattern=json.dumps({"source": ["servingctl"]}))
    bus.put_targets(Rule="lifecycle", Targets=[{"Id": "queue", "Arn": queue}])
    app = load_handler("profile_steps")
    app.lambda_handler(event("profile_steps", "release_lock_stop"), context())  # announces nothing
    capsys.readouterr()
    sample = event("profile_steps", "close_session")
    # The stop holds its locks when it closes the session (await_lock took them).
    DynamoStore("servingctl").acquire_locks(
        ["profile:deepseek-v4-flash", "pool:g7e-2gpu"], sample["execution"], datetime.now(UTC), 600
    )
    assert app.lambda_handler(sample, context())["phase"] == "STOPPED"
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [m["StopSucceeded"] for m in emitted if "StopSucceeded" in m] == [[1.0]]  # EMF: one value, listed
    received = [json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]
    assert [(m["detail-type"], m["detail"]["profile"], m["detail"]["execution"]) for m in received] == [
        ("Profile stopped", "deepseek-v4-flash", sample["execution"])
    ]


def test_profile_steps_raises_named_errors(lambda_env: None) -> None:
    app = load_handler("profile_steps")
    bad = event("profile_steps", "prepare_start") | {"action": "prepare_start"}
    bad["state"] = {"profile": "llama"}
    with pytest.raises(ProfileNotFound, match="known profiles"):
        app.lambda_handler(bad, context())
    with pytest.raises(InvalidInput, match="action: unknown 'reboot'"):
        app.lambda_handler(bad | {"action": "reboot"}, context())


class _Server(BaseHTTPRequestHandler):
    models: ClassVar[list[str]] = []
    health = 200
    seen_headers: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen_headers.append(self.headers.get("X-LLM-Profile", ""))
        if self.path == "/health":
            body, code = b"", type(self).health
        elif self.path == "/v1/models":
            body, code = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}).encode(), 200
        else:
            body, code = b"not found", 404
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        type(self).seen_headers.append(self.headers.get("X-LLM-Profile", ""))
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None}],
        }
        served = self.path == "/v1/chat/completions"
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode() if served else b"not found"
        self.send_response(200 if served else 404)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Server.models, _Server.health, _Server.seen_headers = ["deepseek-v4-flash"], 200, []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def smoke_event(url: str) -> dict[str, Any]:
    sample = event("smoke_test", "smoke_test")
    sample["state"]["config"]["smoke"]["url"] = url
    return sample


def test_smoke_test_passes_when_the_model_is_served(model_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "servingctl")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    app = load_handler("smoke_test")
    before = datetime.now(UTC)
    result = app.lambda_handler(smoke_event(model_server), context())
    assert result["ok"] and result["models"] == ["deepseek-v4-flash"]
    assert before <= datetime.fromisoformat(result["first_token_at"]) <= datetime.now(UTC)
    assert _Server.seen_headers == ["deepseek-v4-flash"] * 3  # routed by the header


@pytest.mark.parametrize(
    ("models", "health", "message"),
    [
        (["nemotron-nano"], 200, r"model 'deepseek-v4-flash' is not served .* lists \['nemotron-nano'\]"),
        (["deepseek-v4-flash"], 503, "/health answered 503"),
    ],
)
def test_smoke_test_fails_with_what_was_wrong(
    model_server: str, monkeypatch: pytest.MonkeyPatch, models: list[str], health: int, message: str
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "servingctl")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    _Server.models, _Server.health = models, health
    with pytest.raises(SmokeTestFailed, match=message):
        load_handler("smoke_test").lambda_handler(smoke_event(model_server), context())


def test_smoke_test_refuses_an_unreachable_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "servingctl")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SmokeTestFailed, match="ConnectError"):
        load_handler("smoke_test").lambda_handler(smoke_event(f"http://127.0.0.1:{port}"), context())
