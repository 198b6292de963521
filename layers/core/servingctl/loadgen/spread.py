"""One scenario's streams spread over processes of this host, for a client whose one event loop
cannot keep up (its self-check says client-bound, and its timestamps are as late as its loop).

Each process measures its share of the concurrency (and of the requests) as a shard of
`measure_scenario`. Once every process is up, the parent sets one CLOCK_MONOTONIC instant that
every process shares; each opens its connections and waits for it. That instant is every shard's
t=0, so the parts merge on that clock exactly. The merged self-check is the busiest process's, its
reasons naming the process, and it says how many processes there were. Each process's count of
finished requests comes back on a queue, summed into the scenario's one progress line. Rate mode
is never spread: its Poisson schedule would change. A workload (a dataset, length distributions) is
dealt among the processes: each request of the one-process plan to one process, conversations whole,
a trace's timestamps kept (workload.split_workload).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from servingctl.loadgen import aio
from servingctl.loadgen.backend import Backend, Connection
from servingctl.loadgen.measure import (
    Measurement,
    Progress,
    ProgressFn,
    Shard,
    expected_requests,
    measure_scenario,
    measured_name,
    measured_requests,
    planned_offsets,
    settled_snapshot,
)
from servingctl.loadgen.server_metrics import ServerMetrics
from servingctl.loadgen.shards import earliest_snapshot, merge_shards, process_count, shares
from servingctl.loadgen.workload import Workload, split_workload
from servingctl.schema.results import Calibration, RunConfig, ScenarioResult

# Once every process is up (a fresh interpreter imports the engine: seconds on a loaded machine),
# they start together this long after: time to read the counters and open their connections.
START_LEAD_S = 1.0
MAX_PROCESSES = 64
# How often the parent looks whether a process died without a word (killed, out of memory).
POLL_S = 1.0
# What a process tells the parent: (kind, process index, payload), as _measure_part lists them.
Message = tuple[str, int, Any]


def _measure_part(
    out: Queue[Message],
    go: Event,
    start_ns: Synchronized[int],
    config: RunConfig,
    connection: Connection,
    calibration: Calibration,
    concurrency: int,
    run_id: str,
    name: str,
    index: int,
    count: int,
    lag_p99_limit_ms: float,
    cpu_share_limit: float,
    workload: Workload | None,
) -> None:
    """One process's share (of a workload: its part), on its own event loop: ("ready", index, None) once it is up, then after
    the parent's go ("done", index, count) per finished request and ("part", index, Measurement),
    or ("error", index, text) if it failed."""
    out.put(("ready", index, None))
    go.wait()
    shard = Shard(index, count, start_ns=start_ns.value)

    def progress(event: Progress) -> None:
        if event.kind == "request_done":
            out.put(("done", shard.index, event.done))

    try:
        out.put(
            (
                "part",
                shard.index,
                aio.run(
                    measure_scenario(
                        config,
                        connection,
                        calibration,
                        concurrency,
                        run_id=run_id,
                        name=name,
                        shard=shard,
                        lag_p99_limit_ms=lag_p99_limit_ms,
                        cpu_share_limit=cpu_share_limit,
                        progress=progress,
                        workload=workload,
                    )
                ),
            )
        )
    except BaseException as exc:  # the parent must hear of it, whatever it was
        out.put(("error", shard.index, f"{type(exc).__name__}: {exc}"))


def spread_count(config: RunConfig, concurrency: int, processes: int, workload: Workload | None) -> int:
    """Processes a scenario is spread over (1: this one): process_count's, and never more than a
    workload's conversations, or prompts when only a duration bounds the scenario."""
    count = process_count(processes, concurrency, measured_requests(config, workload))
    if workload is not None and workload.conversations is not None:
        return min(count, len(workload.conversations))
    if workload is not None and config.mode != "burst" and config.requests is None:
        return min(count, len(workload.prompts))
    return count


