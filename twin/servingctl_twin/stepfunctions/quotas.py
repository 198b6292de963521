"""Step Functions' quotas, which moto lacks: the history quota (25,000 events), the payload quota (256 KiB,
a payload of exactly that size within it, a state's input after Parameters measured too) and
States.DataLimitExceeded, which States.ALL does not catch."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

from moto.stepfunctions.parser.api import ExecutionFailedEventDetails, ExecutionStatus, HistoryEventType, TaskFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent, FailureEventException
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType
from moto.stepfunctions.parser.asl.component.state import state as sfn_state
from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda as sfn_state_task_lambda
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service as sfn_state_task_service
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventHistoryContext, EventManager
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
from moto.stepfunctions.parser.backend.execution import Execution as SfnExecution
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

from servingctl_twin.patching import Patch, original

# The history quota. AWS, "Avoid reaching the history quota" (docs.aws.amazon.com/step-functions/latest/
# dg/bp-history-limit.html): a hard quota of 25,000 events; at 24,999 events the execution waits for
# the next one: event 25,000 is ExecutionSucceeded (it succeeds) or, whatever else was due, an
# ExecutionFailed event (it fails). The error and cause as AWS records them, no Catch run, event
# 25,000 pointing at 24,999: an AWS history quoted in floci-io/floci#2734, the output in loads/ardere#86.
HISTORY_LIMIT = 25_000
HISTORY_LIMIT_ERROR = "States.Runtime"
HISTORY_LIMIT_CAUSE = f"The execution reached the maximum number of history events ({HISTORY_LIMIT})."
# The payload quota: "Maximum input or output size for a task, state, or execution: 256 KiB of data as
# a UTF-8 encoded string" (Step Functions service quotas); a payload of exactly that size is within it.
PAYLOAD_LIMIT_BYTES = 256 * 1024
DATA_LIMIT_EXCEEDED = "States.DataLimitExceeded"


class _CappedEventManager(EventManager):
    """One execution's history, ended at HISTORY_LIMIT as AWS ends it: event 25,000 is ExecutionFailed
    unless it is ExecutionSucceeded; the execution is FAILED from that moment (DescribeExecution,
    ListExecutions), its interpreter halts at once (Wait states wake up), and nothing is recorded after."""

    def __init__(self, env: Any, execution: SfnExecution, logging_session: Any) -> None:
        super().__init__(cloud_watch_logging_session=logging_session)
        self._env, self._execution = env, execution
        self._count = 0
        self._capped = False
        self._cap_lock = threading.Lock()

    def add_event(
        self, context: Any, event_type: Any, event_details: Any = None, timestamp: Any = None, update_source_event_id: bool = True
    ) -> int:
        """Record the event, or the ExecutionFailed that takes its place at the limit (none past it)."""
        with self._cap_lock:
            if self._capped:
                return HISTORY_LIMIT
            self._count += 1
            if self._count < HISTORY_LIMIT or event_type == HistoryEventType.ExecutionSucceeded:
                return int(super().add_event(context, event_type, event_details, timestamp, update_source_event_id))
            self._capped = True
            details = ExecutionFailedEventDetails(error=HISTORY_LIMIT_ERROR, cause=HISTORY_LIMIT_CAUSE)
            event_id = int(
                super().add_event(
                    EventHistoryContext(previous_event_id=HISTORY_LIMIT - 1),
                    HistoryEventType.ExecutionFailed,
                    EventDetails(executionFailedEventDetails=details),  # type: ignore[typeddict-item]  # moto requires every key; an event has one
                )
            )
        execution = self._execution
        execution.error, execution.cause = HISTORY_LIMIT_ERROR, HISTORY_LIMIT_CAUSE
        execution.stop_date = datetime.now(UTC)
        execution.exec_status = ExecutionStatus.FAILED
        self._env.set_error(details)
        return event_id


def _evaluation_environment(self: ExecutionWorker) -> Any:
    """moto's evaluation environment of an execution, its history capped at HISTORY_LIMIT events (the
    Map iterations' frames share the root's event manager, so they count in the same history)."""
    env = original("ExecutionWorker._get_evaluation_environment")(self)
    communication = self._execution_communication
    if not isinstance(communication, BaseExecutionWorkerCommunication):
        raise TypeError(f"moto's execution worker talks through a {type(communication).__name__}, not an execution's")
    execution = communication.execution
    env.event_manager = _CappedEventManager(env, execution, self._cloud_watch_logging_session)
    return env


def within_payload_quota(value: Any) -> bool:
    """True when the JSON text of value (value itself when a string) is at most 256 KiB in UTF-8 (moto
    refused a payload of exactly 256 KiB)."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_text)
    return len(text.encode("utf-8")) <= PAYLOAD_LIMIT_BYTES


