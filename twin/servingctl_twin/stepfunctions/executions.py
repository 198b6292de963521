"""Step Functions' executions as AWS closes and reads them: StopExecution answers ABORTED at once (moto
left the execution RUNNING until the state in flight ended; the Task's result is then dropped) with
the error and cause it was given (moto kept them in the history only), and
ListExecutions/DescribeExecution are eventually consistent (the executions-lag fault makes them lag
as AWS documents they may; moto always answers the latest state)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.stepfunctions.exceptions import ExecutionDoesNotExist
from moto.stepfunctions.parser.api import ExecutionStatus
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
from moto.stepfunctions.parser.backend.execution import Execution as SfnExecution
from moto.stepfunctions.responses import StepFunctionResponse

from servingctl_twin.patching import Patch, original, part_of


def _stop_execution(self: SfnExecution, stop_date: datetime, error: str | None, cause: str | None) -> None:
    """StopExecution as AWS does it: ABORTED at once (moto's interpreter still halts at its next state),
    DescribeExecution then answering the error and cause given, each key left out when not given
    (measured on AWS: stopped with error Manual and cause probe it reads ABORTED, Manual, probe)."""
    original("SfnExecution.stop")(self, stop_date, error, cause)
    if self.exec_status == ExecutionStatus.RUNNING:
        self.exec_status = ExecutionStatus.ABORTED
        self.stop_date = stop_date
        self.error, self.cause = error, cause


def _stop_execution_request(self: StepFunctionResponse) -> ActionResult:
    """StopExecution with the caller's error and cause (moto's model stops every execution with "" for both)."""
    execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
    execution.stop(stop_date=utcnow(), error=self._get_param("error"), cause=self._get_param("cause"))
    return ActionResult({"stopDate": execution.stop_date})


def _reflect_execution_status(self: BaseExecutionWorkerCommunication) -> None:
    """An execution already closed (ABORTED by StopExecution, FAILED at the history limit) keeps that
    status and stop date when its interpreter ends later."""
    if self.execution.exec_status != ExecutionStatus.RUNNING:
        return
    original("BaseExecutionWorkerCommunication._reflect_execution_status")(self)


# ListExecutions and DescribeExecution: "This operation is eventually consistent. The results are best
# effort and may not reflect very recent updates and changes." (Step Functions API reference of each).
# With a lag set (the executions-lag fault), a public read does not see an execution started less than
# the lag ago (DescribeExecution: ExecutionDoesNotExist) and sees one that closed less than the lag ago
# still RUNNING. Step Functions' own reads are not public: the interpreter's (.sync integrations; its
# boto clients sign with access key "ak", moto's boto_client_for) and the twin's AWS-side agents (the
# world, EventBridge's status-change events), which name themselves in their User-Agent.
INTERPRETER_ACCESS_KEY = "ak"


class ReadLag:
    """A site's lag of the public ListExecutions/DescribeExecution (None: consistent)."""

    def __init__(self) -> None:
        self._lag: tuple[timedelta, str] | None = None  # (lag, User-Agent token of the exempt agents)

    def set(self, seconds: float | None, exempt_agent: str = "") -> None:
        """Make public reads lag by seconds (None: consistent again); requests whose User-Agent holds
        exempt_agent, and the interpreter's own, see the latest state."""
        self._lag = None if seconds is None else (timedelta(seconds=seconds), exempt_agent)

    def seen_by(self, headers: Any) -> timedelta | None:
        """The lag a request with these headers sees (None: consistent)."""
        lag = self._lag
        if lag is None:
            return None
        if f"Credential={INTERPRETER_ACCESS_KEY}/" in headers.get("Authorization", ""):
            return None
        if lag[1] and lag[1] in headers.get("User-Agent", ""):
            return None
        return lag[0]


def _public_lag(response: StepFunctionResponse) -> timedelta | None:
    """The lag the request being answered sees (None: consistent)."""
    lag = part_of(response.region, ReadLag)
    return None if lag is None else lag.seen_by(response.headers)


def _utc(moment: datetime) -> datetime:
    """moto stamps StopExecution with a naive UTC time, everything else with an aware one."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _lagged(execution: Any, lag: timedelta, now: datetime) -> tuple[str, datetime | None] | None:
    """(status, stop date) a lagging read shows for the execution; None while it is not visible yet."""
    if now - _utc(execution.start_date) < lag:
        return None
    stopped = execution.stop_date
    if execution.status != ExecutionStatus.RUNNING and stopped is not None and now - _utc(stopped) < lag:
        return ExecutionStatus.RUNNING.value, None
    return str(execution.status), execution.stop_date


def _describe_execution(self: StepFunctionResponse) -> ActionResult:
    """DescribeExecution, lagging under the executions-lag fault."""
    lag = _public_lag(self)
    if lag is None:
        return original("StepFunctionResponse.describe_execution")(self)
    arn = self._get_param("executionArn")
    seen = _lagged(self.stepfunction_backend.describe_execution(arn), lag, datetime.now(UTC))
    if seen is None:
        raise ExecutionDoesNotExist("Execution Does Not Exist: '" + arn + "'")
    answer: ActionResult = original("StepFunctionResponse.describe_execution")(self)
    result = answer.result
    assert isinstance(result, dict)
    if seen[0] == ExecutionStatus.RUNNING.value and result["status"] != ExecutionStatus.RUNNING.value:
        for key in ("stopDate", "output", "outputDetails", "error", "cause"):
            result.pop(key, None)
        result["status"] = seen[0]
    return answer


def _list_executions(self: StepFunctionResponse) -> ActionResult:
    """ListExecutions, lagging under the executions-lag fault (one page: the twin keeps few executions)."""
    lag = _public_lag(self)
    if lag is None:
        return original("StepFunctionResponse.list_executions")(self)
    arn, wanted = self._get_param("stateMachineArn"), self._get_param("statusFilter")
    machine = self.stepfunction_backend.describe_state_machine(arn)
    now, items = datetime.now(UTC), []
    for execution in sorted(machine.executions, key=lambda e: e.start_date, reverse=True):
        seen = _lagged(execution, lag, now)
        if seen is None or (wanted and seen[0] != wanted):
            continue
        item = {
            "executionArn": execution.execution_arn,
            "name": execution.name,
            "startDate": execution.start_date,
            "stateMachineArn": machine.arn,
            "status": seen[0],
        }
        if seen[1] is not None:
            item["stopDate"] = seen[1]
        items.append(item)
    return ActionResult({"executions": items})


PATCHES = [
    # StopExecution: ABORTED at once, with the error and cause it was given.
    Patch("SfnExecution.stop", SfnExecution, "stop", ("self", "stop_date", "error", "cause"), _stop_execution),
    Patch("StepFunctionResponse.stop_execution", StepFunctionResponse, "stop_execution", ("self",), _stop_execution_request),
    # A closed execution (ABORTED, FAILED at the history quota) stays closed when its interpreter ends.
    Patch(
        "BaseExecutionWorkerCommunication._reflect_execution_status",
        BaseExecutionWorkerCommunication,
        "_reflect_execution_status",
        ("self",),
        _reflect_execution_status,
    ),
    # Eventually consistent reads under the executions-lag fault.
    Patch("StepFunctionResponse.describe_execution", StepFunctionResponse, "describe_execution", ("self",), _describe_execution),
    Patch("StepFunctionResponse.list_executions", StepFunctionResponse, "list_executions", ("self",), _list_executions),
]
