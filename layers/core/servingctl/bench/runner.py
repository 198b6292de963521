"""Orchestration: a sweep over input lengths x concurrencies, one scenario at a time.

`run_benchmark` fetches server metadata, calibrates each input length once and runs the scenarios
in order (never two at once). `run_scenario` runs exactly one scenario with a calibration passed
in: the unit of work of the Lambda benchmark worker. `measure_scenario` is its load half, also
used for one shard of a scenario split across workers (the merge then judges the whole). Request failures never
abort anything: they
are recorded per request and counted in the summaries.
"""

from __future__ import annotations

import asyncio
import platform
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import httpx

import servingctl
from servingctl.bench.backend import Backend, ChatRequest, Connection
from servingctl.bench.calibration import build_prompt, calibrate, unique_nonces
from servingctl.bench.host import client_host, load_average
from servingctl.bench.metrics import check_mismatches, scenario_summary, with_request_metrics
from servingctl.bench.scheduler import poisson_offsets, run_bursts, run_rate, run_sustained
from servingctl.bench.selfcheck import CPU_SHARE_LIMIT, LAG_P99_LIMIT_MS, SelfCheck, gc_paused
from servingctl.bench.server_metrics import GENERATION, ServerMetrics, Snapshot, build_checks
from servingctl.bench.shards import process_count
from servingctl.schema.results import (
    Calibration,
    ClientSelfCheck,
    RequestRecord,
    RoundResult,
    RunConfig,
    RunMetadata,
    RunResult,
    ScenarioResult,
    ServerSample,
    scenario_name,
)

# The server's counters are updated when it processes outputs, possibly just after the client saw
# the stream end: re-read them a few times before judging a difference.
SETTLE_TRIES = 10
SETTLE_S = 0.1


@dataclass(frozen=True)
class Progress:
    """A progress event for displays: kind, scenario, requests done / expected (None if open)."""

    kind: Literal["calibrated", "scenario_started", "request_done", "scenario_finished"]
    scenario: str | None
    done: int
    total: int | None
    message: str


ProgressFn = Callable[[Progress], None]


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus random hex."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def connection_for(config: RunConfig, api_key: str | None = None, headers: dict[str, str] | None = None) -> Connection:
    """The connection for a config; `headers` carries real values of headers the config redacts."""
    return Connection(
        endpoint=config.endpoint,
        api_key=api_key,
        headers=headers if headers is not None else config.headers,
        timeout_s=config.timeout_s,
    )


def expected_requests(config: RunConfig, concurrency: int, offsets: list[float] | None) -> int | None:
    """Requests a scenario sends, warm-ups included (None when only its duration bounds it)."""
    warm = config.warmup * concurrency
    if config.mode == "burst":
        return warm + config.rounds * concurrency
    if config.mode == "rate":
        return warm + len(offsets or [])
    return warm + config.requests if config.requests is not None else None


@dataclass(frozen=True)
class Shard:
    """One part of a scenario split across workers or processes: which part, and the instant all
    parts start together: `start_at` on the wall clock (workers on different hosts) or `start_ns`
    on the monotonic clock (processes of this host, which share it)."""

    index: int
    count: int
    start_at: datetime | None = None
    start_ns: int | None = None


# Request indexes of shard k start at (k + 1) x INDEX_STRIDE, so cache salts stay unique across the
# workers and differ from the single-worker attempt that preceded the split.
INDEX_STRIDE = 1_000_000


@dataclass
class Measurement:
    """What one scenario's load produced before any verdict: every record and round, the server's
    counters before and after, the sampled peak of running requests, the client self-check and the
    server's metrics over time."""

    name: str
    concurrency: int
    t0_wall: datetime
    records: list[RequestRecord]
    rounds: list[RoundResult]
    before: Snapshot
    after: Snapshot
    peak_running: int | None
    running_samples: int
    client: ClientSelfCheck
    late_start_s: float = 0.0
    server_timeline: list[ServerSample] = field(default_factory=list)
    t0_ns: int = 0  # the backend clock at t=0: comparable between parts measured on one host


