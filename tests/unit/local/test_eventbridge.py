"""The twin's EventBridge: template.yaml's schedule and rule read with the twin's ARNs, matching as
EventBridge matches, and the status-change event in the shape AWS documents."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from servingctl.local.eventbridge import matches, rate_seconds, read_wiring, status_change

ROOT = Path(__file__).resolve().parents[3]
ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:servingctl-{}"
MACHINES = {stem: ARN.format(stem.replace("_", "-")) for stem in ("start_profile", "stop_profile", "run_benchmark")}


def _event(status: str, machine: str = "start_profile") -> dict:
    describe = {"executionArn": MACHINES[machine].replace(":stateMachine:", ":execution:") + ":start-p-1",
                "stateMachineArn": MACHINES[machine], "name": "start-p-1", "status": status,
                "startDate": datetime(2026, 1, 1, tzinfo=UTC), "stopDate": datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
                "input": json.dumps({"profile": "p"}), "error": "KeyError"}
    return status_change(describe, "us-east-1", "123456789012")


def test_the_template_schedule_and_rule_are_read_with_the_twin_arns() -> None:
    wiring = read_wiring(ROOT / "template.yaml", MACHINES)
    assert wiring.rate_s == 300 and wiring.schedule_input == {"dry_run": False}
    assert sorted(wiring.pattern["detail"]["stateMachineArn"]) == sorted(MACHINES.values())


@pytest.mark.parametrize(("status", "machine", "delivered"), [
    ("ABORTED", "start_profile", True), ("TIMED_OUT", "stop_profile", True), ("FAILED", "run_benchmark", True),
    ("SUCCEEDED", "start_profile", False), ("RUNNING", "start_profile", False),
])
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
    assert (event["detail-type"], event["source"], event["version"]) == ("Step Functions Execution Status Change", "aws.states", "0")
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
    with pytest.raises(ValueError, match="ScheduleExpression: .* rate\\(N minutes\\|hours\\|days\\)"):
        rate_seconds(expression)
