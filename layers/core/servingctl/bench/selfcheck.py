"""Client self-check: is the benchmark client itself the bottleneck?

While a scenario runs, a loop timer fires every 10 ms and records how late it fires (event-loop
lag: every chunk timestamp is late by about as much); after FAST_SAMPLES firings (a short
scenario's samples; none for a load planned to last FAST_PHASE_BELOW_S or more), every 250 ms. A
firing at a random instant is late as a chunk would be, so fewer samples are not biased, and each
firing wakes an idle loop: at one paced stream (50 tokens a second) 10 firings a second were a
quarter of the client's wake-ups. A stall shorter than a slow tick can fall between two; one
longer is always seen. The process CPU time is compared with the wall time. The scenario is `client_bound` when
the lag p99 exceeds
LAG_P99_LIMIT_MS (timings would be off by more than that) or the CPU share exceeds CPU_SHARE_LIMIT
(the single-threaded event loop is close to saturation, so the client, not the server, sets the pace).
The garbage collector's part in the lag is kept out while a load runs (gc_paused).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

from servingctl.bench.stats import summarize
from servingctl.schema.results import ClientSelfCheck

TICK_S = 0.01
SLOW_TICK_S = 0.25
FAST_SAMPLES = 20
FAST_PHASE_BELOW_S = 10.0  # a load planned this long gets 40 slow samples or more
LAG_P99_LIMIT_MS = 5.0
CPU_SHARE_LIMIT = 0.8


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside, and what was alive before frozen out of it after: a full
    collection over the imported stack stalled the loop (and every chunk stamp) for ~100 ms, and
    the collector's scans of the records a load holds took ~8 % of the client's CPU at 64 streams
    (py-spy). Reference counting still frees everything that is not in a cycle; collection is back
    on afterwards if it was on before."""
    was_enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()


class SelfCheck:
    """Samples event-loop lag and process CPU between start() and stop()."""

    def __init__(
        self, lag_limit_ms: float = LAG_P99_LIMIT_MS, cpu_limit: float = CPU_SHARE_LIMIT, planned_s: float | None = None
    ) -> None:
        self.lag_limit_ms = lag_limit_ms
        self.cpu_limit = cpu_limit
        self._fast = FAST_SAMPLES if planned_s is None or planned_s < FAST_PHASE_BELOW_S else 0
        self._lags_ms: list[float] = []
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        """Begin sampling (call from inside the running event loop)."""
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._schedule()

    def _schedule(self) -> None:
        # A timer callback, not a sleeping task: a wake-up then costs the loop no task step and no future.
        tick = TICK_S if len(self._lags_ms) < self._fast else SLOW_TICK_S
        self._due = time.perf_counter() + tick
        self._timer = asyncio.get_running_loop().call_later(tick, self._tick)

    def _tick(self) -> None:
        self._lags_ms.append(max(0.0, (time.perf_counter() - self._due) * 1000.0))
        self._schedule()

    async def stop(self) -> ClientSelfCheck:
        """Stop sampling and judge."""
        cpu, wall = time.process_time() - self._cpu0, time.perf_counter() - self._wall0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return judge(self._lags_ms, cpu, wall, self.lag_limit_ms, self.cpu_limit)


def judge(lags_ms: list[float], cpu_s: float, wall_s: float, lag_limit_ms: float, cpu_limit: float) -> ClientSelfCheck:
    """The verdict from lag samples and CPU/wall seconds."""
    lag = summarize(lags_ms)
    share = cpu_s / wall_s if wall_s > 0 else 0.0
    reasons = []
    if lag.p99 is not None and lag.p99 > lag_limit_ms:
        reasons.append(f"event-loop lag p99 {lag.p99:.1f} ms > {lag_limit_ms:g} ms: timestamps are late")
    if share > cpu_limit:
        reasons.append(f"client CPU {share:.0%} of one core > {cpu_limit:.0%}: the client sets the pace")
    return ClientSelfCheck(
        loop_lag_ms=lag,
        cpu_seconds=cpu_s,
        wall_seconds=wall_s,
        cpu_share=share,
        lag_p99_limit_ms=lag_limit_ms,
        cpu_share_limit=cpu_limit,
        client_bound=bool(reasons),
        reasons=reasons,
    )
