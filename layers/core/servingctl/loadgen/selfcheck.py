"""Client self-check: is the benchmark client itself the bottleneck?

While a scenario runs, a loop timer fires every 10 ms and records how late it fires (event-loop
lag: every chunk timestamp is late by about as much); after FAST_SAMPLES firings (a short
scenario's samples; none for a load planned to last FAST_PHASE_BELOW_S or more), every 250 ms. A
firing at a random instant is late as a chunk would be, so fewer samples are not biased, and each
firing wakes an idle loop: at one paced stream (50 tokens a second) 10 firings a second were a
quarter of the client's wake-ups. A stall shorter than a slow tick can fall between two; one
longer is always seen. The process CPU time is compared with the wall time, and the event loop's
thread's wait for a CPU (its run-queue delay, Linux schedstat) and the machine's steal time and
load average are read around the load.

The verdict separates two causes of late timestamps:
- `client_bound` (the client was the bottleneck): its CPU share exceeds CPU_SHARE_LIMIT (the
  single-threaded event loop is close to saturation, so the client, not the server, sets the pace),
  or the lag p99 exceeds LAG_P99_LIMIT_MS while the client used BUSY_CLIENT_SHARE of a core or more
  (its own work made the loop late), or while it neither worked nor waited for a CPU (it blocked);
- `host_busy` (the machine was busy, not the client): the lag p99 exceeds the limit while the client
  used under BUSY_CLIENT_SHARE of a core and its thread waited for a CPU (other processes, steal):
  its timings are late by up to the lag, but more client processes would not help.
The garbage collector's part in the lag is kept out while a load runs (gc_paused).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from servingctl.loadgen.host import load_average
from servingctl.loadgen.stats import summarize
from servingctl.schema.results import ClientSelfCheck

TICK_S = 0.01
SLOW_TICK_S = 0.25
FAST_SAMPLES = 20
FAST_PHASE_BELOW_S = 10.0  # a load planned this long gets 40 slow samples or more
LAG_P99_LIMIT_MS = 5.0
CPU_SHARE_LIMIT = 0.8
# A loop that used under half a core while it woke late was kept waiting, not working.
BUSY_CLIENT_SHARE = 0.5
# Under 1 % of the wall time waiting for a CPU, the machine did not keep the loop late: it blocked.
WAIT_SHARE_MIN = 0.01
SCHEDSTAT = "/proc/thread-self/schedstat"
PROC_STAT = "/proc/stat"


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
        self._wait0: float | None = None
        self._stat0: tuple[int, int] | None = None

    def start(self) -> None:
        """Begin sampling (call from inside the running event loop)."""
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._wait0, self._stat0 = run_queue_wait_s(), steal_and_total()
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
        wait1, stat1 = run_queue_wait_s(), steal_and_total()
        wait = wait1 - self._wait0 if wait1 is not None and self._wait0 is not None else None
        steal = None
        if stat1 is not None and self._stat0 is not None and stat1[1] > self._stat0[1]:
            steal = (stat1[0] - self._stat0[0]) / (stat1[1] - self._stat0[1])
        load = load_average()
        return judge(
            self._lags_ms,
            cpu,
            wall,
            self.lag_limit_ms,
            self.cpu_limit,
            machine=Machine(wait_s=wait, steal_share=steal, load_average=load[0] if load else None, cpus=os.cpu_count()),
        )


def run_queue_wait_s(path: str = SCHEDSTAT) -> float | None:
    """Seconds this thread has waited on a run queue for a CPU (None where the kernel does not say)."""
    try:
        with open(path) as f:
            _, waited, slices = (int(n) for n in f.read().split()[:3])
    except (OSError, ValueError):
        return None
    # A kernel that does not account prints "0 0 0": a running thread has had a timeslice at least,
    # so a zero count means no figures, not a thread that never waited.
    return waited / 1e9 if slices > 0 else None


def steal_and_total(path: str = PROC_STAT) -> tuple[int, int] | None:
    """The machine's steal ticks and all its ticks so far (None where the kernel does not say)."""
    try:
        with open(path) as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice, already inside user and nice]
    return (ticks[7], sum(ticks[:8])) if len(ticks) >= 8 else None


@dataclass(frozen=True)
class Machine:
    """How busy the machine was around a scenario (each None where unknown)."""

    wait_s: float | None = None  # the event loop's thread's run-queue delay
    steal_share: float | None = None
    load_average: float | None = None
    cpus: int | None = None

    def words(self, wall_s: float) -> str:
        """'its thread waited 3.1 s for a CPU (12 % of the time), load average 15.9 on 2 CPUs, steal 0 %'."""
        said = []
        if self.wait_s is not None:
            share = f" ({self.wait_s / wall_s:.0%} of the time)" if wall_s > 0 else ""
            said.append(f"the event loop waited {self.wait_s:.1f} s for a CPU{share}")
        if self.load_average is not None:
            said.append(f"load average {self.load_average:.1f} on {self.cpus or '?'} CPUs")
        if self.steal_share is not None:
            said.append(f"steal {self.steal_share:.0%}")
        return ", ".join(said) or "its load unknown"


def judge(
    lags_ms: list[float],
    cpu_s: float,
    wall_s: float,
    lag_limit_ms: float,
    cpu_limit: float,
    machine: Machine | None = None,
) -> ClientSelfCheck:
    """The verdict from lag samples, CPU/wall seconds and the machine's business (module docstring)."""
    machine = machine or Machine()
    lag = summarize(lags_ms)
    share = cpu_s / wall_s if wall_s > 0 else 0.0
    reasons: list[str] = []
    host: list[str] = []
    if share > cpu_limit:
        reasons.append(f"client CPU {share:.0%} of one core > {cpu_limit:.0%}: the client sets the pace")
    if lag.p99 is not None and lag.p99 > lag_limit_ms:
        late = f"event-loop lag p99 {lag.p99:.1f} ms > {lag_limit_ms:g} ms: timestamps are late"
        waited = machine.wait_s / wall_s if machine.wait_s is not None and wall_s > 0 else None
        if share >= BUSY_CLIENT_SHARE:
            reasons.append(f"{late}, the client busy {share:.0%} of a core")
        elif waited is not None and waited < WAIT_SHARE_MIN:
            reasons.append(f"{late}, the client neither busy ({share:.0%} of a core) nor waiting for a CPU: it blocked")
        else:
            host.append(
                f"{late} by the machine, not the client (it used {share:.0%} of a core; {machine.words(wall_s)}): "
                "measure on an idle machine; more client processes would not help"
            )
    return ClientSelfCheck(
        loop_lag_ms=lag,
        cpu_seconds=cpu_s,
        wall_seconds=wall_s,
        cpu_share=share,
        lag_p99_limit_ms=lag_limit_ms,
        cpu_share_limit=cpu_limit,
        client_bound=bool(reasons),
        reasons=reasons,
        host_busy=bool(host),
        host_reasons=host,
        run_queue_wait_s=machine.wait_s,
        steal_share=machine.steal_share,
        load_average=machine.load_average,
    )
