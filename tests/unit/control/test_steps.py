"""What a step's result announces, on the sample events of events/profile_steps: the lifecycle event
(only from the steps that change what runs, and from roll_back / force_release only when they acted)
and the metrics of starts and stops that ended."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servingctl.control import events
from servingctl.control.steps import ACTIONS, LIFECYCLE, lifecycle_event, step_metrics, step_profile

EVENTS = Path(__file__).resolve().parents[3] / "events/profile_steps"
PROFILE = "deepseek-v4-flash"


def sample(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text())


def test_every_announcing_step_is_a_step() -> None:
    assert set(LIFECYCLE) <= set(ACTIONS)


def test_record_ready_announces_ready_with_who_asked_and_counts_the_start_and_its_phases() -> None:
    event = sample("record_ready")
    result = {"phase": "READY", "phase_seconds": {"capacity": 60.0, "boot": 5.0, "total": 65.0}, "lease_deadline": "x"}
    detail_type, detail = lifecycle_event(event, result)
    assert detail_type == events.READY
    assert detail == {
        "profile": PROFILE,
        "execution": event["execution"],
        "requested_by": event["state"]["config"].get("requested_by"),
        **result,
    }
    assert step_metrics("record_ready", result) == [
        ("StartSucceeded", "Count", 1),
        ("PhaseSecondsCapacity", "Seconds", 60.0),
        ("PhaseSecondsBoot", "Seconds", 5.0),
        ("PhaseSecondsTotal", "Seconds", 65.0),
    ]


@pytest.mark.parametrize(
    ("action", "detail_type", "metric"),
    [
        ("roll_back", events.START_FAILED, "StartFailed"),
        ("force_release", events.STOP_FAILED, "StopFailed"),
    ],
)
def test_a_roll_back_or_forced_release_announces_only_what_it_did(action: str, detail_type: str, metric: str) -> None:
    event = sample(action)
    acted, idle = {"acted": True, "detail": "desired 0"}, {"acted": False, "detail": "nothing was started"}
    assert lifecycle_event(event, acted)[0] == detail_type
    assert step_metrics(action, acted) == [(metric, "Count", 1)]
    assert lifecycle_event(event, idle) is None and step_metrics(action, idle) == []


def test_scale_out_and_close_session_announce_starting_and_stopped() -> None:
    assert lifecycle_event(sample("scale_out"), {"at": "t"})[0] == events.STARTING
    assert step_metrics("scale_out", {"at": "t"}) == []
    assert lifecycle_event(sample("close_session"), {"phase": "STOPPED"})[0] == events.STOPPED
    assert step_metrics("close_session", {"phase": "STOPPED"}) == [("StopSucceeded", "Count", 1)]


@pytest.mark.parametrize("name", ["check_task", "acquire_lock", "guard_pool_stop", "release_lock"])
def test_steps_that_change_nothing_announce_nothing(name: str) -> None:
    event = sample(name)
    assert lifecycle_event(event, {"acted": True}) is None and step_metrics(event["action"], {"acted": True}) == []


def test_the_profile_is_the_configs_or_the_inputs_before_prepare_ran() -> None:
    assert step_profile(sample("record_ready")) == PROFILE
    assert step_profile(sample("prepare_start")) == PROFILE and "config" not in sample("prepare_start")["state"]
    assert step_profile({"action": "x", "state": None}) is None and step_profile("not an event") is None
