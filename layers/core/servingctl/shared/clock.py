"""The clock the steps read and sleep on, injectable so tests and the twin control time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Now in UTC, and a way to wait."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for seconds."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        """Block for seconds."""
        time.sleep(max(0.0, seconds))


class OffsetClock(SystemClock):
    """The wall clock moved forward by offset: the twin's tests let a lease run out without waiting."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset

    def now(self) -> datetime:
        """The current time plus the offset, timezone-aware UTC."""
        return super().now() + self.offset


class ScaledClock(SystemClock):
    """A clock running factor times faster than the wall clock from an anchor: the twin's tests
    replay a traffic trace of minutes in seconds (sleeps shrink by the same factor)."""

    def __init__(self, anchor: datetime, factor: float, real_anchor: datetime | None = None) -> None:
        self.anchor, self.factor = anchor, factor
        self.real_anchor = real_anchor or datetime.now(UTC)

    def at(self, real: datetime) -> datetime:
        """The scaled time of a wall-clock moment."""
        return self.anchor + (real - self.real_anchor) * self.factor

    def now(self) -> datetime:
        """The scaled current time, timezone-aware UTC."""
        return self.at(datetime.now(UTC))

    def sleep(self, seconds: float) -> None:
        """Block for seconds of scaled time."""
        time.sleep(max(0.0, seconds / self.factor))
