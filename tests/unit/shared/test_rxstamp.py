"""Kernel receive stamps: when a read's bytes reached the socket, on the caller's clock."""

import socket
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
    return sender, receiver


def test_a_read_is_stamped_when_its_bytes_arrived_not_when_it_ran():
    sender, receiver = _tcp_pair()
    with sender, receiver:
        written = time.monotonic_ns()
        sender.sendall(b"first token")
        time.sleep(0.1)
        read = time.monotonic_ns()
        data, arrived = rxstamp.recv_stamped(receiver, 100)
    # Stamped between the write and the read that came 100 ms later: bounds that hold however long a
    # busy machine preempts either side (a stamp taken at the read would be at or after `read`).
    assert data == b"first token" and written <= arrived < read


def test_segments_that_waited_together_read_as_one_with_the_last_ones_time():
    sender, receiver = _tcp_pair()
    with sender, receiver:
        sender.sendall(b"one ")
        time.sleep(0.05)
        last = time.monotonic_ns()
        sender.sendall(b"two")
        time.sleep(0.05)
        read = time.monotonic_ns()
        data, arrived = rxstamp.recv_stamped(receiver, 100)
    # the kernel merged the waiting segments and kept the newest stamp: the earlier one's is gone
    assert data == b"one two" and last <= arrived < read


def test_end_of_stream_reads_empty():
    sender, receiver = _tcp_pair()
    with receiver:
        sender.close()
        assert rxstamp.recv_stamped(receiver, 100)[0] == b""