def _start_deaf_to_ctrl_c(children: Sequence[BaseProcess]) -> None:
    """Start the processes with SIGINT blocked from their first instruction: a Ctrl-C reaches the
    whole process group, and a process still importing the engine would print a cut-off
    KeyboardInterrupt traceback. This process owns the interrupt and terminates them; a Ctrl-C
    meanwhile waits, pending, until the mask is restored here (as multiprocessing starts its
    resource tracker)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for child in children:
            child.start()  # the mask survives fork and exec
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _next(out: Queue[Message]) -> Message | None:
    """The next message from a process, or None after POLL_S of silence."""
    try:
        return out.get(timeout=POLL_S)
    except queue.Empty:
        return None


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
    workload: Workload | None = None,
) -> ScenarioResult:
    """Run one scenario over spread_count(...) processes (at least 2) and merge it, a workload's
    requests dealt among them (split_workload); an interrupt or a failed process stops every
    process before it propagates."""
    if config.mode == "rate":
        raise ValueError("rate mode runs in one process: its Poisson schedule would change if spread")
    count = spread_count(config, concurrency, processes, workload)
    name = measured_name(config, calibration, concurrency, workload)
    concurrencies = shares(concurrency, count)
    measured = measured_requests(config, workload)
    requests: list[int | None] = [*shares(measured, count)] if measured is not None else [None] * count
    parts: list[Workload | None] = [None] * count
    if workload is not None:
        rounds = config.rounds if config.mode == "burst" else None
        dealt = split_workload(workload, concurrencies, requests=measured, rounds=rounds)
        parts, requests = [*dealt], [len(part.prompts) if measured is not None else None for part in dealt]
    notify = progress or (lambda event: None)
    total = expected_requests(config, concurrency, planned_offsets(config, workload), workload)
    notify(Progress("scenario_started", name, 0, total, f"{config.mode} load, concurrency {concurrency} over {count} processes"))
    # spawn: a child never inherits this process's event loop or open sockets; daemon: none outlives it.
    context = multiprocessing.get_context("spawn")
    out, go, start_ns = context.Queue(), context.Event(), context.Value("q", 0)
    children = [
        context.Process(
            target=_measure_part,
            daemon=True,
            args=(
                out,
                go,
                start_ns,
                config.model_copy(update={"requests": requests[i]}),
                connection,
                calibration,
                concurrencies[i],
                run_id,
                name,
                i,
                count,
                lag_p99_limit_ms,
                cpu_share_limit,
                parts[i],
            ),
        )
        for i in range(count)
    ]
    found = await _collect(children, out, go, start_ns, lambda done: notify(Progress("request_done", name, done, total, "")))
    return await _merged(config, connection, calibration, concurrency, [found[i] for i in range(count)], name, notify)


async def _collect(
    children: Sequence[BaseProcess], out: Queue[Message], go: Event, start_ns: Synchronized[int], done: Callable[[int], None]
) -> dict[int, Measurement]:
    """Start the processes, give them one start instant once all are up, and gather each one's
    measurement (done(n): n requests done in all); a failed or silent process ends every one."""
    count = len(children)
    loop = asyncio.get_running_loop()
    found: dict[int, Measurement] = {}
    counts: dict[int, int] = {}
    ready: set[int] = set()
    try:
        _start_deaf_to_ctrl_c(children)
        while len(found) < count:
            message = await loop.run_in_executor(None, _next, out)
            if message is None:
                dead = [i for i, child in enumerate(children) if i not in found and child.exitcode is not None]
                if dead and (message := await loop.run_in_executor(None, _next, out)) is None:  # last words in the pipe?
                    raise RuntimeError(
                        f"process {dead[0] + 1} of {count} ended (exit code {children[dead[0]].exitcode}) without its measurement"
                    )
                if message is None:
                    continue
            kind, index, value = message
            if kind == "ready":
                ready.add(index)
                if len(ready) == count:  # every process is up: one start instant for all
                    start_ns.value = time.monotonic_ns() + int(START_LEAD_S * 1e9)
                    go.set()
            elif kind == "done":
                counts[index] = value
                done(sum(counts.values()))
            elif kind == "part":
                found[index] = value
            else:
                raise RuntimeError(f"process {index + 1} of {count} failed: {value}")  # counted from 1 for people
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()
        for child in children:
            if child.pid is not None:  # started: a failure or an interrupt can come between two starts
                child.join(5)
    return found


async def _merged(
    config: RunConfig,
    connection: Connection,
    calibration: Calibration,
    concurrency: int,
    parts: list[Measurement],
    name: str,
    notify: ProgressFn,
) -> ScenarioResult:
    """The processes' measurements as one scenario, checked against the server's counters after all."""
    async with Backend(connection, config.model, max_connections=1, api=config.api) as backend:
        tokens = sum(r.completion_tokens or 0 for part in parts for r in part.records)
        after = await settled_snapshot(ServerMetrics(backend, config.model), earliest_snapshot([p.before for p in parts]), tokens)
    result, warnings = merge_shards(config, calibration, concurrency, parts, after, same_host=True)
    s = result.summary
    notify(
        Progress(
            "scenario_finished",
            name,
            len(result.records),
            len(result.records),
            "; ".join([f"{s.ok} ok, {s.failed} failed", *warnings]),
        )
    )
    return result
