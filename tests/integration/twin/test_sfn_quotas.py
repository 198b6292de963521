"""Step Functions' quotas on the twin, as AWS enforces them: 25,000 events in one execution's history,
256 KiB per state input and output (States.DataLimitExceeded, which States.ALL does not catch).

Uses a throwaway repository root with probe state machines and one echo handler, so the quotas are
checked at their exact limits (and one past them) independently of the control plane's flows.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator

import pytest

from servingctl.control.history import EXECUTION_EVENTS, state_events, worst_case_events
from servingctl_twin.stepfunctions.quotas import HISTORY_LIMIT, PAYLOAD_LIMIT_BYTES
from servingctl_twin.twin import Twin

# ExecutionStarted, Pass "Begin" (entered, exited), then per round Choice "Loop" + Pass "Count" (2 + 2),
# the last Choice (2), Succeed "Done" (entered, exited), ExecutionSucceeded: 4 * rounds + 8 events.
LOOP_ASL = {
    "Comment": "probe: count to $.limit, 4 history events a round",
    "StartAt": "Begin",
    "States": {
        "Begin": {"Type": "Pass", "Parameters": {"n": 0, "limit.$": "$.limit"}, "Next": "Loop"},
        "Loop": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.n", "NumericGreaterThanEqualsPath": "$.limit", "Next": "Done"}],
            "Default": "Count",
        },
        "Count": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.n, 1)", "limit.$": "$.limit"}, "Next": "Loop"},
        "Done": {"Type": "Succeed"},
    },
}


def rounds_for(events: int) -> int:
    """The loop's rounds that make a history of exactly `events` events when it succeeds."""
    assert (events - 8) % 4 == 0
    return (events - 8) // 4


def payload_asl(catch: list[str]) -> dict[str, object]:
    """probe: send $.blob to the echo handler; Catch `catch` into the Pass state "Caught" (the error in
    place of the blob, so the caught state's output is small)."""
    return {
        "StartAt": "Send",
        "States": {
            "Send": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {
                    "FunctionName": "${ProfileStepsFunctionArn}",
                    "Payload": {"blob.$": "$.blob", "answer.$": "$.answer"},
                },
                "ResultSelector": {"size.$": "$.Payload.size"},
                "ResultPath": "$.sent",
                "Catch": [{"ErrorEquals": catch, "ResultPath": "$.blob", "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "Parameters": {"caught.$": "$.blob"}, "End": True},
        },
    }


HANDLER = textwrap.dedent(
    """
    def lambda_handler(event, context):
        return {"size": len(event["blob"]), "answer": "y" * event["answer"]}
    """
)


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    root = tmp_path_factory.mktemp("repo")
    (root / "statemachine").mkdir()
    (root / "statemachine" / "loop.asl.json").write_text(json.dumps(LOOP_ASL))
    (root / "statemachine" / "payload_all.asl.json").write_text(json.dumps(payload_asl(["States.ALL"])))
    (root / "statemachine" / "payload_named.asl.json").write_text(json.dumps(payload_asl(["States.DataLimitExceeded"])))
    (root / "functions" / "profile_steps").mkdir(parents=True)
    (root / "functions" / "profile_steps" / "app.py").write_text(HANDLER)
    with Twin(repo_root=root, time_scale=50) as running:
        yield running


def test_an_execution_whose_event_25000_is_its_success_succeeds(twin: Twin) -> None:
    result = twin.run("loop", {"limit": rounds_for(HISTORY_LIMIT)}, timeout_s=600)
    assert result.status == "SUCCEEDED", result.describe
    assert len(result.history) == HISTORY_LIMIT
    assert result.history[-1]["type"] == "ExecutionSucceeded"
    # servingctl.control.history's count of the same loop: its last round is one Choice short of a full one.
    assert worst_case_events(LOOP_ASL, {"Loop": rounds_for(HISTORY_LIMIT)}, {}) == HISTORY_LIMIT + 2


def test_an_execution_past_25000_events_fails_with_the_history_limit_and_no_catch(twin: Twin) -> None:
    result = twin.run("loop", {"limit": rounds_for(HISTORY_LIMIT + 4)}, timeout_s=600)
    assert result.status == "FAILED", result.describe
    assert (result.error, result.cause) == (
        "States.Runtime",
        "The execution reached the maximum number of history events (25000).",
    )
    assert len(result.history) == HISTORY_LIMIT
    last = result.history[-1]
    assert (last["type"], last["id"], last["previousEventId"]) == ("ExecutionFailed", HISTORY_LIMIT, HISTORY_LIMIT - 1)
    assert result.history[-2]["id"] == HISTORY_LIMIT - 1
    assert "stopDate" in result.describe


def _blob_for_parameters(twin: Twin, size: int) -> str:
    """A blob that makes the Send state's Parameters (compact JSON, UTF-8) exactly `size` bytes."""
    arn = twin.functions["profile_steps"]
    empty = json.dumps({"FunctionName": arn, "Payload": {"blob": "", "answer": 0}}, separators=(",", ":"))
    return "x" * (size - len(empty))


@pytest.mark.parametrize("machine", ["payload_all", "payload_named"])
def test_a_state_input_of_exactly_256_kib_after_parameters_is_accepted(twin: Twin, machine: str) -> None:
    blob = _blob_for_parameters(twin, PAYLOAD_LIMIT_BYTES)
    result = twin.run(machine, {"blob": blob, "answer": 0})
    assert result.status == "SUCCEEDED", result.describe
    assert result.output["sent"] == {"size": len(blob)}
    # A Task with no Retry, as servingctl.control.history counts it: entered, scheduled, started, succeeded, exited.
    send = payload_asl([])["States"]["Send"]
    assert len(result.history) == EXECUTION_EVENTS + state_events(send, {}) == 7


def test_a_state_input_one_byte_past_256_kib_fails_the_execution_through_a_states_all_catch(twin: Twin) -> None:
    result = twin.run("payload_all", {"blob": _blob_for_parameters(twin, PAYLOAD_LIMIT_BYTES + 1), "answer": 0})
    assert result.status == "FAILED", result.describe
    assert result.error == "States.DataLimitExceeded"
    assert "Caught" not in result.states_entered()


def test_a_catch_naming_data_limit_exceeded_catches_it(twin: Twin) -> None:
    result = twin.run("payload_named", {"blob": _blob_for_parameters(twin, PAYLOAD_LIMIT_BYTES + 1), "answer": 0})
    assert result.status == "SUCCEEDED", result.describe
    assert result.output["caught"]["Error"] == "States.DataLimitExceeded"


def test_a_task_result_past_256_kib_fails_the_execution_through_a_states_all_catch(twin: Twin) -> None:
    result = twin.run("payload_all", {"blob": "", "answer": PAYLOAD_LIMIT_BYTES})
    assert result.status == "FAILED", result.describe
    assert result.error == "States.DataLimitExceeded"
    assert "Caught" not in result.states_entered()
