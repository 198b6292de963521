"""The benchmark worker: every step of run_benchmark that talks to the model server or storage,
dispatched on event["action"] (the bench_worker Lambda in the VPC, or the ECS task for scenarios
too long for Lambda: `python -m servingctl.runs.worker` with the event in $SERVINGCTL_BENCH_EVENT).

Actions (event = {"action", "state", "execution"}; plan also gets "started_at"):
  plan          validate the input, resolve the profile, check READY, plan the matrix, record the run
  calibrate     server metadata and one calibration per input length, into the run's record
  run_scenario  one scenario; its summary and records are written as soon as it finishes; answers
                whether the client was the bottleneck and, if so, the shards to measure it with
  run_shard     one worker's share of a split scenario, started at the common instant
  merge_shards  the shards merged into one scenario, judged against the server's counters
  sweep_next    the saturation sweep's next concurrency from the scenarios written so far (bench.sweep),
                or its stop, recorded with the run
  compare       self-hosted vs managed API for every written scenario
  finish        the run's final status (after a failure too: what was written stays)

A run's workers write only while it is RUNNING: every scenario and comparison is written once, in
one transaction with a check of the run's status, and a measurement in flight is cancelled within
RUN_WATCH_S of its run ending (an aborted, failed or timed-out execution, recorded by the sweep), so
a worker that outlives its execution fails with RunEnded and writes nothing. A result already
written (a retry, a duplicate worker) stays: the step answers with it. Records objects carry the
step's attempt (when Step Functions entered the state, and its retry count) in their keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import re
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

import servingctl
from servingctl.control.config import resolve_profile, start_config, stop_config
from servingctl.control.executions import execution_name
from servingctl.control.state import parse_state
from servingctl.costs import CompareInput, PriceCatalog, compare, day_use, load_catalog, slo_cost, warm_pool_monthly_usd
from servingctl.loadgen.backend import Backend, Connection
from servingctl.loadgen.datasets import DatasetError
from servingctl.loadgen.measure import Measurement, Shard, measure_scenario, measured_requests, settled_snapshot
from servingctl.loadgen.metrics import failure_words
from servingctl.loadgen.runner import connection_for, prepare, prepare_workloads, summarize_measurement
from servingctl.loadgen.saturation import decide, result_of, step_of
from servingctl.loadgen.server_metrics import ServerMetrics, Snapshot, thinned
from servingctl.loadgen.shards import earliest_snapshot, merge_shards, shares
from servingctl.loadgen.workload import Workload, split_workload
from servingctl.registry.models import Registry, ServingProfile
from servingctl.runs import state as models
from servingctl.runs.matrix import (
    BenchmarkInput,
    PlannedScenario,
    parse_benchmark_input,
    plan_scenarios,
    run_config,
    sweep_scenario,
)
from servingctl.runs.split import START_LEAD_S, ShardPlan, plan_shards, shard_config
from servingctl.runs.uploads import read_upload
from servingctl.schema.comparison import SloCost
from servingctl.schema.results import (
    SCHEMA_VERSION,
    Calibration,
    ClientSelfCheck,
    RunMetadata,
    ScenarioSummary,
    ServerSample,
    SweepStep,
)
from servingctl.shared.clock import Clock, SystemClock
from servingctl.shared.environment import BenchTaskSettings, BenchWorkerSettings
from servingctl.shared.errors import ControlError, InvalidInput, action_of, error_reason, throttling_as_error
from servingctl.store.base import Store
from servingctl.store.benchmarks import (
    LIVE,
    BenchmarkRun,
    BenchmarkStore,
    Reproducibility,
    ResultExists,
    RunEnded,
    Runner,
    RunStatus,
    Split,
    StoredComparison,
    StoredScenario,
)
from servingctl.store.models import Phase
from servingctl.store.records import RecordsExist, RecordStore, dataset_key, records_key

# Extra lease a start made for a benchmark gets beyond the profile's default, per planned hour.
LEASE_MARGIN_MINUTES = 30
# A step's hold on its profile outlasts the step's estimate by this much: it covers the state
# machine's way to the next step (which renews it), and lapses by itself if the run dies.
HOLD_MARGIN_S = 600
# A scenario's item holds its metrics over time: an ECS scenario of hours would pass DynamoDB's
# 400 KB item limit at one sample a second, so longer timelines are thinned to this many (~60 KB).
STORED_TIMELINE_SAMPLES = 300
SHARD_TIMELINE_SAMPLES = 100
# How often a measuring worker reads its run: one that ended stops the measurement this soon.
RUN_WATCH_S = 5.0
# A dataset's shard reads the upload and counts every prompt through /tokenize before the common
# start: this much more lead a prompt (a pessimistic 1,000 prompts a second).
COUNTED_PROMPTS_S = 0.001
# The statuses calibrate and finish may move a run from (after them, the run has ended).
UNFINISHED = frozenset({RunStatus.PLANNED, RunStatus.RUNNING})

log = logging.getLogger(__name__)
T = TypeVar("T")


class ProfileNotReady(ControlError):
    """The profile is not READY and the input did not ask to start it."""


class RunNotFound(ControlError):
    """The state names a benchmark run the store does not have."""


@dataclass(frozen=True)
class EcsTarget:
    """Where scenarios too long for Lambda run: the benchmark task definition and its network."""

    cluster: str
    task_definition: str
    subnets: list[str]
    security_groups: list[str]
    container: str = "bench"


@dataclass
class WorkerDeps:
    """What the actions need: registry, stores, clock, the price catalog and (tests) an HTTP transport."""

    registry: Registry
    runs: BenchmarkStore
    records: RecordStore
    profiles: Store
    clock: Clock = field(default_factory=SystemClock)
    ecs: EcsTarget | None = None
    catalog: Callable[[], PriceCatalog] = load_catalog
    transport: httpx.AsyncBaseTransport | None = None
    # The stores limited to one run (run id, profile if known) -> runs, records, profiles: deployed,
    # BenchRunRole's session tagged with the run (servingctl.runs.scoped); None: the stores
    # above serve every run (tests on one process's stores).
    scope: Callable[[str, str | None], tuple[BenchmarkStore, RecordStore, Store]] | None = None


# ---- helpers ------------------------------------------------------------------------------------
def _state(event: dict[str, Any]) -> dict[str, Any]:
    state = event.get("state")
    if not isinstance(state, dict):
        raise InvalidInput("state: expected the execution state object ($)")
    return state


def _run(deps: WorkerDeps, run_id: Any) -> BenchmarkRun:
    run = deps.runs.get_run(str(run_id)) if run_id else None
    if run is None:
        raise RunNotFound(f"run_id: no benchmark run {run_id!r} in the store")
    return run


def _live_run(deps: WorkerDeps, run_id: Any, wanted: frozenset[RunStatus] = LIVE) -> BenchmarkRun:
    """The run, read now; RunEnded unless its status is one of wanted (a late worker stops here)."""
    run = _run(deps, run_id)
    if run.status not in wanted:
        raise RunEnded(run.run_id, run.status, wanted)
    return run


@contextlib.contextmanager
def _ends_cleanly(deps: WorkerDeps, run: BenchmarkRun) -> Iterator[None]:
    """A step whose run ended under it gives the profile back (if it still holds it) and fails with RunEnded."""
    try:
        yield
    except RunEnded as exc:
        release_hold(deps.profiles, run, deps.clock.now())
        log.warning("benchmark run %s ended under this worker: %s", run.run_id, exc)
        raise


async def _while_live(deps: WorkerDeps, run_id: str, work: Coroutine[Any, Any, T]) -> T:
    """Await work while the run is RUNNING; cancel it (RunEnded) once a read finds the run ended."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=RUN_WATCH_S)
        if done:
            return task.result()
        run = await asyncio.to_thread(deps.runs.get_run, run_id)
        if run is None or run.status not in LIVE:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise RunEnded(run_id, run.status if run else None, LIVE)


