"""The clock the steps read and sleep on, injectable so tests and the twin control time."""

from __future__ import annotations

import time
from datetime import UTC, datetime
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
