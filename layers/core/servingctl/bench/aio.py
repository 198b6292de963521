"""The benchmark client's event loop: uvloop (libuv, in C) runs each network read's callback with
less CPU and less lag than asyncio's selector loop, and a streaming client pays that per read.
Also the garbage collector's pause while a load runs."""

from __future__ import annotations

import gc
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh uvloop event loop (asyncio.run's contract)."""
    return uvloop.run(main)


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