def attempt_of(event: dict[str, Any]) -> str:
    """This step attempt's label for object keys: t<digits of the time Step Functions entered the
    state>-r<retry count> (a retry, or a redrive entering the state again, gets a new one)."""
    attempt = event.get("attempt")
    if not isinstance(attempt, dict):
        attempt = {}
    entered = re.sub(r"\D", "", str(attempt.get("entered") or ""))
    retry = attempt.get("retry")
    return f"t{entered or 0}-r{retry if isinstance(retry, int) else 0}"


def _given(run: BenchmarkRun) -> BenchmarkInput:
    return BenchmarkInput.model_validate(run.request)


def _connection(deps: WorkerDeps, run: BenchmarkRun) -> Connection:
    """The profile's endpoint with its real routing header (the registry is the source)."""
    spec = deps.registry.profiles[run.profile]
    return connection_for(run.config, headers={spec.routing_header.name: spec.routing_header.value})


def _calibration(run: BenchmarkRun, planned: PlannedScenario) -> Calibration:
    calibrations = run.reproducibility.calibrations
    if planned.prompts is not None and len(calibrations) == 1:  # varying prompts: their one workload's
        return calibrations[0]
    for calibration in calibrations:
        if planned.prompts is None and calibration.target_tokens == planned.input_tokens:
            return calibration
    raise InvalidInput(f"scenario: {planned.name} was not calibrated; calibrate runs before the scenarios")


async def _workload(deps: WorkerDeps, run: BenchmarkRun, calibration: Calibration) -> Workload | None:
    """The scenario's prompts when they vary (the run's upload, or drawn from its distributions),
    rebuilt by this worker and counted by the server; None: the calibrated prompt."""
    dataset = read_upload(deps.records, run.run_id, _given(run)) if run.config.dataset is not None else None
    with _dataset_refusal():
        workloads, _ = await prepare_workloads(
            run.config, _connection(deps, run), [calibration], dataset=dataset, transport=deps.transport
        )
    return workloads[0]


