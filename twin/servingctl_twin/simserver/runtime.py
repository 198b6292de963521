"""The asyncio side of the engine: one task runs steps on the clock and hands tokens to streams.

Steps are scheduled on absolute deadlines (start + duration / speed), so the server's timing does
not drift when the event loop is late; a late loop catches up by running the overdue steps at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque

from servingctl_twin.simserver.config import SimConfig
from servingctl_twin.simserver.prefix_cache import PrefixCache
from servingctl_twin.simserver.scheduler import Scheduler, Seq, Step


class Sink:
    """Per-request mailbox of (new tokens, finished) events, one per engine step."""

    __slots__ = ("_waiter", "events")

    def __init__(self) -> None:
        """Start empty."""
        self.events: deque[tuple[int, bool]] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def deliver(self, new_tokens: int, finished: bool) -> None:
        """Called by the engine after a step."""
        self.events.append((new_tokens, finished))
        self.wake()

    def wake(self) -> None:
        """Wake the reader (also used when the client disconnects)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Wait until an event arrives or ``wake`` is called."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class Engine:
    """Runs the scheduler in real time, divided by the configured speed factor."""

    def __init__(self, config: SimConfig) -> None:
        """Build the scheduler and prefix cache from the config."""
        self.config = config
        self.scheduler = Scheduler(
            timing=config.timing,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            mtp_tokens=config.mtp_tokens,
            mtp_acceptance=config.mtp_acceptance,
            prefix_cache=PrefixCache(config.block_size, config.kv_cache_tokens // config.block_size),
        )
        self._scale = 1 / 1000 / config.speed  # ms at speed 1 -> wall seconds
        self._step: Step | None = None
        self._step_start = 0.0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the step loop on the running event loop (idempotent)."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the step loop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def new_seq(self, prompt_len: int, target_len: int, finish_reason: str, block_hashes: list[int], seed: int) -> Seq:
        """A sequence ready to submit, with its own sink and draft-acceptance stream."""
        return Seq(prompt_len, target_len, finish_reason, block_hashes, random.Random(seed), sink=Sink())

    def submit(self, seq: Seq) -> None:
        """Queue a request; an idle engine starts a step at once with what is queued now (like vLLM)."""
        self.start()
        self.scheduler.add(seq)
        if self._step is None:
            self._step = self.scheduler.plan_step()
            self._step_start = asyncio.get_running_loop().time()
            assert self._wake is not None
            self._wake.set()

    def abort(self, seq: Seq) -> None:
        """Drop a request whose client is gone or whose stream was cut."""
        self.scheduler.abort(seq)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            step = self._step
            if step is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            deadline = self._step_start + step.duration_ms * self._scale
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            for seq, new in self.scheduler.commit(step):
                seq.sink.deliver(new, seq.finished)
            self._step = self.scheduler.plan_step()
            self._step_start = deadline
