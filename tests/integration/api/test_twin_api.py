"""The servingctl command against the twin's HTTP API (the real api handler, state machines and world):
--wait shows the phases in order, a failed start exits non-zero with its reason, keepalive extends
the lease, and the sweep really stops a profile whose lease ran out (and says so on EventBridge)."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from servingctl.costs import load_catalog
from servingctl.shared.clock import OffsetClock
from servingctl_cli.client import write_twin_state
from servingctl_cli.main import main
from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

REPO = Path(__file__).resolve().parents[3]
PROFILE = "nemotron-nano"
POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
START_PHASES = ["prepare", "capacity", "boot", "task", "health", "smoke", "ready"]
LOCAL_CALLER = "arn:aws:iam::123456789012:user/local"  # the identity the twin's API Gateway passes on


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0) as running:
        yield running


@pytest.fixture
def cli(twin: Twin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """main(argv) -> (exit code, stdout, stderr) against the twin, found through its state file (--local)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SERVINGCTL_API_URL", raising=False)
    assert twin.api_url is not None
    write_twin_state(twin.api_url, POLL)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*argv, "--local"])
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    twin.set_faults()


def _json(out: str) -> Any:
    """The command's JSON answer: its last stdout line (in-process handlers log JSON lines to stdout too)."""
    return json.loads(out.strip().splitlines()[-1])


def _group(twin: Twin) -> dict[str, Any]:
    assert twin.registry is not None
    name = twin.registry.pool_of(PROFILE).asg_name
    return twin.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def _service(twin: Twin) -> dict[str, Any]:
    assert twin.registry is not None
    spec = twin.registry.profiles[PROFILE]
    return twin.client("ecs").describe_services(cluster=spec.cluster, services=[spec.service])["services"][0]


def _events_queue(twin: Twin) -> str:
    """An SQS queue receiving every servingctl event from the default bus."""
    sqs, events = twin.client("sqs"), twin.client("events")
    url = sqs.create_queue(QueueName="servingctl-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="servingctl-all", EventPattern=json.dumps({"source": ["servingctl"]}))
    events.put_targets(Rule="servingctl-all", Targets=[{"Id": "queue", "Arn": arn}])
    return url


def _received(twin: Twin, url: str) -> list[dict[str, Any]]:
    sqs, seen = twin.client("sqs"), []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return seen
        seen += [json.loads(m["Body"]) for m in messages]
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        )


