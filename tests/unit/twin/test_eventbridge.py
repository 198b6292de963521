"""The twin's EventBridge: template.yaml's schedule and rule read with the twin's ARNs, matching as
EventBridge matches, the status-change event in the shape AWS documents, and the sweep's invocations
overlapping as Lambda lets them unless the template reserves the function a concurrency of 1."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from servingctl_twin.eventbridge.rules import (
    EventBridge,
    Wiring,
    load_template,
    matches,
    rate_seconds,
    read_wiring,
    status_change,
)

ROOT = Path(__file__).resolve().parents[3]
ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:servingctl-{}"
MACHINES = {stem: ARN.format(stem.replace("_", "-")) for stem in ("start_profile", "stop_profile", "run_benchmark")}


def _event(status: str, machine: str = "start_profile") -> dict:
    describe = {
        "executionArn": MACHINES[machine].replace(":stateMachine:", ":execution:") + ":start-p-1",
        "stateMachineArn": MACHINES[machine],
        "name": "start-p-1",
        "status": status,
        "startDate": datetime(2026, 1, 1, tzinfo=UTC),
        "stopDate": datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
        "input": json.dumps({"profile": "p"}),
        "error": "KeyError",
    }
    return status_change(describe, "us-east-1", "123456789012")


def test_the_template_schedule_and_rule_are_read_with_the_twin_arns() -> None:
    wiring = read_wiring(ROOT / "template.yaml", MACHINES)
    assert wiring.rate_s == 300 and wiring.schedule_input == {"dry_run": False}
    assert sorted(wiring.pattern["detail"]["stateMachineArn"]) == sorted(MACHINES.values())


@pytest.mark.parametrize(
    ("status", "machine", "delivered"),
    [
        ("ABORTED", "start_profile", True),
        ("TIMED_OUT", "stop_profile", True),
        ("FAILED", "run_benchmark", True),
        ("SUCCEEDED", "start_profile", False),
        ("RUNNING", "start_profile", False),
    ],
)
def test_the_rule_matches_only_flows_that_ended_badly(status: str, machine: str, delivered: bool) -> None:
    wiring = read_wiring(ROOT / "template.yaml", MACHINES)
    assert matches(wiring.pattern, _event(status, machine)) is delivered


def test_another_machine_or_source_is_not_matched() -> None:
    wiring = read_wiring(ROOT / "template.yaml", MACHINES)
    event = _event("ABORTED")
    assert not matches(wiring.pattern, event | {"source": "servingctl"})
    assert not matches(wiring.pattern, event | {"detail": event["detail"] | {"stateMachineArn": ARN.format("other")}})


def test_the_event_has_the_documented_shape() -> None:
    event = _event("ABORTED")
    assert set(event) == {"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"}
    assert (event["detail-type"], event["source"], event["version"]) == (
        "Step Functions Execution Status Change",
        "aws.states",
        "0",
    )
    assert event["resources"] == [event["detail"]["executionArn"]]
    detail = event["detail"]
    assert (detail["startDate"], detail["stopDate"]) == (1767225600000, 1767225660000)  # epoch milliseconds
    assert detail["inputDetails"] == {"included": True} and json.loads(detail["input"]) == {"profile": "p"}
    assert detail["output"] is None and detail["outputDetails"] is None and detail["error"] == "KeyError"


@pytest.mark.parametrize(("expression", "seconds"), [("rate(1 minute)", 60), ("rate(5 minutes)", 300), ("rate(2 hours)", 7200)])
def test_rates(expression: str, seconds: int) -> None:
    assert rate_seconds(expression) == seconds


@pytest.mark.parametrize("expression", ["cron(0 * * * ? *)", "rate(5 fortnights)", "rate(minutes)"])
def test_what_the_twin_cannot_play_is_refused_naming_the_field(expression: str) -> None:
    with pytest.raises(ValueError, match=r"ScheduleExpression: .* rate\(N minutes\|hours\|days\)"):
        rate_seconds(expression)


def test_the_sweeps_reserved_concurrency_is_read_under_the_parameters_defaults(tmp_path: Path) -> None:
    assert read_wiring(ROOT / "template.yaml", MACHINES).concurrency is None  # ReservedConcurrency defaults to "off"
    text = (ROOT / "template.yaml").read_text()
    parameter = load_template(ROOT / "template.yaml")["Parameters"]["ReservedConcurrency"]
    assert parameter["Default"] == "off"
    turned_on = tmp_path / "template.yaml"
    turned_on.write_text(
        text.replace('Default: "off"\n    AllowedValues: ["off", "on"]', 'Default: "on"\n    AllowedValues: ["off", "on"]')
    )
    assert read_wiring(turned_on, MACHINES).concurrency == 1


@pytest.mark.parametrize("concurrency", [None, 1])
def test_scheduled_sweeps_overlap_unless_one_is_reserved(concurrency: int | None) -> None:
    release, lock = threading.Event(), threading.Lock()
    running: list[int] = []
    peak = [0]

    def invoke(payload: bytes) -> tuple[bytes, str | None]:
        with lock:
            running.append(1)
            peak[0] = max(peak[0], len(running))
        release.wait(timeout=30)
        with lock:
            running.pop()
        return b"{}", None

    wiring = Wiring(rate_s=1, schedule_input={"dry_run": False}, pattern={}, concurrency=concurrency)
    bridge = EventBridge(None, wiring, invoke, region="us-east-1", account="123456789012", time_scale=50, deliver=True)
    bridge.start()
    try:
        deadline = time.monotonic() + 30
        while len(bridge.deliveries_of("schedule")) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        # Three are due: unreserved, none waits for another; reserved, each waits for the one before.
        while concurrency is None and peak[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # long enough for a second to start if anything let it
        assert peak[0] >= 3 if concurrency is None else peak[0] == 1
    finally:
        release.set()
        bridge.stop()


def test_held_waits_for_the_deliveries_in_progress_and_starts_none() -> None:
    release, started = threading.Event(), threading.Event()
    calls: list[float] = []

    def invoke(payload: bytes) -> tuple[bytes, str | None]:
        calls.append(time.monotonic())
        started.set()
        release.wait(timeout=30)
        return b"{}", None

    wiring = Wiring(rate_s=1, schedule_input={}, pattern={}, concurrency=None)
    bridge = EventBridge(None, wiring, invoke, region="us-east-1", account="123456789012", time_scale=50, deliver=True)
    bridge.start()
    try:
        assert started.wait(timeout=30)
        entered = threading.Event()
        during: list[tuple[int, int]] = []

        def hold() -> None:
            with bridge.held():
                entered.set()
                count = len(calls)
                time.sleep(0.2)  # schedules keep coming due: none may start while held
                during.append((count, len(calls)))

        holder = threading.Thread(target=hold)
        holder.start()
        assert not entered.wait(timeout=0.2)  # the delivery in progress finishes first
        release.set()
        assert entered.wait(timeout=30)
        holder.join(timeout=30)
        [(before, after)] = during
        assert after == before
    finally:
        release.set()
        bridge.stop()
