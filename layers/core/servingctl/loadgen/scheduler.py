"""Load shapes: when each request of a scenario is sent. The HTTP work is a `send` callback.

- burst: rounds of C requests released together; a round ends when its last request ends.
- sustained: C workers each send their next request as soon as the previous one ends, until N
  requests were sent or the duration passed (closed loop, C always in flight).
- rate: open loop, Poisson arrivals at R req/s; send times are absolute offsets drawn in advance
  from a seeded RNG, so a slow send never shifts later arrivals. C caps requests in flight.
- replay: the same open loop at a trace's own offsets (its timestamps, scaled).
- conversations: C workers each take the next conversation and send its turns one after the other,
  a think time between a reply and the next turn.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable

from servingctl.loadgen.metrics import round_result
from servingctl.schema.results import RequestRecord, RoundResult

# send(index, round, warmup) performs one request and returns its record (it never raises).
Send = Callable[[int, int, bool], Awaitable[RequestRecord]]
# turn(index, conversation, turn) sends one turn of a conversation (it never raises).
Turn = Callable[[int, int, int], Awaitable[RequestRecord]]


def constant_offsets(rate: float, *, requests: int | None, duration_s: float | None) -> list[float]:
    """Send times of evenly spaced arrivals at `rate`/s: k / rate, until `requests` or before `duration_s`."""
    if requests is None and duration_s is None:
        raise ValueError("constant_offsets needs requests or duration_s")
    count = requests if requests is not None else math.ceil((duration_s or 0.0) * rate)
    if duration_s is not None:
        count = min(count, math.ceil(duration_s * rate))
    return [k / rate for k in range(count)]


def replay_offsets(timestamps: list[float], speed: float, start: float | None = None) -> list[float]:
    """Send offsets of a trace: each timestamp after `start` (default: the first one), divided by
    `speed` (2: twice as fast)."""
    origin = min(timestamps, default=0.0) if start is None else start
    return [(t - origin) / speed for t in timestamps]


async def run_conversations(
    turn: Turn,
    turns: list[int],
    concurrency: int,
    *,
    think_time_s: float,
    first_index: int = 0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[RequestRecord]:
    """Conversation k has turns[k] turns; `concurrency` conversations go on at once, each turn sent
    when the previous one ended plus `think_time_s`. Indexes are given in order of sending."""
    next_conversation = 0
    next_index = first_index
    records: list[RequestRecord] = []

    async def worker() -> None:
        nonlocal next_conversation, next_index
        while next_conversation < len(turns):
            conversation = next_conversation
            next_conversation += 1
            for k in range(turns[conversation]):
                if k and think_time_s:
                    await sleep(think_time_s)
                index = next_index
                next_index += 1
                records.append(await turn(index, conversation, k))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(records, key=lambda r: r.index)


async def run_bursts(
    send: Send,
    concurrency: int,
    rounds: int,
    *,
    warmup: bool,
    first_index: int = 0,
    duration_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[RequestRecord], list[RoundResult]]:
    """Run `rounds` rounds of `concurrency` simultaneous requests, one round after the other; with
    `duration_s`, rounds instead until that many seconds passed (a round started before then ends)."""
    records: list[RequestRecord] = []
    results: list[RoundResult] = []
    index = first_index
    deadline = None if duration_s is None else clock() + duration_s
    round_index = 0
    while round_index < rounds if deadline is None else clock() < deadline:
        batch = await asyncio.gather(*(send(index + i, round_index, warmup) for i in range(concurrency)))
        index += concurrency
        records.extend(batch)
        results.append(round_result(round_index, warmup, batch))
        round_index += 1
    return records, results


async def run_sustained(
    send: Send,
    concurrency: int,
    *,
    requests: int | None,
    duration_s: float | None,
    first_index: int = 0,
    warmup: bool = False,
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
            records.append(await send(index, 0, warmup))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(records, key=lambda r: r.index)


def schedule_rate(offsets: list[float] | None) -> float | None:
    """Arrivals per second of a schedule, first to last send (None under two sends)."""
    if not offsets or len(offsets) < 2 or offsets[-1] <= offsets[0]:
        return None
    return (len(offsets) - 1) / (offsets[-1] - offsets[0])


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
    warmup: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> list[RequestRecord]:
    """Send request k at start + offsets[k] (absolute schedule); at most `concurrency` in flight."""
    slots = asyncio.Semaphore(concurrency)
    start = clock()

    async def one(index: int) -> RequestRecord:
        async with slots:
            return await send(index, 0, warmup)

    tasks = []
    for k, offset in enumerate(offsets):
        delay = start + offset - clock()
        if delay > 0:
            await sleep(delay)
        tasks.append(asyncio.create_task(one(first_index + k)))
    return list(await asyncio.gather(*tasks))
