"""One scenario's streams spread over processes of this host, for a client whose one event loop
cannot keep up (its self-check says client-bound, and its timestamps are as late as its loop).

Each process measures its share of the concurrency (and of the requests) as a shard of
`measure_scenario`: it opens its connections, then waits for one CLOCK_MONOTONIC instant that every
process shares, which is also every shard's t=0, so the parts merge on that clock exactly. The
merged self-check is the busiest process's, its reasons naming the process, and it says how many
processes there were. Each process's count of finished requests comes back on a queue, summed
into the scenario's one progress line. Rate mode is never spread: its Poisson schedule would change.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.queues import Queue

from servingctl.bench import aio
from servingctl.bench.backend import Backend, Connection
from servingctl.bench.runner import (
    Measurement,
    Progress,
    ProgressFn,
    Shard,
    expected_requests,
    measure_scenario,
    settled_snapshot,
)
from servingctl.bench.server_metrics import ServerMetrics
from servingctl.bench.shards import earliest_snapshot, merge_shards, shares
from servingctl.schema.results import Calibration, RunConfig, ScenarioResult, scenario_name

# The processes start (a fresh interpreter imports the engine) and open their connections first.
START_LEAD_S = 2.0
MAX_PROCESSES = 64


_done: Queue | None = None  # in a child: where its finished-request counts go


def _keep_queue(done: Queue) -> None:
    """A child's initializer: keep the parent's queue of finished-request counts."""
    global _done
    _done = done


def _measure_part(config: RunConfig, connection: Connection, calibration: Calibration, concurrency: int, run_id: str,
                  name: str, shard: Shard, lag_p99_limit_ms: float, cpu_share_limit: float) -> Measurement:
    """One process's share (runs in the child process, on its own event loop)."""
    def progress(event: Progress) -> None:
        if event.kind == "request_done" and _done is not None:
            _done.put((shard.index, event.done))

    return aio.run(measure_scenario(
        config, connection, calibration, concurrency, run_id=run_id, name=name, shard=shard,
        lag_p99_limit_ms=lag_p99_limit_ms, cpu_share_limit=cpu_share_limit, progress=progress,
    ))


async def _forward(done: Queue, name: str, total: int | None, notify: ProgressFn) -> None:
    """Sum the processes' finished-request counts into one progress line, until None arrives."""
    counts: dict[int, int] = {}
    loop = asyncio.get_running_loop()
    while (item := await loop.run_in_executor(None, done.get)) is not None:
        index, count = item
        counts[index] = count
        notify(Progress("request_done", name, sum(counts.values()), total, ""))


async def spread_scenario(
    config: RunConfig,
    connection: Connection,
    calibration: Calibration,
    concurrency: int,
    *,
    processes: int,
    run_id: str,
    lag_p99_limit_ms: float,
    cpu_share_limit: float,
    progress: ProgressFn | None = None,
) -> ScenarioResult:
    """Run one scenario over min(processes, concurrency) processes (at least 2) and merge it."""
    if config.mode == "rate":
        raise ValueError("rate mode runs in one process: its Poisson schedule would change if spread")
    count = min(processes, concurrency)
    name = scenario_name(calibration.target_tokens, concurrency, config.mode, config.rate)
    concurrencies = shares(concurrency, count)
    requests = shares(config.requests, count) if config.requests is not None else [None] * count
    notify = progress or (lambda event: None)
    total = expected_requests(config, concurrency, None)
    notify(Progress("scenario_started", name, 0, total, f"{config.mode} load, concurrency {concurrency} over {count} processes"))
    start_ns = time.monotonic_ns() + int(START_LEAD_S * 1e9)
    loop = asyncio.get_running_loop()
    # spawn: a child never inherits this process's event loop or open sockets.
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    forwarding = asyncio.create_task(_forward(done, name, total, notify))
    try:
        with ProcessPoolExecutor(max_workers=count, mp_context=context, initializer=_keep_queue, initargs=(done,)) as pool:
            parts = await asyncio.gather(*(
                loop.run_in_executor(
                    pool, _measure_part, config.model_copy(update={"requests": requests[i]}), connection, calibration,
                    concurrencies[i], run_id, name, Shard(i, count, start_ns=start_ns), lag_p99_limit_ms, cpu_share_limit,
                )
                for i in range(count)
            ))
    finally:
        done.put(None)
        await forwarding
    async with Backend(connection, config.model, max_connections=1) as backend:
        tokens = sum(r.completion_tokens or 0 for part in parts for r in part.records)
        after = await settled_snapshot(ServerMetrics(backend, config.model), earliest_snapshot([p.before for p in parts]), tokens)
    result, warnings = merge_shards(config, calibration, concurrency, parts, after, same_host=True)
    s = result.summary
    notify(Progress("scenario_finished", name, len(result.records), len(result.records),
                    "; ".join([f"{s.ok} ok, {s.failed} failed", *warnings])))
    return result