@contextlib.contextmanager
def _dataset_refusal() -> Iterator[None]:
    """A dataset the engine refuses (a conversation in mode rate, messages to /v1/completions) is the input's fault."""
    try:
        yield
    except DatasetError as exc:
        raise InvalidInput(f"invalid input: dataset: {exc}") from None


def _scenario(state: dict[str, Any]) -> PlannedScenario:
    return PlannedScenario.model_validate(state.get("scenario"))


def new_run_id(started_at: datetime, execution: str) -> str:
    """A run id from the execution (the same on every retry): its start time and a hash of its ARN."""
    return f"{started_at:%Y%m%dT%H%M%SZ}-{hashlib.sha256(execution.encode()).hexdigest()[:6]}"


def reproducibility(registry: Registry, profile_name: str, given: BenchmarkInput) -> Reproducibility:
    """The run's reproducibility record as far as the registry knows it (calibration comes later)."""
    profile = registry.profiles[profile_name]
    pool = registry.pools[profile.pool]
    serving = profile.serving
    return Reproducibility(
        profile=profile_name,
        model=profile.model,
        model_id=serving.model_id,
        revision=serving.revision,
        vllm_version=serving.vllm_version,
        image=serving.image,
        serving=serving.model_dump(mode="json"),
        pool=profile.pool,
        instance_type=pool.instance_type,
        gpu_count=pool.gpu_count,
        region=registry.region,
        engine_version=servingctl.__version__,
        results_schema_version=SCHEMA_VERSION,
        seed=given.seed,
        salt_mode=given.salt_mode,
        dataset=given.dataset.file if given.dataset is not None else None,
    )


def _flow_input(
    registry: Registry, flow: str, profile: ServingProfile, name: str, options: dict[str, Any], lease_minutes: int | None = None
) -> dict[str, Any]:
    """start_profile / stop_profile input, validated by the control plane's own rules."""
    document = {"profile": name, **options}
    if lease_minutes is not None and "lease_minutes" not in options:
        document["lease_minutes"] = lease_minutes
    try:
        (start_config if flow == "start" else stop_config)(registry, document)
    except InvalidInput as exc:
        raise InvalidInput(f"invalid input: {flow}_options: {str(exc).removeprefix('invalid input: ')}") from None
    return document


def hold_profile(deps: WorkerDeps, run: BenchmarkRun, seconds: float) -> None:
    """Hold the run's profile for seconds + HOLD_MARGIN_S (the sweep's soft stops wait); one
    conditional write on READY, so a profile stopped under the run fails the step clearly."""
    now = deps.clock.now()
    until = now + timedelta(seconds=seconds + HOLD_MARGIN_S)
    if deps.profiles.update_profile_if(run.profile, now, {"phase": Phase.READY}, held_by=run.run_id, held_until=until) is None:
        phase = deps.profiles.get_profile(run.profile).phase
        raise ProfileNotReady(f"profile {run.profile} is {phase.value}, no longer READY: benchmark run {run.run_id} cannot go on")


def release_hold(profiles: Store, run: BenchmarkRun, now: datetime) -> None:
    """Give the profile back (only if this run still holds it)."""
    profiles.update_profile_if(run.profile, now, {"held_by": run.run_id}, held_by=None, held_until=None)


# ---- actions ------------------------------------------------------------------------------------
def _planned_run_id(deps: WorkerDeps, event: dict[str, Any], given: BenchmarkInput) -> str:
    """The id plan gives the run: the one asked for, else from the execution's start and name."""
    started = datetime.fromisoformat(str(event.get("started_at") or deps.clock.now().isoformat()))
    return given.run_id or new_run_id(started, str(event.get("execution") or ""))


def run_of(action: str, deps: WorkerDeps, event: dict[str, Any]) -> tuple[str | None, str | None]:
    """The run a step works on and its profile when the event tells it (None, None: no run named)."""
    state = _state(event)
    if action == "plan":
        given = parse_benchmark_input(state)
        return _planned_run_id(deps, event, given), given.profile
    planned = state.get("plan") or {}
    run_id = planned.get("run_id") or state.get("run_id")
    return (str(run_id), planned.get("profile")) if run_id else (None, None)


