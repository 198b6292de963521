"""What the benchmark routes do: start a run_benchmark execution (the input checked here with the
state machine's own rules, so a bad request is a 400 at once rather than a failed execution), list
the runs, and one run with its results, cost comparisons and links to its per-request records.

A run's execution is named bench-<run id>: the same run id and input again return the same
execution (Step Functions' idempotent start), the same run id with another input is a 409.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from datetime import datetime
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError
from pydantic import BaseModel, Field

from servingctl.api.service import ApiDeps, BadRequest, Conflict, NotFound
from servingctl.control.executions import canonical
from servingctl.runs.matrix import RUN_ID_PATTERN, BenchmarkInput, plan_scenarios
from servingctl.schema.results import RunResult
from servingctl.shared.errors import InvalidInput
from servingctl.store.benchmarks import BenchmarkRun, Reproducibility, RunStatus, StoredComparison, run_result
from servingctl.store.models import Phase
from servingctl.store.records import dataset_key

RECORDS_URL_EXPIRY_S = 3600
# A dataset's upload URL: long enough for 64 MiB on a slow link, short enough not to linger.
UPLOAD_URL_EXPIRY_S = 900
UPLOAD_CONTENT_TYPE = "application/x-ndjson"
# The API's S3 client presigns with SigV4 in every region: botocore's default in us-east-1 (and the
# other regions older than 2014) is SigV2, which signs no header, so the size, the checksum and
# If-None-Match would bind nothing.
PRESIGN_CONFIG = Config(signature_version="s3v4")


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
    status: str = Field(
        description="PENDING (execution started, run not recorded yet), PLANNED, RUNNING, SUCCEEDED, FAILED, CANCELLED"
    )
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


class DatasetUpload(BaseModel):
    """Where to PUT a run's prompts: a presigned URL for runs/<run id>/dataset.jsonl and the headers it was signed with."""

    run_id: str
    key: str = Field(description="the object's key in the records bucket")
    url: str = Field(description="presigned S3 URL: PUT the JSONL there with exactly these headers")
    method: str = "PUT"
    headers: dict[str, str] = Field(description="headers the PUT must carry (signed: S3 refuses the upload without them)")
    expires_in_s: int


def upload_dataset(deps: ApiDeps, run_id: str, size: int, sha256: str) -> DatasetUpload:
    """A presigned PUT for a run's prompts, once: S3 checks the size and sha256, and refuses a second
    upload to the same key (If-None-Match); 409 for a run that exists already."""
    if not re.fullmatch(RUN_ID_PATTERN, run_id):
        raise BadRequest(f"path.run_id: {run_id!r}; expected {RUN_ID_PATTERN} (e.g. 20261206T120000Z-ab12cd)", "path.run_id")
    if deps.runs.get_run(run_id) is not None or _execution(deps, run_id) is not None:
        raise Conflict(f"run {run_id} exists already; upload prompts for a new run id", "path.run_id")
    checksum = base64.b64encode(bytes.fromhex(sha256)).decode()
    key = dataset_key(run_id)
    headers = {
        "Content-Type": UPLOAD_CONTENT_TYPE,
        "Content-Length": str(size),
        "x-amz-checksum-sha256": checksum,
        "If-None-Match": "*",
    }
    url = deps.s3.generate_presigned_url(
        "put_object",
        Params={
            "Bucket": deps.records_bucket,
            "Key": key,
            "ContentType": UPLOAD_CONTENT_TYPE,
            "ContentLength": size,
            "ChecksumSHA256": checksum,
            "IfNoneMatch": "*",
        },
        ExpiresIn=UPLOAD_URL_EXPIRY_S,
    )
    return DatasetUpload(run_id=run_id, key=key, url=url, headers=headers, expires_in_s=UPLOAD_URL_EXPIRY_S)


def _check_upload(deps: ApiDeps, given: BenchmarkInput) -> None:
    """A run with a dataset names the run id its prompts were uploaded for, and they are there."""
    if given.dataset is None:
        return
    if given.run_id is None:
        raise BadRequest("body.run_id: required with a dataset: the run id its prompts were uploaded for", "body.run_id")
    key = dataset_key(given.run_id)
    try:
        deps.s3.head_object(Bucket=deps.records_bucket, Key=key)
    except ClientError as exc:
        # The API may read runs/* but not list the bucket: S3 answers a missing key with 403 then.
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound", "403", "AccessDenied"):
            raise
        raise BadRequest(
            f"body.dataset: nothing uploaded at s3://{deps.records_bucket}/{key}; POST /benchmarks/{given.run_id}/dataset "
            "and PUT the prompts first",
            "body.dataset",
        ) from None


