"""One scenario's load, measured: warm-ups and the measured load with `concurrency` in flight, the
server's counters before and after, the client's self-check (`measure_scenario`, a `Measurement`).
The unit both of a whole scenario (runner.run_scenario) and of one shard or process of it
(shards.py merges them, spread.py runs them over processes of one host)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import httpx

from servingctl.loadgen.backend import Backend, ChatRequest, Connection
from servingctl.loadgen.calibration import build_prompt, unique_nonces
from servingctl.loadgen.metrics import check_mismatches, with_request_metrics
from servingctl.loadgen.scheduler import (
    Send,
    constant_offsets,
    poisson_offsets,
    replay_offsets,
    run_bursts,
    run_conversations,
    run_rate,
    run_sustained,
)
from servingctl.loadgen.selfcheck import CPU_SHARE_LIMIT, LAG_P99_LIMIT_MS, SelfCheck, gc_paused
from servingctl.loadgen.server_metrics import GENERATION, ServerMetrics, Snapshot
from servingctl.loadgen.workload import Workload, as_messages
from servingctl.schema.results import (
    Calibration,
    ClientSelfCheck,
    RequestRecord,
    RoundResult,
    RunConfig,
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


def measured_requests(config: RunConfig, workload: Workload | None) -> int | None:
    """Measured requests of a sustained or rate scenario: as asked, else a dataset's prompts once each
    (None when only the duration bounds it)."""
    if config.requests is None and config.duration_s is None and config.dataset is not None and workload is not None:
        return len(workload.prompts)
    return config.requests


def expected_requests(
    config: RunConfig, concurrency: int, offsets: list[float] | None, workload: Workload | None = None
) -> int | None:
    """Requests a scenario sends, warm-ups included (None when only its duration bounds it)."""
    if config.warmup_s is not None:
        return None  # a warm-up by time sends as many as fit
    warm = config.warmup * concurrency
    if config.mode == "burst":
        return warm + config.rounds * concurrency
    if config.mode == "rate" or (config.replay_speed is not None and workload is not None):
        return warm + len(offsets or [])
    if workload is not None and workload.conversations is not None:
        return warm + len(workload.prompts)
    requests = measured_requests(config, workload)
    return warm + requests if requests is not None else None


def measured_name(config: RunConfig, calibration: Calibration, concurrency: int, workload: Workload | None) -> str:
    """The scenario's name: in256-c4-sustained, dataset-c4-sustained, dataset-c4-replay2 (scenario_name)."""
    prompts = workload.label if workload is not None else None
    return scenario_name(calibration.target_tokens, concurrency, config.mode, config.rate, prompts, config.replay_speed)


def planned_offsets(config: RunConfig, workload: Workload | None) -> list[float] | None:
    """Send offsets of a rate scenario or of a trace's replay (None: sent as the streams free up)."""
    requests = measured_requests(config, workload)
    if workload is not None and config.replay_speed is not None:  # prepare_workloads sorted the prompts by timestamp
        timestamps = [p.timestamp_s or 0.0 for p in workload.prompts]
        return replay_offsets(timestamps, config.replay_speed, start=workload.trace_start_s)[:requests]
    if config.mode == "rate" and config.rate is not None:
        return _arrivals(config, config.rate, requests, config.duration_s)
    return None


def _arrivals(config: RunConfig, rate: float, requests: int | None, duration_s: float | None) -> list[float]:
    if config.arrivals == "constant":
        return constant_offsets(rate, requests=requests, duration_s=duration_s)
    return poisson_offsets(rate, config.seed, requests=requests, duration_s=duration_s)


async def warm_up(
    send: Send, config: RunConfig, concurrency: int, first_index: int
) -> tuple[list[RequestRecord], list[RoundResult]]:
    """The warm-up load, each request sent as a warm-up: `warmup` rounds of C, or with `warmup_s` that
    many seconds of the scenario's own load shape (burst: rounds of C started until then; rate: its
    arrivals; otherwise C in flight). Its requests end before the measured load starts."""
    seconds = config.warmup_s
    if seconds is None:
        return await run_bursts(send, concurrency, config.warmup, warmup=True, first_index=first_index)
    if config.mode == "burst":
        return await run_bursts(send, concurrency, 0, warmup=True, first_index=first_index, duration_s=seconds)
    if config.mode == "rate" and config.rate is not None:
        offsets = _arrivals(config, config.rate, None, seconds)
        return await run_rate(send, offsets, concurrency, first_index=first_index, warmup=True), []
    return await run_sustained(send, concurrency, requests=None, duration_s=seconds, first_index=first_index, warmup=True), []


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
    prefix_reuse: bool = False  # conversations: one salt per conversation, its later turns meant to hit the cache


