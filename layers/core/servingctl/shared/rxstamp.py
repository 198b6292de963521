"""Kernel receive timestamps of a TCP socket (Linux SO_TIMESTAMPNS): when a read's bytes reached
the socket, whatever the event loop was doing then, moved onto the caller's monotonic clock.

A recvmsg's stamp is that of the last segment it read (segments that wait together are merged by
the kernel, which keeps the newest stamp), on the wall clock; its age (wall now minus stamp) is
subtracted from the caller's clock now, so the result is on that clock and no wall-clock step
between two reads can move it. Elsewhere than Linux, SUPPORTED is False and callers read as usual.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Callable

SUPPORTED = sys.platform == "linux"
# asm-generic/socket.h, also the cmsg type; Python's socket module does not name it.
SO_TIMESTAMPNS = 35
_CMSG_SPACE = socket.CMSG_SPACE(16)  # one struct timespec
_TIMESPEC = struct.Struct("qq")


def enable(sock: socket.socket) -> None:
    """Stamp every segment this socket receives (on a listener: its accepted sockets too)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def recv_stamped(
    sock: socket.socket, size: int, clock: Callable[[], int] = time.monotonic_ns, flags: int = 0
) -> tuple[bytes, int]:
    """One recvmsg: (bytes, the arrival of the last segment read, on `clock`; clock() when the
    kernel gave no stamp). Raises what recvmsg raises (BlockingIOError when nothing is there)."""
    data, wall_ns = _recv(sock, size, flags)
    return data, _on_clock(wall_ns, clock)


def _recv(sock: socket.socket, size: int, flags: int) -> tuple[bytes, int | None]:
    """recvmsg: the bytes and the kernel's wall-clock ns stamp of the last segment read (None if none)."""
    data, ancdata, _, _ = sock.recvmsg(size, _CMSG_SPACE, flags)
    for level, kind, value in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack_from(value)
            return data, sec * 1_000_000_000 + nsec
    return data, None


# Readings of the wall clock around the caller's: a pair this close is taken at once, else the
# closest of PAIRS (a preemption between the two clocks' readings would move the stamp by as much).
TIGHT_PAIR_NS = 20_000
PAIRS = 3


def _on_clock(wall_ns: int | None, clock: Callable[[], int]) -> int:
    """A kernel stamp moved onto `clock` by its age; clock() itself without one."""
    if wall_ns is None:
        return clock()
    pairs = []  # (gap, clock now, wall now)
    for _ in range(PAIRS):
        before = time.time_ns()
        now = clock()
        after = time.time_ns()
        pairs.append((after - before, now, (before + after) // 2))
        if after - before <= TIGHT_PAIR_NS:
            break
    _, now, wall_now = min(pairs)
    return now - max(0, wall_now - wall_ns)