def test_start_wait_shows_phases_in_order_then_status_keepalive_and_stop(twin: Twin, cli: Any) -> None:
    code, out, err = cli("start", PROFILE, "--wait", "--lease", "30")
    assert code == 0, (out, err)
    lines = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[")]
    # The flow's steps, and between them (indented) the start timeline's phases as they completed.
    assert [line for line in lines if not line.startswith(" ")] == START_PHASES, out
    assert [line.split()[0] for line in lines if line.startswith("  ")][-3:] == ["ALB", "smoke", "READY"], out
    assert f"{PROFILE} READY in" in out

    code, out, _ = cli("status", PROFILE, "--json")
    detail = _json(out)
    assert code == 0 and detail["phase"] == "READY" and detail["running_count"] == 1
    assert list(detail["target_health"].values()) == ["healthy"]
    assert detail["started_by"] == LOCAL_CALLER  # who did it: the caller's IAM ARN, from API Gateway's identity
    lease = datetime.fromisoformat(detail["lease_deadline"])
    [instance] = detail["instances"]

    # What a person reads: the endpoint and how to reach it, the instance by id, the cost so far.
    code, out, _ = cli("status", PROFILE)
    assert code == 0 and "READY since" in out and instance["instance_id"] in out
    assert detail["endpoint_url"] in out and f"header       {detail['routing_header']}" in out
    price = load_catalog().instance("us-east-1", "g7e.2xlarge")
    assert price is not None
    cost = re.search(r"cost so far  (\d+\.\d\d) USD \((\d+\.\d) min at (\d+\.\d\d) USD/h\)", out)
    assert cost is not None, out
    usd, minutes, hourly = (float(group) for group in cost.groups())
    assert hourly == price.hourly_usd and usd == pytest.approx(minutes / 60 * hourly, abs=0.01)

    # A start of a READY profile says so and starts nothing; --wait does not wait for a new one.
    executions = twin.client("stepfunctions").list_executions(stateMachineArn=twin.state_machines["start_profile"])["executions"]
    code, out, err = cli("start", PROFILE, "--wait")
    said = " ".join(out.split())  # wrapped at the terminal's width
    assert code == 0 and f"{PROFILE} is already READY since" in said and "(lease until" in said, (out, err)
    assert len(
        twin.client("stepfunctions").list_executions(stateMachineArn=twin.state_machines["start_profile"])["executions"]
    ) == len(executions)

    code, out, _ = cli("keepalive", PROFILE, "--minutes", "120", "--json")
    extended = datetime.fromisoformat(_json(out)["lease_deadline"])
    assert code == 0 and extended - lease > timedelta(minutes=80) and _json(out)["kept_alive_by"] == LOCAL_CALLER

    code, out, err = cli("stop", PROFILE, "--wait", "--json")
    final = _json(out)
    assert code == 0 and final["status"] == "SUCCEEDED" and final["phase"] == "stopped", err
    assert [p["name"] for p in final["phases"]][-1] == "stopped"
    assert (_group(twin)["DesiredCapacity"], _service(twin)["desiredCount"]) == (0, 0)
    code, out, _ = cli("status", PROFILE, "--json")
    assert (_json(out)["started_by"], _json(out)["stopped_by"]) == (LOCAL_CALLER, LOCAL_CALLER)
    code, out, _ = cli("stop", PROFILE, "--wait")
    assert code == 0 and f"{PROFILE} is already STOPPED since" in out

    code, out, _ = cli("costs", "ledger", "--profile", PROFILE, "--json")
    ledger = _json(out)
    assert code == 0 and len(ledger["sessions"]) >= 1 and ledger["sessions"][-1]["open"] is False


def test_a_failed_start_exits_non_zero_with_the_recorded_reason(twin: Twin, cli: Any) -> None:
    twin.set_faults("capacity-unavailable")
    code, out, err = cli("start", PROFILE, "--wait")
    assert code == 1, (out, err)
    assert "FAILED" in out and "CapacityUnavailable" in out and "InsufficientInstanceCapacity" in out
    code, out, _ = cli("status", PROFILE, "--json")
    assert _json(out)["phase"] == "FAILED" and "InsufficientInstanceCapacity" in _json(out)["last_error"]
    assert _group(twin)["DesiredCapacity"] == 0  # rolled back


def test_api_errors_exit_non_zero_naming_the_field(cli: Any) -> None:
    code, _, err = cli("start", "no-such-profile")
    assert code == 1 and "error: unknown profile 'no-such-profile'; known profiles: " in err and "404" not in err
    code, _, err = cli("start", PROFILE, "--lease", "100000")  # the profile's own bound, from the API
    assert code == 1 and "error: --lease must be between 5 and " in err and "minutes" in err and "body." not in err
    code, _, err = cli("start", PROFILE, "--lease", "4")  # the model's bound, checked before sending
    assert code == 2 and "error: --lease must be at least 5 minutes" in err
    code, out, _ = cli("keepalive", PROFILE, "--json")
    assert code == 1 and _json(out)["status"] == 409


def _sweep_handler() -> Any:
    spec = importlib.util.spec_from_file_location("twin_sweep_app", REPO / "functions" / "sweep" / "app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sweep_stops_a_profile_whose_lease_ran_out(twin: Twin, cli: Any) -> None:
    queue = _events_queue(twin)
    code, out, err = cli("start", PROFILE, "--wait", "--lease", "5")
    assert code == 0, (out, err)
    sweep = _sweep_handler()
    context = type(
        "Context",
        (),
        {
            "function_name": "servingctl-sweep",
            "memory_limit_in_mb": 256,
            "invoked_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:servingctl-sweep",
            "aws_request_id": "sweep-1",
            "get_remaining_time_in_millis": lambda self: 60000,
        },
    )()

    # Within the lease: kept.
    [kept] = sweep.lambda_handler({"poll": POLL}, context)["decisions"]
    assert (kept["profile"], kept["stop"], kept["action"]) == (PROFILE, False, "kept")

    # Six minutes later the 5-minute lease has run out: a dry run only reports it...
    sweep.CLOCK = OffsetClock(timedelta(minutes=6))
    [dry] = sweep.lambda_handler({"dry_run": True}, context)["decisions"]
    assert (dry["reason"], dry["action"]) == ("lease-expired", "would-stop")
    assert _service(twin)["desiredCount"] == 1

    # ...and the real sweep stops it.
    [decision] = sweep.lambda_handler({"poll": POLL}, context)["decisions"]
    assert (decision["reason"], decision["action"]) == ("lease-expired", "stop-started")
    result = twin.wait_execution(decision["execution_arn"], timeout_s=120)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert (_service(twin)["desiredCount"], _service(twin)["runningCount"]) == (0, 0)
    assert (_group(twin)["DesiredCapacity"], _group(twin)["MinSize"]) == (0, 0)
    code, out, _ = cli("status", PROFILE, "--json")
    assert _json(out)["phase"] == "STOPPED"

    seen = [(e["detail-type"], e["detail"].get("profile")) for e in _received(twin, queue)]
    assert ("Profile kept running", PROFILE) in seen
    assert ("Profile auto-stopped", PROFILE) in seen
    assert (
        seen.index(("Profile ready", PROFILE))
        < seen.index(("Profile auto-stopped", PROFILE))
        < seen.index(("Profile stopped", PROFILE))
    )
