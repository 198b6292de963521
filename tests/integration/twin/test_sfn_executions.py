"""How an execution that did not succeed reads on the twin, as on AWS: DescribeExecution gives the error
and cause StopExecution was given (ABORTED; each key left out when not given, never null), and the
Fail state's Error and Cause of a FAILED one; the history's ExecutionAborted event carries the same.

Uses a throwaway repository root with two probe state machines (a long Wait, a Fail state).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from servingctl_twin.twin import Twin

WAIT_ASL = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 86400, "End": True}}}
FAIL_ASL = {"StartAt": "Boom", "States": {"Boom": {"Type": "Fail", "Error": "Probe.Failed", "Cause": "the probe failed"}}}


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    root = tmp_path_factory.mktemp("repo")
    (root / "statemachine").mkdir()
    (root / "statemachine" / "wait.asl.json").write_text(json.dumps(WAIT_ASL))
    (root / "statemachine" / "fail.asl.json").write_text(json.dumps(FAIL_ASL))
    (root / "functions").mkdir()
    with Twin(repo_root=root) as running:
        yield running


def _stopped(twin: Twin, name: str, **reason: str) -> dict[str, object]:
    """Start the waiting machine, stop it with `reason` (error, cause), and describe it."""
    sfn = twin.client("stepfunctions")
    arn = twin.start_execution("wait", {}, name=name)
    sfn.stop_execution(executionArn=arn, **reason)
    return dict(sfn.describe_execution(executionArn=arn))


def test_a_stopped_execution_reads_aborted_with_the_error_and_cause_it_was_stopped_with(twin: Twin) -> None:
    described = _stopped(twin, "stopped-with-reason", error="Manual", cause="probe")
    assert (described["status"], described.get("error"), described.get("cause")) == ("ABORTED", "Manual", "probe")
    assert "stopDate" in described
    # Read again once the interpreter has ended the execution: the same answer (AWS's is unchanged minutes later).
    result = twin.wait_execution(str(described["executionArn"]), timeout_s=30)
    assert (result.status, result.error, result.cause) == ("ABORTED", "Manual", "probe")
    [aborted] = [e for e in result.history if e["type"] == "ExecutionAborted"]
    assert aborted["executionAbortedEventDetails"] == {"error": "Manual", "cause": "probe"}


def test_a_stopped_execution_with_only_a_cause_reads_that_cause_and_no_error_key(twin: Twin) -> None:
    described = _stopped(twin, "stopped-with-cause", cause="from the console")
    assert described["status"] == "ABORTED" and described["cause"] == "from the console" and "error" not in described


def test_a_stopped_execution_without_a_reason_has_neither_key(twin: Twin) -> None:
    described = _stopped(twin, "stopped-plain")
    assert described["status"] == "ABORTED" and "error" not in described and "cause" not in described
    result = twin.wait_execution(str(described["executionArn"]), timeout_s=30)
    [aborted] = [e for e in result.history if e["type"] == "ExecutionAborted"]
    assert aborted["executionAbortedEventDetails"] == {}  # present but empty, as AWS records it


def test_a_failed_execution_reads_its_fail_states_error_and_cause(twin: Twin) -> None:
    result = twin.run("fail", {}, name="failed")
    assert (result.status, result.error, result.cause) == ("FAILED", "Probe.Failed", "the probe failed")
