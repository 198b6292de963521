"""Kernel receive stamps: when a read's bytes reached the socket, on the caller's clock."""

import fcntl
import socket
import struct
import termios
import time

import pytest

from servingctl.shared import rxstamp

pytestmark = pytest.mark.skipif(not rxstamp.SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        rxstamp.enable(listener)  # accepted sockets inherit it
        sender = socket.create_connection(listener.getsockname())
        receiver, _ = listener.accept()
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one write, one segment
    receiver.settimeout(10)
    _until_stamped(sender, receiver)
    return sender, receiver


def _until_stamped(sender: socket.socket, receiver: socket.socket) -> None:
    """Until the kernel stamps this socket's segments: the first socket asking turns stamping on
    for the machine through a deferred work item (net_enable_timestamp), which a busy machine runs
    late; segments received before it carry no stamp. At most 10 s."""
    deadline = time.monotonic() + 10
    while True:
        sender.sendall(b".")
        _, stamp = rxstamp._recv(receiver, 1, 0)
        if stamp is not None:
            return
        assert time.monotonic() < deadline, "the kernel did not stamp received segments within 10 s"
        time.sleep(0.01)


def _wait_queued(sock: socket.socket, size: int) -> None:
    """Until size bytes wait in the socket's receive queue (FIONREAD), at most 10 s."""
    deadline = time.monotonic() + 10
    while struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0\0\0\0"))[0] < size:
        assert time.monotonic() < deadline, f"{size} bytes did not arrive in 10 s"
        time.sleep(0.001)


def test_a_read_is_stamped_when_its_bytes_arrived_not_when_it_ran():
    sender, receiver = _tcp_pair()
    with sender, receiver:
        written = time.monotonic_ns()
        sender.sendall(b"first token")
        # On a busy machine loopback delivery itself can lag: wait until the bytes are there, then read late.
        _wait_queued(receiver, len(b"first token"))
        time.sleep(0.1)
        read = time.monotonic_ns()
        data, arrived = rxstamp.recv_stamped(receiver, 100)
    # Stamped between the write and the read that came 100 ms after the bytes arrived: bounds that hold
    # however long a busy machine preempts either side (a stamp taken at the read would be at or after `read`).
    # The kernel stamps on the wall clock; moving it onto the monotonic clock reads both clocks one after
    # the other, which puts it a few microseconds early or late: 1 ms is allowed below the write.
    assert data == b"first token" and written - 1_000_000 <= arrived < read


def test_segments_that_waited_together_read_as_one_with_the_last_ones_time():
    sender, receiver = _tcp_pair()
    with sender, receiver:
        sender.sendall(b"one ")
        time.sleep(0.05)
        last = time.monotonic_ns()
        sender.sendall(b"two")
        time.sleep(0.05)
        _wait_queued(receiver, len(b"one two"))
        read = time.monotonic_ns()
        data, arrived = rxstamp.recv_stamped(receiver, 100)
    # the kernel merged the waiting segments and kept the newest stamp: the earlier one's (50 ms before)
    # is gone; 1 ms allowed for moving the stamp onto the monotonic clock, as above
    assert data == b"one two" and last - 1_000_000 <= arrived < read


def test_end_of_stream_reads_empty():
    sender, receiver = _tcp_pair()
    with receiver:
        sender.close()
        assert rxstamp.recv_stamped(receiver, 100)[0] == b""


def test_a_preemption_between_the_clock_readings_does_not_move_the_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first pair of wall readings straddles a 2 ms preemption; the second is tight: it is the one used.
    walls = iter([1_000_000_000, 1_002_000_000, 1_002_000_100, 1_002_000_110])
    monkeypatch.setattr(rxstamp.time, "time_ns", lambda: next(walls))
    clocks = iter([500_000_000, 501_999_000])
    # The stamp is 1 ms old at the tight pair: on the caller's clock, 1 ms before its reading.
    assert rxstamp._on_clock(1_001_000_105, lambda: next(clocks)) == 501_999_000 - 1_000_000