def plan(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Validate the input and record the run; ProfileNotReady unless READY or `start` was asked."""
    given = parse_benchmark_input(_state(event))
    execution = str(event.get("execution") or "")
    profile = resolve_profile(deps.registry, given.profile)
    scenarios = plan_scenarios(given, profile, ecs_available=deps.ecs is not None)
    phase = deps.profiles.get_profile(given.profile).phase
    ready = phase == Phase.READY
    if not ready and not given.start:
        raise ProfileNotReady(
            f'profile {given.profile} is {phase.value}, not READY; pass "start": true to start it first '
            f'(and "stop": true to stop it afterwards), or start it yourself'
        )
    planned_minutes = math.ceil(sum(s.estimate_s for s in scenarios) / 60) + LEASE_MARGIN_MINUTES
    lease = min(profile.max_lease_minutes, max(profile.default_lease_minutes, planned_minutes))
    start_input = _flow_input(deps.registry, "start", profile, given.profile, given.start_options, lease)
    stop_input = _flow_input(deps.registry, "stop", profile, given.profile, given.stop_options)

    run_id = _planned_run_id(deps, event, given)
    if given.dataset is not None:  # a missing or altered upload fails here, before a profile is started
        read_upload(deps.records, run_id, given)
    now = deps.clock.now()
    request = given.model_dump(mode="json") | {"run_id": run_id}
    stored = deps.runs.create_run(
        BenchmarkRun(
            run_id=run_id,
            profile=given.profile,
            label=given.label,
            execution=execution,
            created_at=now,
            updated_at=now,
            request=request,
            config=run_config(given, profile, deps.records.uri(dataset_key(run_id)) if given.dataset else None),
            reproducibility=reproducibility(deps.registry, given.profile, given),
            scenarios=[s.name for s in scenarios],
        )
    )
    if stored.execution != execution:
        raise InvalidInput(f"invalid input: run_id: {run_id} already belongs to execution {stored.execution}")
    return {
        "run_id": run_id,
        "profile": given.profile,
        "phase": phase.value,
        "ready": ready,
        "start": not ready,
        "stop": given.stop,
        "start_execution": {"name": execution_name("start", given.profile, "benchmark run", run_id), "input": start_input},
        "stop_execution": {"name": execution_name("stop", given.profile, "benchmark run", run_id), "input": stop_input},
        "scenarios": [s.model_dump() for s in scenarios],
        "sweep": given.sweep,
        "ecs": None
        if deps.ecs is None
        else {
            "cluster": deps.ecs.cluster,
            "task_definition": deps.ecs.task_definition,
            "subnets": deps.ecs.subnets,
            "security_groups": deps.ecs.security_groups,
            "container": deps.ecs.container,
        },
    }


def calibrate(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Server metadata and one calibration per input length, stored with the run."""
    run = _live_run(deps, (_state(event).get("plan") or {}).get("run_id"), UNFINISHED)
    with _ends_cleanly(deps, run):
        hold_profile(deps, run, 0)
        metadata, calibrations = asyncio.run(_calibrate(deps, run))
        repro = run.reproducibility.model_copy(update={"calibrations": calibrations, "server_version": metadata.server_version})
        deps.runs.update_run(
            run.run_id, deps.clock.now(), when=UNFINISHED, status=RunStatus.RUNNING, metadata=metadata, reproducibility=repro
        )
    return {
        "calibrations": [
            {"target_tokens": c.target_tokens, "actual_tokens": c.actual_tokens, "method": c.method} for c in calibrations
        ]
    }


async def _calibrate(deps: WorkerDeps, run: BenchmarkRun) -> tuple[RunMetadata, list[Calibration]]:
    """Server metadata and the calibrations: one per input length, or the varying prompts' summary
    (each request is checked against its own count)."""
    connection = _connection(deps, run)
    metadata, calibrations = await prepare(run.config, connection, run_id=run.run_id, transport=deps.transport)
    config = run.config
    if config.dataset is not None or config.input_distribution is not None:
        dataset = read_upload(deps.records, run.run_id, _given(run)) if config.dataset is not None else None
        with _dataset_refusal():
            workloads, _ = await prepare_workloads(config, connection, calibrations, dataset=dataset, transport=deps.transport)
        calibrations = [w.calibration for w in workloads if w is not None]
    return metadata, calibrations


def _store_scenario(
    deps: WorkerDeps,
    run: BenchmarkRun,
    planned: PlannedScenario,
    result: Any,
    runner: Runner,
    attempt: str,
    split: Split | None = None,
    replacing: str | None = None,
) -> StoredScenario:
    """Records first (under this attempt's key), then the summary; both refused once the run ended
    (the records by a read just before: S3 cannot check the run), the summary once one is written."""
    _live_run(deps, run.run_id)
    key = deps.records.put_records(records_key(run.run_id, planned.name, attempt=attempt), result.records)
    return deps.runs.put_scenario(
        StoredScenario(
            run_id=run.run_id,
            name=planned.name,
            position=planned.position,
            runner=runner,
            summary=result.summary,
            calibration=result.calibration,
            t0_wall=result.t0_wall,
            rounds=result.rounds,
            server_timeline=thinned(result.server_timeline, STORED_TIMELINE_SAMPLES),
            records_key=key,
            records=len(result.records),
            split=split,
            written_at=deps.clock.now(),
        ),
        replacing=replacing,
    )


def _first_written(deps: WorkerDeps, run: BenchmarkRun, name: str, refused: Exception) -> StoredScenario:
    """The stored result a refused write leaves in place (a duplicate worker's, a retry's), logged."""
    stored = deps.runs.get_scenario(run.run_id, name)
    if stored is None:
        raise refused
    log.warning(
        "benchmark run %s: this worker's %s was refused (%s: %s); the result written at %s (%s) stays",
        run.run_id,
        name,
        type(refused).__name__,
        refused,
        stored.written_at.isoformat(),
        stored.records_key,
    )
    return stored


def _shard_state(run_id: str, planned: PlannedScenario, shard: ShardPlan) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "scenario": planned.model_dump(),
        "shard": {
            "index": shard.index,
            "count": shard.count,
            "concurrency": shard.concurrency,
            "requests": shard.requests,
            "start_at": shard.start_at.isoformat(),
        },
    }