async def _start_clock(backend: Backend, shard: Shard | None, concurrency: int) -> tuple[int, float]:
    """Warm the connections, then (a shard) wait for the shared start: (t0 on the backend clock, seconds
    late). A shard's start_at is waited for before the warm-up, its start_ns after it."""
    late_start_s = 0.0
    if shard is not None and shard.start_at is not None:
        wait_s = (shard.start_at - datetime.now(UTC)).total_seconds()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        late_start_s = max(0.0, -wait_s)
    await backend.warm(concurrency)  # TCP handshakes before the clock: no TTFT holds one
    if shard is None or shard.start_ns is None:
        return backend.clock(), late_start_s
    wait_s = (shard.start_ns - backend.clock()) / 1e9
    if wait_s > 0:
        await asyncio.sleep(wait_s)
    return shard.start_ns, max(0.0, -wait_s)  # every process's records on one monotonic timeline


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
    workload: Workload | None = None,
) -> Measurement:
    """Run one scenario's load (warm-ups, measured load) with `concurrency` in flight and return the
    raw measurement. A shard keeps the whole scenario's `name`, waits for `shard.start_at` after
    reading the counters, and numbers its requests from (shard.index + 1) x INDEX_STRIDE. With a
    `workload`, request k of each phase sends its k-th prompt (cycled) and is checked against it."""
    replay = config.replay_speed if workload is not None else None
    talks = workload.conversations if workload is not None and config.mode == "sustained" and replay is None else None
    name = name or measured_name(config, calibration, concurrency, workload)
    base = (shard.index + 1) * INDEX_STRIDE if shard else 0
    nonces = unique_nonces(random.Random(f"{run_id}:{name}" + (f":{shard.index}" if shard else "")))
    requests = measured_requests(config, workload)
    offsets = planned_offsets(config, workload)
    if talks is not None:
        requests = sum(map(len, talks))
    total = expected_requests(config, concurrency, offsets, workload)
    done = 0
    notify = progress or (lambda event: None)

    async with Backend(connection, config.model, max_connections=concurrency + 1, transport=transport, api=config.api) as backend:
        server = ServerMetrics(backend, config.model)
        before = await server.snapshot()
        t0, late_start_s = await _start_clock(backend, shard, concurrency)
        t0_wall = datetime.now(UTC)

        async def send(index: int, round_index: int, warmup: bool) -> RequestRecord:
            nonlocal done
            nonce = next(nonces) if config.salt_mode == "prompt-nonce" else ""
            salt = f"{run_id}-{name}-{index}" if config.salt_mode == "cache-salt" else None
            expected: int | None
            if workload is None:
                request = ChatRequest(name, round_index, index, warmup, build_prompt(calibration.repetitions, nonce), salt)
                expected, max_tokens = calibration.actual_tokens, config.max_tokens
            else:
                planned = workload.prompt(index - (base if warmup else first_measured))
                request = ChatRequest(name, round_index, index, warmup, "", salt, as_messages(planned.messages))
                expected, max_tokens = planned.prompt_tokens, planned.max_tokens
            record = await backend.stream_chat(request, max_tokens=max_tokens, seed=config.seed, t0=t0)
            if record.ok:
                record = check_mismatches(record, expected, max_tokens)
            done += 1
            notify(Progress("request_done", name, done, total, record.error or ""))
            return with_request_metrics(record)

        histories: dict[int, list[dict[str, str]]] = {}

        async def turn(index: int, conversation: int, k: int) -> RequestRecord:
            # One salt per conversation: its later turns reuse the cached prefix of the earlier ones.
            nonlocal done
            assert talks is not None
            planned = talks[conversation][k]
            history = histories.setdefault(conversation, [])
            asked = as_messages(planned.messages)
            salt = f"{run_id}-{name}-conv{base + conversation}" if config.salt_mode == "cache-salt" else None
            answer: list[str] = []
            request = ChatRequest(name, 0, index, False, "", salt, history + asked)
            record = await backend.stream_chat(request, max_tokens=planned.max_tokens, seed=config.seed, t0=t0, text=answer)
            if record.ok:
                record = check_mismatches(record, planned.prompt_tokens, planned.max_tokens)
            history += [*asked, {"role": "assistant", "content": "".join(answer)}]
            done += 1
            notify(Progress("request_done", name, done, total, record.error or ""))
            return with_request_metrics(record)

        notify(Progress("scenario_started", name, 0, total, f"{config.mode} load, concurrency {concurrency}"))
        stop_sampling = asyncio.Event()
        # A load that runs for a set time needs no fast samples for a short scenario's sake.
        planned_s = config.duration_s if config.mode != "burst" and requests is None else None
        sampler = asyncio.create_task(server.sample(stop_sampling, t0, planned_s)) if before.unavailable is None else None
        selfcheck = SelfCheck(lag_limit_ms=lag_p99_limit_ms, cpu_limit=cpu_share_limit, planned_s=planned_s)
        selfcheck.start()

        with gc_paused():
            records, rounds = await warm_up(send, config, concurrency, base)
            first = first_measured = base + len(records)  # the index of the first measured request (send reads it)
            if config.mode == "burst":
                measured, measured_rounds = await run_bursts(send, concurrency, config.rounds, warmup=False, first_index=first)
                rounds += measured_rounds
            elif talks is not None:
                measured = await run_conversations(
                    turn, [len(t) for t in talks], concurrency, think_time_s=config.think_time_s, first_index=first
                )
            elif replay is not None:
                measured = await run_rate(send, offsets or [], concurrency, first_index=first)
            elif config.mode == "sustained":
                measured = await run_sustained(
                    send, concurrency, requests=requests, duration_s=config.duration_s, first_index=first
                )
            else:
                measured = await run_rate(send, offsets or [], concurrency, first_index=first)
            records += measured

        client = await selfcheck.stop()
        stop_sampling.set()
        if sampler is not None:
            await sampler
        after = await settled_snapshot(server, before, sum(r.completion_tokens or 0 for r in records))
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
        prefix_reuse=talks is not None,
    )


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
