"""Wait-loop arithmetic: back-off, deadlines and the {ready, wait_s, detail, progress} answer of a check.

A check's answer (Check) goes to $.<key> of the execution state; the next round reads `progress` back, so
the attempt count, the phase's start and its marks (first InService, task IP, ...) survive between
invocations without touching the store.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servingctl.control.history import min_wait_s
from servingctl.shared.clock import Clock
from servingctl.shared.errors import DeadlineExceeded
from servingctl.shared.flow_inputs import Poll
from servingctl.store.models import iso

Probe = Callable[["Progress"], tuple[bool, str]]


class Progress(BaseModel):
    """What a wait loop remembers between rounds."""

    attempt: int = 0
    since: datetime
    marks: dict[str, Any] = Field(default_factory=dict)

    def mark_once(self, name: str, value: Any) -> None:
        """Record a mark the first time only (e.g. when an instance first went InService)."""
        self.marks.setdefault(name, value)


class Check(BaseModel):
    """A wait loop's answer, written to $.<key>: ready, the seconds to wait, what was seen, its progress."""

    model_config = ConfigDict(extra="forbid")

    ready: bool
    wait_s: int
    detail: str
    progress: Progress


def backoff_wait(poll: Poll, attempt: int) -> int:
    """interval * backoff^attempt capped at max_interval, in whole seconds (Wait needs an integer)."""
    raw = poll.interval_s * poll.backoff ** min(attempt, 64)
    return max(1, min(poll.max_interval_s, round(raw)))


def run_check(
    *,
    last: Check | None,
    what: str,
    deadline_s: int,
    poll: Poll,
    clock: Clock,
    probe: Probe,
    watch_budget_s: float = 0.0,
) -> Check:
    """Probe once; when not ready, raise past the deadline or answer with the next wait: the poll's
    back-off, but never shorter than min_wait_s(deadline_s), so the loop runs at most MAX_LOOP_ROUNDS
    rounds and its flow's history stays under Step Functions' 25,000 events (servingctl.control.history).

    With a watch budget, the check keeps probing every poll.interval_s inside this invocation for up
    to the computed wait, so the loop notices readiness within one interval without extra state
    transitions; wait_s is what is left of the wait afterwards. `last` is the previous round's answer
    (None in the first round).
    """
    now = clock.now()
    progress = last.progress.model_copy(deep=True) if last is not None else Progress(since=now)
    ready, detail = probe(progress)
    wait_s = 0
    if not ready:
        elapsed = (now - progress.since).total_seconds()
        if elapsed >= deadline_s:
            raise DeadlineExceeded(f"{what} not reached within {deadline_s} s: {detail}")
        paced = max(backoff_wait(poll, progress.attempt), min_wait_s(deadline_s))
        wait = min(paced, max(1, math.ceil(deadline_s - elapsed)))
        watched, watch_for = 0, min(wait, int(watch_budget_s))
        while not ready and watched < watch_for:
            pause = min(poll.interval_s, watch_for - watched)
            clock.sleep(pause)
            watched += pause
            ready, detail = probe(progress)
        wait_s = 0 if ready else wait - watched
        progress.attempt += 1
    if ready:
        progress.mark_once("ready_at", iso(clock.now()))
    return Check(ready=ready, wait_s=wait_s, detail=detail, progress=progress)