def _answer(summary: ScenarioSummary) -> dict[str, Any]:
    return {
        "name": summary.name,
        "output_tok_s": summary.output_tok_s,
        "ok": summary.ok,
        "failed": summary.failed,
        "client_bound": summary.client_bound,
        "generation_tokens_equal": summary.server.generation_tokens_equal,
    }


def shard_terms(given: BenchmarkInput) -> tuple[float, int | None]:
    """A split's start lead and the most shards its work has: a dataset's shards read and count its
    prompts before the common start (at least COUNTED_PROMPTS_S a prompt on top of START_LEAD_S), and
    each needs a conversation, or a prompt when every prompt is sent once."""
    data = given.dataset
    if data is None:
        return START_LEAD_S, None
    lead = START_LEAD_S + data.prompts * COUNTED_PROMPTS_S
    if data.conversations:
        return lead, data.conversations
    return lead, data.prompts if given.mode != "burst" and given.requests is None else None


def _scenario_answer(deps: WorkerDeps, run: BenchmarkRun, planned: PlannedScenario, summary: ScenarioSummary) -> dict[str, Any]:
    # An ECS task is sized for its scenario: only Lambda workers are split.
    given = _given(run)
    if planned.runner == "ecs":
        shards = []
    else:
        lead, parts = shard_terms(given)
        shards = plan_shards(summary, run.config, given.max_workers, deps.clock.now(), lead, parts)
    return _answer(summary) | {"split": bool(shards), "shards": [_shard_state(run.run_id, planned, s) for s in shards]}


