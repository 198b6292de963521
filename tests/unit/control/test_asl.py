"""The state machine files: Retry/Catch on every Task, verb names, known substitutions and actions,
a closed graph, wait loops wired to the checks' wait_s, and the transition budget of a 15-minute start."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from servingctl.control.polling import Check, run_check
from servingctl.control.steps import ACTIONS
from servingctl.shared.flow_inputs import Poll, StartConfig, StopConfig

from .conftest import FakeClock

ROOT = Path(__file__).resolve().parents[3]
FILES = {name: ROOT / "statemachine" / f"{name}.asl.json" for name in ("start_profile", "stop_profile")}
LAMBDA_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "Lambda.ClientExecutionTimeoutException",
}
SUBSTITUTIONS = {"ProfileStepsFunctionArn", "SmokeTestFunctionArn"}
VERBS = {
    "Prepare",
    "Route",
    "Acquire",
    "Check",
    "Branch",
    "Wait",
    "Guard",
    "Scale",
    "Run",
    "Record",
    "Release",
    "Roll",
    "Fail",
    "Request",
    "Close",
    "Force",
    "Answer",
}


def load(name: str) -> dict[str, Any]:
    return json.loads(FILES[name].read_text())


@pytest.mark.parametrize("name", FILES)
def test_every_task_retries_lambda_and_throttling_errors_and_catches_all(name: str) -> None:
    for state_name, state in load(name)["States"].items():
        if state["Type"] != "Task":
            continue
        retried = {e for r in state["Retry"] for e in r["ErrorEquals"]}
        assert LAMBDA_ERRORS | {"Throttled"} <= retried, state_name
        assert any(c["ErrorEquals"] == ["States.ALL"] for c in state["Catch"]), state_name
        assert all(c["ResultPath"] in ("$.error", "$.rollback_error") for c in state["Catch"]), state_name
        assert all("Comment" in r for r in state["Retry"]) and state.get("Comment"), state_name


@pytest.mark.parametrize(
    ("name", "state", "config"), [("start_profile", "PrepareStart", StartConfig), ("stop_profile", "PrepareStop", StopConfig)]
)
def test_the_prepared_config_reaches_the_flow_whole(name: str, state: str, config: type[BaseModel]) -> None:
    """Every field prepare_* returns is kept by its ResultSelector (requested_by was dropped once:
    the record never said who started or stopped a profile)."""
    kept = {key.removesuffix(".$"): path for key, path in load(name)["States"][state]["ResultSelector"].items()}
    assert kept == {field: f"$.Payload.{field}" for field in config.model_fields}


@pytest.mark.parametrize("name", FILES)
def test_names_are_verbs_and_every_state_says_why(name: str) -> None:
    definition = load(name)
    assert definition["Comment"]
    for state_name, state in definition["States"].items():
        assert re.match(r"^[A-Z][a-z]+", state_name).group(0) in VERBS, state_name
        assert state.get("Comment"), state_name


@pytest.mark.parametrize("name", FILES)
def test_substitutions_and_actions_are_known(name: str) -> None:
    text = FILES[name].read_text()
    assert set(re.findall(r"\$\{(\w+)\}", text)) <= SUBSTITUTIONS
    for state in load(name)["States"].values():
        if state["Type"] != "Task":
            continue
        assert state["Resource"] == "arn:aws:states:::lambda:invoke"
        payload = state["Parameters"]["Payload"]
        assert payload["state.$"] == "$" and payload["execution.$"] == "$$.Execution.Id"
        function = state["Parameters"]["FunctionName"]
        expected = {"${SmokeTestFunctionArn}": {"smoke_test"}, "${ProfileStepsFunctionArn}": set(ACTIONS)}[function]
        assert payload["action"] in expected


@pytest.mark.parametrize("name", FILES)
def test_graph_is_closed_and_every_state_reachable(name: str) -> None:
    definition = load(name)
    states = definition["States"]

    def targets(state: dict[str, Any]) -> list[str]:
        found = [state.get("Next"), state.get("Default")]
        found += [c["Next"] for c in state.get("Choices", []) + state.get("Catch", [])]
        return [t for t in found if t]

    seen, todo = set(), [definition["StartAt"]]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        assert current in states, f"unknown state {current}"
        todo.extend(targets(states[current]))
    assert seen == set(states)


@pytest.mark.parametrize("name", FILES)
def test_wait_loops_read_the_checks_wait(name: str) -> None:
    states = load(name)["States"]
    waits = {n: s for n, s in states.items() if s["Type"] == "Wait"}
    assert waits
    for wait in waits.values():
        check = states[wait["Next"]]
        key = check["ResultPath"]
        assert wait["SecondsPath"] == f"{key}.wait_s"
        assert {"ready.$", "wait_s.$", "detail.$", "progress.$"} == set(check["ResultSelector"])
        choice = states[check["Next"]]
        assert choice["Choices"][0]["Variable"] == f"{key}.ready" and choice["Default"] in waits


def _simulated_start(health_ready_s: int, watch_budget_s: float) -> tuple[int, float]:
    """States entered and the READY lag for a start whose instance registers at 300 s, task runs at
    420 s and target turns healthy at health_ready_s, with the default poll settings."""
    straight = [
        "PrepareStart",
        "AcquireLock",
        "CheckCurrent",
        "BranchOnCurrent",
        "GuardPool",
        "ScaleOut",
        "RouteToModel",
        "RunSmokeTest",
        "RecordReady",
        "ReleaseLock",
    ]
    assert all(s in load("start_profile")["States"] for s in straight)
    clock, poll = FakeClock(), Poll()
    t0 = clock.now()
    transitions = len(straight)
    for key, ready_after_s, budget in (("capacity", 300, 0.0), ("task", 420, 0.0), ("targets", health_ready_s, watch_budget_s)):
        last: Check | None = None
        while True:
            transitions += 2  # Check<X> and BranchOn<X>
            result = last = run_check(
                last=last,
                what=key,
                deadline_s=3600,
                poll=poll,
                clock=clock,
                watch_budget_s=budget,
                probe=lambda p, due=ready_after_s: ((clock.now() - t0).total_seconds() >= due, "probe"),
            )
            if result.ready:
                break
            transitions += 1  # WaitFor<X>
            clock.advance(result.wait_s)
    return transitions, (clock.now() - t0).total_seconds() - health_ready_s


def test_fifteen_minute_start_stays_within_budget_and_ready_follows_health_within_an_interval() -> None:
    runs = [_simulated_start(health_s, watch_budget_s=165) for health_s in range(430, 901, 7)]
    assert max(t for t, _ in runs) <= 150
    assert max(lag for _, lag in runs) <= Poll().interval_s
    # Without the in-invocation watch the capped back-off alone would lag by up to max_interval_s.
    assert max(_simulated_start(h, watch_budget_s=0)[1] for h in range(430, 901, 7)) > Poll().interval_s