def _json_text(value: Any) -> str:
    """A value JSON has no type for, as the interpreter writes it ($$.Execution.StartTime: ISO text)."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _task_parameters(self: StateTask, env: Any) -> dict[str, Any]:
    """A Task's effective input after Parameters, over the payload quota, fails the state with
    States.DataLimitExceeded ("When, after Parameters processing, the input of a state is larger than
    the payload size quota", Step Functions' error names); moto never measured it. The cause's wording
    is the twin's: AWS documents the condition, not its text."""
    parameters: dict[str, Any] = original("StateTask._eval_parameters")(self, env)
    if within_payload_quota(parameters):
        return parameters
    cause = f"The state/task '{self.name}' has an input with a size exceeding the maximum number of bytes service limit."
    raise FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded),
            event_type=HistoryEventType.TaskFailed,
            # moto's EventDetails requires every key; an event has one.
            event_details=EventDetails(taskFailedEventDetails=TaskFailedEventDetails(error=DATA_LIMIT_EXCEEDED, cause=cause)),  # type: ignore[typeddict-item]
        )
    )


def _error_equals(self: ErrorEqualsDecl, env: Any) -> None:
    """States.ALL matches every error but States.DataLimitExceeded, "a terminal error that can't be
    caught by the States.ALL error type" (Step Functions' error names): only a Retrier or Catcher that
    names it matches it (moto's States.ALL matched it too)."""
    error_name = env.stack[-1]
    if isinstance(error_name, ErrorName) and error_name.error_name == DATA_LIMIT_EXCEEDED:
        env.stack.pop()
        env.stack.append(any(name.error_name == DATA_LIMIT_EXCEEDED for name in self.error_names))
        return
    original("ErrorEqualsDecl._eval_body")(self, env)


PATCHES = [
    # The history quota: event 25,000 ends the execution (FAILED, States.Runtime) unless it succeeds.
    Patch(
        "ExecutionWorker._get_evaluation_environment",
        ExecutionWorker,
        "_get_evaluation_environment",
        ("self",),
        _evaluation_environment,
    ),
    Patch(
        "EventManager.add_event",
        EventManager,
        "add_event",
        ("self", "context", "event_type", "event_details", "timestamp", "update_source_event_id"),
    ),
    Patch("EventHistoryContext.__init__", EventHistoryContext, "__init__", ("self", "previous_event_id")),
    # States.ALL does not catch States.DataLimitExceeded.
    Patch("ErrorEqualsDecl._eval_body", ErrorEqualsDecl, "_eval_body", ("self", "env"), _error_equals),
    # A Task's input after Parameters is measured against the payload quota.
    Patch("StateTask._eval_parameters", StateTask, "_eval_parameters", ("self", "env"), _task_parameters),
    # A payload of exactly 256 KiB is within the quota (moto refused it), wherever moto measures one.
    Patch("state.is_within_size_quota", sfn_state, "is_within_size_quota", ("value",), within_payload_quota),
    Patch(
        "state_task_service.is_within_size_quota",
        sfn_state_task_service,
        "is_within_size_quota",
        ("value",),
        within_payload_quota,
    ),
    Patch(
        "state_task_lambda.is_within_size_quota", sfn_state_task_lambda, "is_within_size_quota", ("value",), within_payload_quota
    ),
]