def run_scenario(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Run one scenario, write its summary and records, and plan shards if the client was the limit;
    a scenario written already (by an earlier attempt) is answered from the store, not measured again."""
    state = _state(event)
    run, planned = _live_run(deps, state.get("run_id")), _scenario(state)
    written = deps.runs.get_scenario(run.run_id, planned.name)
    if written is not None:
        log.warning(
            "benchmark run %s: %s is already written (%s): answered from the store", run.run_id, planned.name, written.records_key
        )
        if written.split is not None:  # merged already: measured by its shards
            return _answer(written.summary) | {"split": False, "shards": []}
        return _scenario_answer(deps, run, planned, written.summary)
    given = _given(run)
    calibration = _calibration(run, planned)
    with _ends_cleanly(deps, run):
        hold_profile(deps, run, planned.estimate_s)
        workload = asyncio.run(_workload(deps, run, calibration))
        measurement = asyncio.run(
            _while_live(
                deps,
                run.run_id,
                measure_scenario(
                    run.config,
                    _connection(deps, run),
                    calibration,
                    planned.concurrency,
                    run_id=run.run_id,
                    name=planned.name,
                    lag_p99_limit_ms=given.client_lag_limit_ms,
                    cpu_share_limit=given.client_cpu_limit,
                    transport=deps.transport,
                    workload=workload,
                ),
            )
        )
        result = summarize_measurement(run.config, calibration, measurement)
        try:
            summary = _store_scenario(deps, run, planned, result, planned.runner, attempt_of(event)).summary
        except (ResultExists, RecordsExist) as exc:
            summary = _first_written(deps, run, planned.name, exc).summary
    return _scenario_answer(deps, run, planned, summary)


def _snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    return {"totals": snapshot.totals, "unavailable": snapshot.unavailable}


def run_shard(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Measure one shard from the common start instant; its records go beside the scenario's."""
    state = _state(event)
    run, planned = _live_run(deps, state.get("run_id")), _scenario(state)
    given = _given(run)
    shard = ShardPlan(**{**state["shard"], "start_at": datetime.fromisoformat(state["shard"]["start_at"])})
    calibration = _calibration(run, planned)
    with _ends_cleanly(deps, run):
        hold_profile(deps, run, planned.estimate_s)
        workload = asyncio.run(_workload(deps, run, calibration))
        if workload is not None:  # this shard's part: each request of the whole plan sent by one shard
            part = split_workload(
                workload,
                shares(planned.concurrency, shard.count),
                requests=measured_requests(run.config, workload),
                rounds=run.config.rounds if run.config.mode == "burst" else None,
            )
            workload = part[shard.index]
        m = asyncio.run(
            _while_live(
                deps,
                run.run_id,
                measure_scenario(
                    shard_config(run.config, shard),
                    _connection(deps, run),
                    calibration,
                    shard.concurrency,
                    run_id=run.run_id,
                    name=planned.name,
                    shard=Shard(shard.index, shard.count, shard.start_at),
                    lag_p99_limit_ms=given.client_lag_limit_ms,
                    cpu_share_limit=given.client_cpu_limit,
                    transport=deps.transport,
                    workload=workload,
                ),
            )
        )
        _live_run(deps, run.run_id)
        key = deps.records.put_records(records_key(run.run_id, planned.name, shard.index, attempt_of(event)), m.records)
    return {
        "index": shard.index,
        "concurrency": shard.concurrency,
        "t0_wall": m.t0_wall.isoformat(),
        "records_key": key,
        "before": _snapshot_json(m.before),
        "peak_running": m.peak_running,
        "running_samples": m.running_samples,
        "client": m.client.model_dump(mode="json"),
        "late_start_s": m.late_start_s,
        # The server is the same for every shard: shard 0 alone carries its view, thinned so the
        # Map state's output stays far under Step Functions' 256 KB payload limit.
        "server_timeline": [p.model_dump(exclude_none=True) for p in thinned(m.server_timeline, SHARD_TIMELINE_SAMPLES)]
        if shard.index == 0
        else [],
    }


async def _after_snapshot(deps: WorkerDeps, run: BenchmarkRun, before: Snapshot, client_tokens: int) -> Snapshot:
    async with Backend(_connection(deps, run), run.config.model, max_connections=2, transport=deps.transport) as backend:
        return await settled_snapshot(ServerMetrics(backend, run.config.model), before, client_tokens)


def merge(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Merge the shards of a scenario, check the whole against the server, write it over the
    single-worker result it read and nothing else (the reasons for the split are kept with it);
    a scenario merged already (an earlier attempt) is answered from the store."""
    state = _state(event)
    run, planned = _live_run(deps, state.get("run_id")), _scenario(state)
    outputs = sorted(state.get("shards") or [], key=lambda s: s["index"])
    if not outputs:
        raise InvalidInput("shards: expected the outputs of run_shard, one per shard")
    single = deps.runs.get_scenario(run.run_id, planned.name)
    if single is not None and single.split is not None:
        log.warning(
            "benchmark run %s: %s is already merged (%s): answered from the store", run.run_id, planned.name, single.records_key
        )
        return _answer(single.summary) | {"shards": single.split.shards}
    parts = []
    for out in outputs:
        records = deps.records.get_records(out["records_key"])
        before = Snapshot(totals=out["before"]["totals"], unavailable=out["before"]["unavailable"])
        parts.append(
            Measurement(
                name=planned.name,
                concurrency=out["concurrency"],
                t0_wall=datetime.fromisoformat(out["t0_wall"]),
                records=records,
                rounds=[],
                before=before,
                after=before,
                peak_running=out["peak_running"],
                running_samples=out["running_samples"],
                client=ClientSelfCheck.model_validate(out["client"]),
                late_start_s=out["late_start_s"],
                server_timeline=[ServerSample.model_validate(p) for p in out.get("server_timeline") or []],
            )
        )
    client_tokens = sum(r.completion_tokens or 0 for p in parts for r in p.records)
    with _ends_cleanly(deps, run):
        after = asyncio.run(_after_snapshot(deps, run, earliest_snapshot([p.before for p in parts]), client_tokens))
        calibration = _calibration(run, planned)
        result, warnings = merge_shards(run.config, calibration, planned.concurrency, parts, after)
        reasons = single.summary.client.reasons if single else []
        split = Split(shards=len(parts), reasons=reasons, warnings=warnings)
        try:
            merged = _store_scenario(
                deps,
                run,
                planned,
                result,
                "lambda",
                "merged-" + attempt_of(event),
                split,
                replacing=single.records_key if single else None,
            )
        except (ResultExists, RecordsExist) as exc:
            merged = _first_written(deps, run, planned.name, exc)
    return _answer(merged.summary) | {"shards": merged.split.shards if merged.split else len(parts)}


def sweep_next(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """The sweep's next scenario from the steps written so far (in run order), or its stop; the
    stop is recorded with the run. Bounded by sweep_max_concurrency and sweep_max_steps."""
    run = _run(deps, (_state(event).get("plan") or {}).get("run_id"))
    given = _given(run)
    if not given.sweep:
        raise InvalidInput(f"sweep: run {run.run_id} was not asked to sweep")
    steps: list[SweepStep] = []
    for scenario in sorted(deps.runs.list_scenarios(run.run_id), key=lambda s: s.position):
        steps.append(step_of(scenario.summary, steps))
    decision = decide(steps, given.sweep_max_concurrency, given.sweep_max_steps)
    if decision.next is None:
        sweep = result_of(steps, decision)
        deps.runs.update_run(run.run_id, deps.clock.now(), when=LIVE, sweep=sweep)
        return {
            "next": None,
            "scenario": None,
            "found": sweep.found,
            "stop": sweep.stop,
            "reason": sweep.reason,
            "steps": len(steps),
        }
    planned = sweep_scenario(given, decision.next, len(steps))
    if planned.name not in run.scenarios:
        deps.runs.update_run(run.run_id, deps.clock.now(), when=LIVE, scenarios=[*run.scenarios, planned.name])
    return {
        "next": decision.next,
        "scenario": planned.model_dump(),
        "found": decision.found,
        "stop": None,
        "reason": decision.reason,
        "steps": len(steps),
    }


def compare_run(deps: WorkerDeps, run: BenchmarkRun) -> dict[str, Any]:
    """Cost comparison of every written scenario with the profile's instance price from the catalog."""
    catalog = deps.catalog()
    pool = deps.registry.pool_of(run.profile)
    key = pool.price_key or pool.instance_type
    price = catalog.instance(deps.registry.region, key)
    if price is None:
        return {"compared": [], "skipped": f"the price catalog has no on-demand price for {deps.registry.region}/{key}"}
    api_name = _given(run).managed_api or catalog.default_managed_api
    try:
        api = catalog.managed_api(api_name)
    except KeyError as exc:
        raise InvalidInput(f"managed_api: {exc.args[0]}") from None
    # A warm pool's stopped volume stands all month (unpriced: left out rather than guessed).
    standing = warm_pool_monthly_usd(catalog, deps.registry.region, pool) or 0.0
    compared = []
    for scenario in deps.runs.list_scenarios(run.run_id):
        summary = scenario.summary
        if not summary.output_tok_s:
            continue
        comparison = compare(
            CompareInput(
                output_tok_s=summary.output_tok_s,
                input_tokens=summary.input_tokens,
                output_tokens=summary.max_tokens,
                api_input_usd_per_m=api.input_usd_per_m,
                api_output_usd_per_m=api.output_usd_per_m,
                hourly_usd=price.hourly_usd,
                standing_monthly_usd=standing,
            )
        )
        try:
            deps.runs.put_comparison(
                StoredComparison(
                    run_id=run.run_id,
                    scenario=summary.name,
                    api=str(api_name),
                    instance_type=pool.instance_type,
                    hourly_usd=price.hourly_usd,
                    price_source=price.source,
                    comparison=comparison,
                    written_at=deps.clock.now(),
                )
            )
        except ResultExists as exc:  # an earlier attempt's comparison stays
            log.warning("benchmark run %s: %s", run.run_id, exc)
            comparison = next(c.comparison for c in deps.runs.list_comparisons(run.run_id) if c.scenario == summary.name)
        compared.append({"scenario": summary.name, "ratio_self_hosted_to_api": round(comparison.ratio_self_hosted_to_api, 3)})
    cost = cost_at_slo(deps, run, price.hourly_usd, api.input_usd_per_m, api.output_usd_per_m)
    if cost is not None:
        deps.runs.update_run(run.run_id, deps.clock.now(), when=LIVE, slo_cost=cost)
    return {"compared": compared, "skipped": None}


def cost_at_slo(deps: WorkerDeps, run: BenchmarkRun, hourly_usd: float, api_in: float, api_out: float) -> SloCost | None:
    """Cost per 1M output tokens at the SLO: at the sweep's concurrency found, else the scenario with
    the most goodput among those meeting the SLOs; the day from the profile's ledger and starts."""
    summaries = {s.name: s.summary for s in deps.runs.list_scenarios(run.run_id)}
    if run.sweep is not None:
        at = summaries.get(run.sweep.scenario or "")
    else:
        met = [s for s in summaries.values() if s.slo is not None and s.slo.met]
        at = max(met, key=lambda s: s.slo.goodput_tok_s if s.slo else 0.0, default=None)
    if at is None:
        return None
    profile = deps.registry.profiles[run.profile]
    starts = [
        (s.ended_at - s.requested_at).total_seconds()
        for s in deps.profiles.list_starts(run.profile)
        if s.outcome == "READY" and s.ended_at is not None
    ]
    day = day_use(
        [(s.started_at, s.stopped_at) for s in deps.profiles.list_sessions(run.profile)],
        starts,
        now=deps.clock.now(),
        idle_minutes=profile.idle.window_minutes if profile.idle.enabled else 0.0,
    )
    return slo_cost(at, hourly_usd=hourly_usd, api_input_usd_per_m=api_in, api_output_usd_per_m=api_out, day=day)


def compare_action(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Compare every scenario written so far."""
    return compare_run(deps, _run(deps, (_state(event).get("plan") or {}).get("run_id")))


MAX_FAILED_NAMED = 3


def failed_past_rate(deps: WorkerDeps, run: BenchmarkRun) -> str | None:
    """Why a run that went through every step still FAILED: scenarios whose requests failed past
    max_failure_rate, each with its failures by kind and one message (None when none did)."""
    over = [s.summary for s in deps.runs.list_scenarios(run.run_id) if s.summary.failure_rate > run.config.max_failure_rate]
    if not over:
        return None
    named = "; ".join(f"{s.name}: {failure_words(s)}" for s in over[:MAX_FAILED_NAMED])
    more = f"; and {len(over) - MAX_FAILED_NAMED} more scenarios" if len(over) > MAX_FAILED_NAMED else ""
    return f"requests failed past max_failure_rate {run.config.max_failure_rate:g}: {named}{more}"


def finish(deps: WorkerDeps, event: dict[str, Any]) -> dict[str, Any]:
    """Record how the run ended; a failed run keeps every scenario written before the failure, and a
    run whose requests failed past max_failure_rate ends FAILED, not SUCCEEDED."""
    state = _state(event)
    outcome = RunStatus(event.get("outcome", RunStatus.SUCCEEDED))
    run = _run(deps, (state.get("plan") or {}).get("run_id"))
    error = error_reason(state.get("error")) if outcome == RunStatus.FAILED else None
    if outcome == RunStatus.SUCCEEDED and (over := failed_past_rate(deps, run)):
        outcome, error = RunStatus.FAILED, over
    if outcome == RunStatus.FAILED and state.get("compare") is None:
        try:  # the comparisons of what was measured are still worth having
            compare_run(deps, run)
        except Exception as exc:
            error = f"{error} (comparison skipped: {type(exc).__name__}: {exc})"
    release_hold(deps.profiles, run, deps.clock.now())
    now = deps.clock.now()
    try:
        done = deps.runs.update_run(run.run_id, now, when=UNFINISHED, status=outcome, finished_at=now, error=error)
    except RunEnded:  # recorded already (a retry of this step): that record stays
        done = _run(deps, run.run_id)
    written = [s.name for s in deps.runs.list_scenarios(run.run_id)]
    # The record's reason: a FAILED answer's error is the cause of the execution's FailRequests state.
    return {"run_id": run.run_id, "status": done.status.value, "scenarios_written": written, "error": done.error}


@dataclass(frozen=True)
class Action:
    """One step: the state it reads and the answer it gives, as models (servingctl.runs.state)."""

    state: type[BaseModel]
    answer: type[BaseModel]
    run: Callable[[WorkerDeps, dict[str, Any]], dict[str, Any]]


ACTIONS: dict[str, Action] = {
    "plan": Action(models.RunState, models.Planned, plan),
    "calibrate": Action(models.RunState, models.Calibrated, calibrate),
    "run_scenario": Action(models.ScenarioStep, models.ScenarioAnswer, run_scenario),
    "run_shard": Action(models.ShardItem, models.ShardAnswer, run_shard),
    "merge_shards": Action(models.MergeStep, models.MergedAnswer, merge),
    "sweep_next": Action(models.RunState, models.SweepNext, sweep_next),
    "compare": Action(models.RunState, models.Compared, compare_action),
    "finish": Action(models.RunState, models.Finished, finish),
}


def run_action(event: Any, deps: WorkerDeps) -> dict[str, Any]:
    """Run event["action"] on its state, validated as the step's model (InvalidInput naming each bad
    field); its answer as the step's answer model; AWS throttling becomes Throttled (the state
    machine retries it)."""
    action = action_of(event, ACTIONS)
    step = ACTIONS[action]
    parse_state(step.state, event.get("state"))
    with throttling_as_error():
        if deps.scope is not None:
            run_id, profile = run_of(action, deps, event)
            if run_id is not None:  # no run named: the step fails on its own (RunNotFound, InvalidInput)
                runs, records, profiles = deps.scope(run_id, profile)
                deps = replace(deps, runs=runs, records=records, profiles=profiles)
        return step.answer.model_validate(step.run(deps, event)).model_dump(mode="json")


def ecs_target(settings: BenchWorkerSettings) -> EcsTarget | None:
    """The ECS benchmark task from SERVINGCTL_BENCH_ECS_* (None when not deployed)."""
    if not settings.ecs_task_definition:
        return None
    if not settings.ecs_cluster:
        raise InvalidInput("SERVINGCTL_BENCH_ECS_CLUSTER: not set, though SERVINGCTL_BENCH_ECS_TASK_DEFINITION is")
    return EcsTarget(
        cluster=settings.ecs_cluster,
        task_definition=settings.ecs_task_definition,
        subnets=[s for s in settings.ecs_subnets.split(",") if s],
        security_groups=[s for s in settings.ecs_security_groups.split(",") if s],
    )


def deps_from_settings(settings: BenchWorkerSettings) -> WorkerDeps:
    """Deps from the function's settings (registry, table, bucket, run role, ECS task)."""
    import boto3

    from servingctl.registry import load_registry
    from servingctl.runs.scoped import RunScopes
    from servingctl.store import DynamoStore
    from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
    from servingctl.store.records import S3RecordStore

    table, bucket = settings.table, settings.bucket
    resource = boto3.resource("dynamodb")
    return WorkerDeps(
        registry=load_registry(settings.registry, settings.region),
        runs=DynamoBenchmarkStore(table, resource),
        records=S3RecordStore(bucket),
        profiles=DynamoStore(table, resource),
        ecs=ecs_target(settings),
        scope=RunScopes(settings.run_role, table, bucket) if settings.run_role else None,
    )


def main() -> int:
    """The ECS task's entry point: run the event in $SERVINGCTL_BENCH_EVENT, print the answer."""
    settings = BenchTaskSettings.from_env()
    print(json.dumps(run_action(json.loads(settings.event), deps_from_settings(settings))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
