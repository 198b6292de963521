"""The error names that cross files: every custom name in an ErrorEquals of statemachine/*.asl.json is
an exception class a handler raises (so renaming one side breaks this test, not a start in AWS), and
every exception a handler raises is caught by every Catch list of the Tasks that call a handler.

Lambda reports an unhandled exception's class name as the error (errorType), which is what Step
Functions matches ErrorEquals against; names of the form Service.Error come from AWS itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from .test_iam import _modules_reachable_from

ROOT = Path(__file__).resolve().parents[3]
MACHINES = sorted((ROOT / "statemachine").glob("*.asl.json"))
# Error name prefixes AWS owns: the States.* runtime errors and the service integrations' errors.
AWS_PREFIXES = ("States.", "Lambda.", "ECS.", "AmazonECS.", "StepFunctions.")
CATCH_ALL = {"States.ALL", "States.TaskFailed"}


def _tasks(states: dict):
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        for branch in state.get("Branches", []):
            yield from _tasks(branch["States"])
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from _tasks(processor["States"])


def error_names(definition: dict) -> set[str]:
    """Every name in any Retry or Catch ErrorEquals of the definition."""
    return {
        e
        for _, t in _tasks(definition["States"])
        for rule in t.get("Retry", []) + t.get("Catch", [])
        for e in rule["ErrorEquals"]
    }


def raised_exceptions(paths: set[Path]) -> set[str]:
    """Names of the exception classes the modules define and raise (`raise Name(...)`)."""
    defined, raised = set(), set()
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.bases:
                defined.add(node.name)
            elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                raised.add(node.exc.func.id)
    return defined & raised


def _handlers_raise() -> set[str]:
    """Exceptions any Lambda handler of the state machines can raise."""
    paths: set[Path] = set()
    for handler in (ROOT / "functions").glob("*/app.py"):
        paths |= {handler, *_modules_reachable_from(handler)}
    return raised_exceptions(paths)


RAISED = _handlers_raise()


def test_the_handlers_raise_the_control_errors():
    # The scan must find what the steps raise on purpose, or the checks below prove nothing.
    assert {"SmokeTestFailed", "Throttled", "LockHeld", "InvalidInput", "CapacityUnavailable"} <= RAISED


@pytest.mark.parametrize("machine", MACHINES, ids=lambda p: p.name)
def test_every_custom_error_name_is_an_exception_a_handler_raises(machine):
    custom = {e for e in error_names(json.loads(machine.read_text())) if not e.startswith(AWS_PREFIXES)}
    assert sorted(custom - RAISED) == []


@pytest.mark.parametrize("machine", MACHINES, ids=lambda p: p.name)
def test_every_raised_exception_is_caught_by_every_lambda_task(machine):
    problems = []
    for name, task in _tasks(json.loads(machine.read_text())["States"]):
        if not task["Resource"].startswith("arn:aws:states:::lambda:"):
            continue
        caught = {e for rule in task.get("Catch", []) for e in rule["ErrorEquals"]}
        if not caught & CATCH_ALL:
            problems += [f"{name}: {error} not caught" for error in sorted(RAISED - caught)]
    assert problems == []


def test_the_contract_catches_a_renamed_error():
    definition = {
        "States": {
            "RunSmokeTest": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "End": True,
                "Retry": [{"ErrorEquals": ["SmokeTestFailure"]}],
            }
        }
    }
    custom = {e for e in error_names(definition) if not e.startswith(AWS_PREFIXES)}
    assert custom - RAISED == {"SmokeTestFailure"}


def test_the_sweep_steps_retry_throttling_and_catch_the_workers_errors_into_the_failure_record():
    # sweep_next raises InvalidInput (a run that did not ask to sweep) and RunNotFound; both must end in
    # RecordFailure (the written scenarios stay), Throttled is retried; RunSweepScenario the same.
    states = json.loads((ROOT / "statemachine/run_benchmark.asl.json").read_text())["States"]
    assert {"InvalidInput", "RunNotFound", "Throttled", "ProfileNotReady"} <= RAISED
    for name in ("SweepNext", "RunSweepScenario"):
        task = states[name]
        assert any("Throttled" in rule["ErrorEquals"] for rule in task["Retry"]), name
        assert [(c["ErrorEquals"], c["Next"]) for c in task["Catch"]] == [(["States.ALL"], "RecordFailure")], name
    assert states["SweepNext"]["Parameters"]["Payload"]["action"] == "sweep_next"
    assert states["RunSweepScenario"]["Next"] == "SweepNext"  # the loop; sweep_next bounds it
    assert states["BranchOnSweepDone"]["Choices"] == [{"Variable": "$.sweep.next", "IsNull": True, "Next": "Compare"}]


# The errors a Fail state names itself (not carried from a Catch): what a caller reading the execution
# (describe-execution, the console, the ExecutionsFailed alarm) sees, each with the state that raises it.
OWN_ERRORS = {("run_benchmark.asl.json", "FailRequests"): "RequestsFailed"}


def _states(states: dict):
    for name, state in states.items():
        yield name, state
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from _states(processor["States"])


@pytest.mark.parametrize("machine", MACHINES, ids=lambda p: p.name)
def test_every_fail_state_carries_the_caught_error_or_names_its_own_with_a_cause(machine):
    for name, state in _states(json.loads(machine.read_text())["States"]):
        if state["Type"] != "Fail":
            continue
        own = OWN_ERRORS.get((machine.name, name))
        if own is None:
            assert (state.get("ErrorPath"), state.get("CausePath")) == ("$.error.Error", "$.error.Cause"), name
        else:
            # A name of its own, never one a handler raises: a caller could not tell the two apart.
            assert state["Error"] == own and own not in RAISED and own not in error_names(json.loads(machine.read_text()))
            assert state.get("CausePath") or state.get("Cause"), f"{name}: a Fail state of its own says why"


def test_a_run_whose_requests_failed_fails_its_execution_after_the_record_and_the_stop():
    # RecordSuccess may record FAILED (requests failed past max_failure_rate); the execution then ends
    # FailRequests, after the profile was stopped (when asked) and the run recorded, with the record's reason.
    states = json.loads((ROOT / "statemachine/run_benchmark.asl.json").read_text())["States"]
    assert states["BranchOnStop"]["Default"] == states["StopProfile"]["Next"] == "RecordSuccess"
    assert states["RecordSuccess"]["Next"] == "BranchOnOutcome"
    assert states["RecordSuccess"]["ResultSelector"]["error.$"] == "$.Payload.error"
    failed = {"Variable": "$.finish.status", "StringEquals": "FAILED", "Next": "FailRequests"}
    assert states["BranchOnOutcome"]["Choices"] == [failed]
    assert states["BranchOnOutcome"]["Default"] == "Done"
    assert states["FailRequests"]["CausePath"] == "$.finish.error"
