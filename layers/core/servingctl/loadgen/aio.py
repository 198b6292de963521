"""The benchmark client's event loop: uvloop (libuv, in C) runs each network read's callback with
less CPU and less lag than asyncio's selector loop, and a streaming client pays that per read.
uvloop is the product's `client` extra: the processes a workstation spreads a scenario over use it,
while the Lambda layer and the benchmark image (one process each) neither carry nor import it."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh uvloop event loop (asyncio.run's contract)."""
    import uvloop  # the client extra: imported where a loop is started, not where the engine loads

    return uvloop.run(main)