async def measure_scenario(
    config: RunConfig,
    connection: Connection,
    calibration: Calibration,
    concurrency: int,
    *,
    run_id: str,
    name: str | None = None,
    shard: Shard | None = None,
    lag_p99_limit_ms: float = LAG_P99_LIMIT_MS,
    cpu_share_limit: float = CPU_SHARE_LIMIT,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Measurement:
    """Run one scenario's load (warm-ups, measured load) with `concurrency` in flight and return the
    raw measurement. A shard keeps the whole scenario's `name`, waits for `shard.start_at` after
    reading the counters, and numbers its requests from (shard.index + 1) x INDEX_STRIDE."""
    name = name or scenario_name(calibration.target_tokens, concurrency, config.mode, config.rate)
    base = (shard.index + 1) * INDEX_STRIDE if shard else 0
    nonces = unique_nonces(random.Random(f"{run_id}:{name}" + (f":{shard.index}" if shard else "")))
    offsets = (
        poisson_offsets(config.rate, config.seed, requests=config.requests, duration_s=config.duration_s)
        if config.mode == "rate" and config.rate is not None
        else None
    )
    total = expected_requests(config, concurrency, offsets)
    done = 0
    notify = progress or (lambda event: None)

    async with Backend(connection, config.model, max_connections=concurrency + 1, transport=transport) as backend:
        server = ServerMetrics(backend, config.model)
        before = await server.snapshot()
        late_start_s = 0.0
        if shard is not None and shard.start_at is not None:
            wait_s = (shard.start_at - datetime.now(UTC)).total_seconds()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            late_start_s = max(0.0, -wait_s)
        await backend.warm(concurrency)  # TCP handshakes before the clock: no TTFT holds one
        if shard is not None and shard.start_ns is not None:
            wait_s = (shard.start_ns - backend.clock()) / 1e9
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            late_start_s = max(0.0, -wait_s)
            t0 = shard.start_ns  # every process's records on one monotonic timeline
        else:
            t0 = backend.clock()
        t0_wall = datetime.now(UTC)

        async def send(index: int, round_index: int, warmup: bool) -> RequestRecord:
            nonlocal done
            nonce = next(nonces) if config.salt_mode == "prompt-nonce" else ""
            request = ChatRequest(
                scenario=name,
                round=round_index,
                index=index,
                warmup=warmup,
                prompt=build_prompt(calibration.repetitions, nonce),
                cache_salt=f"{run_id}-{name}-{index}" if config.salt_mode == "cache-salt" else None,
            )
            record = await backend.stream_chat(request, max_tokens=config.max_tokens, seed=config.seed, t0=t0)
            if record.ok:
                record = check_mismatches(record, calibration.actual_tokens, config.max_tokens)
            done += 1
            notify(Progress("request_done", name, done, total, record.error or ""))
            return with_request_metrics(record)

        notify(Progress("scenario_started", name, 0, total, f"{config.mode} load, concurrency {concurrency}"))
        stop_sampling = asyncio.Event()
        # A load that runs for a set time needs no fast samples for a short scenario's sake.
        planned_s = config.duration_s if config.mode != "burst" and config.requests is None else None
        sampler = asyncio.create_task(server.sample(stop_sampling, t0, planned_s)) if before.unavailable is None else None
        selfcheck = SelfCheck(lag_limit_ms=lag_p99_limit_ms, cpu_limit=cpu_share_limit, planned_s=planned_s)
        selfcheck.start()

        with gc_paused():
            records, rounds = await run_bursts(send, concurrency, config.warmup, warmup=True, first_index=base)
            first = base + len(records)
            if config.mode == "burst":
                measured, measured_rounds = await run_bursts(send, concurrency, config.rounds, warmup=False, first_index=first)
                rounds += measured_rounds
            elif config.mode == "sustained":
                measured = await run_sustained(
                    send, concurrency, requests=config.requests, duration_s=config.duration_s, first_index=first
                )
            else:
                measured = await run_rate(send, offsets or [], concurrency, first_index=first)
            records += measured

        client = await selfcheck.stop()
        stop_sampling.set()
        if sampler is not None:
            await sampler
        client_completion = sum(r.completion_tokens or 0 for r in records)
        after = await settled_snapshot(server, before, client_completion)
    return Measurement(
        name=name,
        concurrency=concurrency,
        t0_wall=t0_wall,
        records=records,
        rounds=rounds,
        before=before,
        after=after,
        peak_running=server.peak_running,
        running_samples=server.running_samples,
        client=client,
        late_start_s=late_start_s,
        server_timeline=server.timeline,
        t0_ns=t0,
    )


def summarize_measurement(
    config: RunConfig, calibration: Calibration, m: Measurement, *, progress: ProgressFn | None = None
) -> ScenarioResult:
    """Checks against the server's counters and the scenario summary of one measurement."""
    checks = build_checks(
        m.before,
        m.after,
        client_completion_tokens=sum(r.completion_tokens or 0 for r in m.records),
        client_prompt_tokens=sum(r.prompt_tokens or 0 for r in m.records),
        salted=config.salt_mode != "none",
        peak_running=m.peak_running,
        running_samples=m.running_samples,
        intended_concurrency=m.concurrency,
        exact_peak=config.mode != "rate",
    )
    summary = scenario_summary(
        name=m.name,
        config=config,
        calibration=calibration,
        concurrency=m.concurrency,
        records=m.records,
        rounds=m.rounds,
        server=checks,
        client=m.client,
    )
    if progress is not None:
        progress(
            Progress("scenario_finished", m.name, len(m.records), len(m.records), f"{summary.ok} ok, {summary.failed} failed")
        )
    return ScenarioResult(
        summary=summary,
        calibration=calibration,
        t0_wall=m.t0_wall,
        rounds=m.rounds,
        records=m.records,
        server_timeline=m.server_timeline,
    )


async def run_scenario(
    config: RunConfig,
    connection: Connection,
    calibration: Calibration,
    concurrency: int,
    *,
    run_id: str,
    lag_p99_limit_ms: float = LAG_P99_LIMIT_MS,
    cpu_share_limit: float = CPU_SHARE_LIMIT,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    processes: int = 1,
) -> ScenarioResult:
    """Run one scenario (warm-ups, measured load, checks) and return its result; with processes > 1
    its streams are spread over that many processes of this host (bench/spread.py)."""
    if process_count(processes, concurrency, config.requests) > 1:  # one stream cannot be spread
        from servingctl.bench.spread import spread_scenario  # spread builds on this module

        return await spread_scenario(
            config,
            connection,
            calibration,
            concurrency,
            processes=processes,
            run_id=run_id,
            lag_p99_limit_ms=lag_p99_limit_ms,
            cpu_share_limit=cpu_share_limit,
            progress=progress,
        )
    measurement = await measure_scenario(
        config,
        connection,
        calibration,
        concurrency,
        run_id=run_id,
        lag_p99_limit_ms=lag_p99_limit_ms,
        cpu_share_limit=cpu_share_limit,
        progress=progress,
        transport=transport,
    )
    return summarize_measurement(config, calibration, measurement, progress=progress)


async def settled_snapshot(server: ServerMetrics, before: Snapshot, client_completion: int) -> Snapshot:
    """The counters after a load, re-read briefly until they account for the client's tokens."""
    after = await server.snapshot()
    for _ in range(SETTLE_TRIES):
        if after.unavailable or before.unavailable:
            break
        if after.totals.get(GENERATION, 0.0) - before.totals.get(GENERATION, 0.0) >= client_completion:
            break
        await asyncio.sleep(SETTLE_S)
        after = await server.snapshot()
    return after


async def fetch_metadata(backend: Backend, run_id: str) -> RunMetadata:
    """Client and server identity: /version and /v1/models as the server answers them."""
    return RunMetadata(
        run_id=run_id,
        client_version=servingctl.__version__,
        python_version=platform.python_version(),
        hostname=socket.gethostname(),
        client_host=client_host(),
        server_version=await backend.get_json("/version"),
        server_models=await backend.get_json("/v1/models"),
        started_at=datetime.now(UTC),
    )


async def prepare(
    config: RunConfig,
    connection: Connection,
    *,
    run_id: str,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[RunMetadata, list[Calibration]]:
    """Server metadata and one calibration per input length (the sweep's first step)."""
    notify = progress or (lambda event: None)
    async with Backend(connection, config.model, max_connections=2, transport=transport) as backend:
        metadata = await fetch_metadata(backend, run_id)
        calibrations = []
        for target in config.input_tokens:
            calibration = await calibrate(backend, target, config.salt_mode, config.seed)
            calibrations.append(calibration)
            notify(
                Progress(
                    "calibrated", None, 0, None, f"input {target}: {calibration.actual_tokens} tokens ({calibration.method})"
                )
            )
    return metadata, calibrations


def failed_scenarios(run: RunResult) -> list[str]:
    """Scenarios whose failure rate exceeds the run's max_failure_rate."""
    return [s.summary.name for s in run.scenarios if s.summary.failure_rate > run.config.max_failure_rate]


async def begin_run(
    config: RunConfig,
    *,
    api_key: str | None,
    headers: dict[str, str] | None,
    progress: ProgressFn | None,
    run_id: str | None,
    transport: httpx.AsyncBaseTransport | None,
) -> tuple[RunResult, Connection, str]:
    """Open a run from this machine: its id, its connection, and the run record with metadata and calibrations."""
    run_id = run_id or new_run_id()
    connection = connection_for(config, api_key, headers)
    metadata, calibrations = await prepare(config, connection, run_id=run_id, progress=progress, transport=transport)
    return RunResult(config=config, metadata=metadata, calibrations=calibrations), connection, run_id


async def run_benchmark(
    config: RunConfig,
    *,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    processes: int = 1,
) -> RunResult:
    """Run the whole sweep (input lengths x concurrencies) and return the results."""
    run, connection, run_id = await begin_run(
        config, api_key=api_key, headers=headers, progress=progress, run_id=run_id, transport=transport
    )
    for calibration in run.calibrations:
        for concurrency in config.concurrencies:
            result = await run_scenario(
                config,
                connection,
                calibration,
                concurrency,
                run_id=run_id,
                progress=progress,
                transport=transport,
                processes=processes,
            )
            run.scenarios.append(result)
    return finish_run(run)


def finish_run(run: RunResult) -> RunResult:
    """Close a run: its failed scenarios, the end time and the client host's load at the end."""
    run.failed_scenarios = failed_scenarios(run)
    run.metadata.finished_at = datetime.now(UTC)
    if run.metadata.client_host is not None:
        run.metadata.client_host.load_average_end = load_average()
    return run
