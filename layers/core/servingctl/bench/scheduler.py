"""Load shapes: when each request of a scenario is sent. The HTTP work is a `send` callback.

- burst: rounds of C requests released together; a round ends when its last request ends.
- sustained: C workers each send their next request as soon as the previous one ends, until N
  requests were sent or the duration passed (closed loop, C always in flight).
- rate: open loop, Poisson arrivals at R req/s; send times are absolute offsets drawn in advance
  from a seeded RNG, so a slow send never shifts later arrivals. C caps requests in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from servingctl.bench.metrics import round_result
from servingctl.schema.results import RequestRecord, RoundResult

# send(index, round, warmup) performs one request and returns its record (it never raises).
Send = Callable[[int, int, bool], Awaitable[RequestRecord]]


async def run_bursts(
    send: Send, concurrency: int, rounds: int, *, warmup: bool, first_index: int = 0
) -> tuple[list[RequestRecord], list[RoundResult]]:
    """Run `rounds` rounds of `concurrency` simultaneous requests, one round after the other."""
    records: list[RequestRecord] = []
    results: list[RoundResult] = []
    index = first_index
    for round_index in range(rounds):
        batch = await asyncio.gather(*(send(index + i, round_index, warmup) for i in range(concurrency)))
        index += concurrency
        records.extend(batch)
        results.append(round_result(round_index, warmup, batch))
    return records, results


async def run_sustained(
    send: Send,
    concurrency: int,
    *,
    requests: int | None,
    duration_s: float | None,
    first_index: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> list[RequestRecord]:
    """Keep `concurrency` requests in flight until `requests` were sent or `duration_s` passed."""
    deadline = None if duration_s is None else clock() + duration_s
    next_index = first_index
    last_index = None if requests is None else first_index + requests
    records: list[RequestRecord] = []

    async def worker() -> None:
        nonlocal next_index
        while (last_index is None or next_index < last_index) and (deadline is None or clock() < deadline):
            index = next_index
            next_index += 1
            records.append(await send(index, 0, False))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(records, key=lambda r: r.index)


def poisson_offsets(rate: float, seed: int, *, requests: int | None, duration_s: float | None) -> list[float]:
    """Send times (s after the start) of a Poisson process at `rate`/s: the first at 0, then
    exponential gaps; stops at `requests` arrivals or before `duration_s`, whichever comes first."""
    if requests is None and duration_s is None:
        raise ValueError("poisson_offsets needs requests or duration_s")
    rng = random.Random(seed)
    offsets: list[float] = []
    t = 0.0
    while (requests is None or len(offsets) < requests) and (duration_s is None or t < duration_s):
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


async def run_rate(
    send: Send,
    offsets: list[float],
    concurrency: int,
    *,
    first_index: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> list[RequestRecord]:
    """Send request k at start + offsets[k] (absolute schedule); at most `concurrency` in flight."""
    slots = asyncio.Semaphore(concurrency)
    start = clock()

    async def one(index: int) -> RequestRecord:
        async with slots:
            return await send(index, 0, False)

    tasks = []
    for k, offset in enumerate(offsets):
        delay = start + offset - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(first_index + k)))
    return list(await asyncio.gather(*tasks))
