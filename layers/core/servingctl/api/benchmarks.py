"""What the benchmark routes do: start a run_benchmark execution (the input checked here with the
state machine's own rules, so a bad request is a 400 at once rather than a failed execution), list
the runs, and one run with its results, cost comparisons and links to its per-request records.

A run's execution is named bench-<run id>: the same run id and input again return the same
execution (Step Functions' idempotent start), the same run id with another input is a 409.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel, Field

from servingctl.api.service import ApiDeps, BadRequest, Conflict, NotFound
from servingctl.benchmarks.matrix import BenchmarkInput, plan_scenarios
from servingctl.control.executions import canonical
from servingctl.schema.results import RunResult
from servingctl.shared.errors import InvalidInput
from servingctl.store.benchmarks import BenchmarkRun, Reproducibility, RunStatus, StoredComparison, run_result
from servingctl.store.models import Phase

RECORDS_URL_EXPIRY_S = 3600


class BenchmarkRef(BaseModel):
    """A benchmark the API started (202)."""

    run_id: str
    execution_arn: str
    execution_id: str = Field(description="the execution name, bench-<run id>")
    profile: str
    scenarios: list[str] = Field(description="the planned scenarios in run order")
    start: bool = Field(description="the profile is not READY and will be started first")
    stop: bool


class BenchmarkSummary(BaseModel):
    """A run as GET /benchmarks lists it."""

    run_id: str
    profile: str
    status: str = Field(description="PENDING (execution started, run not recorded yet), PLANNED, RUNNING, SUCCEEDED, FAILED")
    label: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    scenarios: list[str] = Field(default_factory=list, description="planned scenario names")
    error: str | None = None


class BenchmarkDetail(BenchmarkSummary):
    """GET /benchmarks/{run_id}: the run, its results so far (records left out), comparisons and record links."""

    execution_arn: str | None = None
    execution_status: str | None = Field(default=None, description="RUNNING, SUCCEEDED, FAILED, ABORTED, TIMED_OUT")
    scenarios_written: list[str] = Field(default_factory=list)
    request: dict[str, Any] = Field(
        default_factory=dict, description="the input as the state machine validated it (PENDING: as given to the execution)"
    )
    reproducibility: Reproducibility | None = None
    result: RunResult | None = Field(default=None, description="results schema (results.json) without per-request records")
    comparisons: list[StoredComparison] = Field(default_factory=list)
    records_urls: dict[str, str] = Field(default_factory=dict, description="scenario -> presigned URL of its gzip JSON lines")


def _new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def execution_name(run_id: str) -> str:
    """bench-<run id> (run ids are at most 57 characters, names 80)."""
    return f"bench-{run_id}"


def start_benchmark(deps: ApiDeps, given: BenchmarkInput) -> BenchmarkRef:
    """Check the input like the state machine's plan step, then start (or find) the execution."""
    if given.profile not in deps.registry.profiles:
        raise BadRequest(
            f"body.profile: unknown profile {given.profile!r}; known profiles: {', '.join(sorted(deps.registry.profiles))}",
            "body.profile",
        )
    try:
        planned = plan_scenarios(given, deps.registry.profiles[given.profile], ecs_available=deps.bench_ecs)
    except InvalidInput as exc:
        raise BadRequest(str(exc), fields=["body"]) from None
    phase = deps.store.get_profile(given.profile).phase
    if phase != Phase.READY and not given.start:
        raise Conflict(
            f'profile {given.profile} is {phase.value}, not READY; send "start": true to start it first '
            '(and "stop": true to stop it afterwards)',
            "body.start",
        )
    run_id = given.run_id or _new_run_id(deps.clock.now())
    document = given.model_dump(mode="json", exclude_defaults=True) | {"run_id": run_id}
    name = execution_name(run_id)
    try:
        answer = deps.sfn.start_execution(stateMachineArn=deps.bench_machine_arn, name=name, input=canonical(document))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
            raise Conflict(f"run_id {run_id} is already used by another benchmark", "body.run_id") from None
        raise
    return BenchmarkRef(
        run_id=run_id,
        execution_arn=answer["executionArn"],
        execution_id=name,
        profile=given.profile,
        scenarios=[s.name for s in planned],
        start=phase != Phase.READY,
        stop=given.stop,
    )


def _summary(run: BenchmarkRun) -> BenchmarkSummary:
    return BenchmarkSummary(
        run_id=run.run_id,
        profile=run.profile,
        status=run.status.value,
        label=run.label,
        created_at=run.created_at,
        finished_at=run.finished_at,
        scenarios=run.scenarios,
        error=run.error,
    )


def list_benchmarks(deps: ApiDeps, profile: str | None, limit: int) -> list[BenchmarkSummary]:
    """Runs newest first, optionally of one profile."""
    if profile is not None and profile not in deps.registry.profiles:
        raise NotFound(
            f"unknown profile {profile!r}; known profiles: {', '.join(sorted(deps.registry.profiles))}", "query.profile"
        )
    return [_summary(run) for run in deps.runs.list_runs(profile=profile, limit=limit)]


def _execution(deps: ApiDeps, run_id: str) -> dict[str, Any] | None:
    arn = deps.bench_machine_arn.replace(":stateMachine:", ":execution:") + ":" + execution_name(run_id)
    try:
        execution: dict[str, Any] = deps.sfn.describe_execution(executionArn=arn)
        return execution
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("ExecutionDoesNotExist", "InvalidArn"):
            return None
        raise


def get_benchmark(deps: ApiDeps, run_id: str) -> BenchmarkDetail:
    """One run; a run whose execution has not recorded it yet (or failed before) is PENDING or FAILED,
    and one whose execution died (aborted, timed out) before recording its end is FAILED."""
    # The execution first: a record read after an ended execution is final (the record is written
    # before the execution ends), while one read before it may be overtaken by the end.
    execution = _execution(deps, run_id)
    run = deps.runs.get_run(run_id)
    ended = execution is not None and execution["status"] != "RUNNING"
    reason = None
    if ended and execution is not None:
        reason = ": ".join(
            [f"execution {execution['status']}", *(str(execution[k]) for k in ("error", "cause") if execution.get(k))]
        )
    if run is None:
        if execution is None:
            raise NotFound(f"no benchmark run {run_id!r}", "path.run_id")
        given = json.loads(execution.get("input") or "{}")  # what was asked, until the run records what it validated
        return BenchmarkDetail(
            run_id=run_id,
            profile=str(given.get("profile", "")),
            status="FAILED" if ended else "PENDING",
            error=reason,
            execution_arn=execution["executionArn"],
            execution_status=execution["status"],
            request=given,
        )
    summary = _summary(run)
    if ended and run.status in (RunStatus.PLANNED, RunStatus.RUNNING):
        summary = summary.model_copy(update={"status": RunStatus.FAILED.value, "error": run.error or reason})
    stored = deps.runs.list_scenarios(run_id)
    urls = {
        s.name: deps.s3.generate_presigned_url(
            "get_object", Params={"Bucket": deps.records_bucket, "Key": s.records_key}, ExpiresIn=RECORDS_URL_EXPIRY_S
        )
        for s in stored
    }
    return BenchmarkDetail(
        **summary.model_dump(),
        execution_arn=execution["executionArn"] if execution else run.execution,
        execution_status=execution["status"] if execution else None,
        scenarios_written=[s.name for s in stored],
        request=run.request,
        reproducibility=run.reproducibility,
        result=run_result(run, deps.runs),
        comparisons=deps.runs.list_comparisons(run_id),
        records_urls=urls,
    )
