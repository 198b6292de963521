"""The benchmark client's event loop: uvloop (libuv, in C) runs each network read's callback with
less CPU and less lag than asyncio's selector loop, and a streaming client pays that per read."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh uvloop event loop (asyncio.run's contract)."""
    return uvloop.run(main)
