"""Benchmark runs whose run_benchmark execution ended without recording it: aborted (StopExecution
runs no Catch), timed out, or failed before its finish step. The sweep finds them (on the
execution's status-change event, and on every scheduled sweep among the newest runs) and does what
the state machine's own failure path would have: the run is recorded FAILED with the execution's
status and error, its hold on the profile is released, and a run that asked for a stop starts
stop_profile when the profile is READY (the reconciler calls that consistent; a profile left
STARTING or STOPPING by the run's aborted child is the reconciler's, which stops it on its own),
unless a stop of it is running already. Its workers see the run ended and write nothing more
(servingctl.runs.worker).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from servingctl.control.executions import running_execution, start_fresh
from servingctl.runs.worker import UNFINISHED, release_hold
from servingctl.shared.clock import Clock
from servingctl.shared.flow_inputs import Poll
from servingctl.store.base import Store
from servingctl.store.benchmarks import BenchmarkRun, BenchmarkStore, RunEnded, RunStatus
from servingctl.store.models import Phase

if TYPE_CHECKING:
    from types_boto3_stepfunctions import SFNClient

# How many of the newest runs a scheduled sweep looks through (an unfinished run is a recent one).
RECENT_RUNS = 50

log = logging.getLogger(__name__)


@dataclass
class EndDeps:
    """What ending a dead run needs: the stores, Step Functions, the stop machine, the clock."""

    runs: BenchmarkStore
    profiles: Store
    sfn: Any
    stop_machine_arn: str
    clock: Clock
    identity: str = "servingctl-sweep"


class EndedRun(BaseModel):
    """One unfinished run whose execution is over, and what the sweep did about it."""

    run_id: str
    profile: str
    execution: str
    execution_status: str
    action: Literal["recorded", "finished-meanwhile", "error"]
    stop_execution: str | None = None
    detail: str = ""


def _execution(sfn: SFNClient, arn: str) -> dict[str, Any]:
    """DescribeExecution (one execution, consistent), {"status": "MISSING"} when Step Functions forgot it."""
    try:
        return dict(sfn.describe_execution(executionArn=arn))
    except sfn.exceptions.ExecutionDoesNotExist:
        return {"status": "MISSING"}


def execution_reason(described: dict[str, Any]) -> str:
    """Why an execution ended as DescribeExecution tells it: execution ABORTED: <error>: <cause>."""
    return ": ".join([f"execution {described['status']}", *(str(described[k]) for k in ("error", "cause") if described.get(k))])


def stop_asked(deps: EndDeps, run: BenchmarkRun, poll: Poll | None) -> str | None:
    """The stop the run asked for, of a READY profile (any other phase is the reconciler's); a running stop is joined."""
    if deps.profiles.get_profile(run.profile).phase != Phase.READY:
        return None
    running = running_execution(deps.sfn, deps.stop_machine_arn, "stop", run.profile)
    if running is not None:
        return str(running["executionArn"])
    document: dict[str, Any] = {"profile": run.profile, **(run.request.get("stop_options") or {}), "requested_by": deps.identity}
    if poll is not None and "poll" not in document:
        document["poll"] = poll.model_dump()
    return start_fresh(deps.sfn, deps.stop_machine_arn, "stop", run.profile, ("benchmark-ended", run.run_id), document)


def end_run(deps: EndDeps, run: BenchmarkRun, described: dict[str, Any], poll: Poll | None = None) -> EndedRun:
    """Record the run FAILED (only while unfinished), release its hold, stop its profile if asked."""
    now = deps.clock.now()
    ended = EndedRun(
        run_id=run.run_id,
        profile=run.profile,
        execution=str(run.execution),
        execution_status=described["status"],
        action="recorded",
        detail=execution_reason(described),
    )
    try:
        deps.runs.update_run(run.run_id, now, when=UNFINISHED, status=RunStatus.FAILED, finished_at=now, error=ended.detail)
    except RunEnded as exc:  # its finish step got there first: that record stays
        return ended.model_copy(update={"action": "finished-meanwhile", "detail": str(exc)})
    release_hold(deps.profiles, run, now)
    if run.request.get("stop"):
        ended = ended.model_copy(update={"stop_execution": stop_asked(deps, run, poll)})
    return ended


def end_dead_runs(deps: EndDeps, execution_arn: str | None = None, poll: Poll | None = None) -> list[EndedRun]:
    """End every unfinished run among the newest whose execution is no longer RUNNING (only the
    run of execution_arn when given); each on its own: a failure is logged and reported."""
    done = []
    for run in deps.runs.list_runs(limit=RECENT_RUNS):
        if run.status not in UNFINISHED or not run.execution or execution_arn not in (None, run.execution):
            continue
        try:
            described = _execution(deps.sfn, run.execution)
            if described["status"] == "RUNNING":
                continue
            ended = end_run(deps, run, described, poll)
        except Exception as exc:  # one run's failure must not keep another's GPU running
            log.exception("ending benchmark run %s failed", run.run_id)
            ended = EndedRun(
                run_id=run.run_id,
                profile=run.profile,
                execution=run.execution,
                execution_status="unknown",
                action="error",
                detail=f"{type(exc).__name__}: {exc}",
            )
        done.append(ended)
    return done