def _new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def benchmark_execution_name(run_id: str) -> str:
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
    _check_upload(deps, given)
    phase = deps.store.get_profile(given.profile).phase
    if phase != Phase.READY and not given.start:
        raise Conflict(
            f'profile {given.profile} is {phase.value}, not READY; send "start": true to start it first '
            '(and "stop": true to stop it afterwards)',
            "body.start",
        )
    run_id = given.run_id or _new_run_id(deps.clock.now())
    document = given.model_dump(mode="json", exclude_defaults=True) | {"run_id": run_id}
    name = benchmark_execution_name(run_id)
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


class CancelAnswer(BaseModel):
    """POST /benchmarks/{run_id}/cancel: what the cancel did."""

    run_id: str
    profile: str
    status: str = Field(description="CANCELLED (or FAILED for a run whose execution had not recorded it yet)")
    execution_arn: str
    stop_execution: str | None = Field(
        default=None, description="the stop_profile execution started (or joined) because the run asked for a stop"
    )
    message: str


def cancel_benchmark(deps: ApiDeps, run_id: str, caller: str | None) -> CancelAnswer:
    """Mark the run CANCELLED (only while PLANNED or RUNNING: its workers then stop and write nothing
    more), stop its execution (Step Functions stops the run's ECS task, as for any .sync task), give
    the profile back, and start the stop the run asked for. 404 unknown run; 409 a run that ended."""
    from servingctl.runs.ended import EndDeps, stop_asked
    from servingctl.runs.worker import UNFINISHED, release_hold
    from servingctl.store.benchmarks import RunEnded

    run = deps.runs.get_run(run_id)
    # The run's own execution when it is recorded (a console start may name it otherwise), else bench-<run id>.
    execution = _described(deps, run.execution) if run is not None and run.execution else _execution(deps, run_id)
    if run is None and execution is None:
        raise NotFound(f"no benchmark run {run_id!r}", "path.run_id")
    if execution is not None and execution["status"] != "RUNNING" and (run is None or run.status not in UNFINISHED):
        status = run.status.value if run is not None else "FAILED"
        raise Conflict(f"run {run_id} already ended ({status}); nothing to cancel", "path.run_id")
    who = caller or "the API"
    now = deps.clock.now()
    if run is not None:
        try:
            run = deps.runs.update_run(
                run_id, now, when=UNFINISHED, status=RunStatus.CANCELLED, finished_at=now, error=f"cancelled by {who}"
            )
        except RunEnded as exc:
            ended = exc.status.value if exc.status else "gone"
            raise Conflict(f"run {run_id} already ended ({ended}); nothing to cancel", "path.run_id") from None
    arn = (
        execution["executionArn"]
        if execution is not None
        else (run.execution if run is not None and run.execution else _arn(deps, run_id))
    )
    try:
        deps.sfn.stop_execution(executionArn=arn, error="Cancelled", cause=f"cancelled by {who}")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
            raise
    if run is None:  # stopped before its plan step recorded it: nothing was measured or started
        given = json.loads((execution or {}).get("input") or "{}")
        return CancelAnswer(
            run_id=run_id,
            profile=str(given.get("profile", "")),
            status="FAILED",
            execution_arn=arn,
            message=f"run {run_id} stopped before it was recorded; nothing was measured",
        )
    release_hold(deps.store, run, now)
    stopping = None
    if run.request.get("stop"):
        ends = EndDeps(
            runs=deps.runs,
            profiles=deps.store,
            sfn=deps.sfn,
            stop_machine_arn=deps.stop_machine_arn,
            clock=deps.clock,
            identity=who,
        )
        stopping = stop_asked(ends, run, None)
    return CancelAnswer(
        run_id=run_id,
        profile=run.profile,
        status=RunStatus.CANCELLED.value,
        execution_arn=arn,
        stop_execution=stopping,
        message=f"run {run_id} cancelled; its execution is stopped"
        + (f"; {run.profile} is being stopped as the run asked ({stopping})" if stopping else "")
        + ("" if run.request.get("stop") else f"; {run.profile} keeps running: `servingctl stop {run.profile}` stops it"),
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


def _arn(deps: ApiDeps, run_id: str) -> str:
    """The ARN of the execution POST /benchmarks starts for a run id."""
    return deps.bench_machine_arn.replace(":stateMachine:", ":execution:") + ":" + benchmark_execution_name(run_id)


def _execution(deps: ApiDeps, run_id: str) -> dict[str, Any] | None:
    """The execution POST /benchmarks started for a run id, None when there is none."""
    return _described(deps, _arn(deps, run_id))


def _described(deps: ApiDeps, arn: str) -> dict[str, Any] | None:
    """DescribeExecution, None when Step Functions does not know it."""
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
    from servingctl.runs.ended import execution_reason

    # The execution first: a record read after an ended execution is final (the record is written
    # before the execution ends), while one read before it may be overtaken by the end.
    execution = _execution(deps, run_id)
    run = deps.runs.get_run(run_id)
    ended = execution is not None and execution["status"] != "RUNNING"
    reason = execution_reason(execution) if ended and execution is not None else None
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
