"""The --debug-timings server's writes leave when the app sends them, in order: into an empty
transport buffer straight to the socket, behind queued data through the transport."""

import socket

from servingctl_twin.simserver.server import _WriteNow


class _Transport:
    """A transport's write side: what it queued, and how much is still unwritten."""

    def __init__(self, queued: int = 0, closing: bool = False) -> None:
        self.queued, self.closing, self.writes = queued, closing, []

    def get_write_buffer_size(self) -> int:
        return self.queued

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_an_empty_buffer_sends_at_once_without_the_loop():
    ours, peer = socket.socketpair()
    with ours, peer:
        transport = _Transport()
        _WriteNow(transport, ours).write(b"data: first\n\n")
        assert peer.recv(100) == b"data: first\n\n" and transport.writes == []  # no loop turn ran


def test_queued_data_keeps_its_place_and_the_rest_is_queued_behind_it():
    ours, peer = socket.socketpair()
    with ours, peer:
        behind = _Transport(queued=10)
        _WriteNow(behind, ours).write(b"second")
        assert behind.writes == [b"second"]
        closing = _Transport(closing=True)
        _WriteNow(closing, ours).write(b"late")
        assert closing.writes == [b"late"]
        # what the socket does not take now goes to the transport, after what it took
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        full = _Transport()
        big = bytes(range(256)) * 4096
        _WriteNow(full, ours).write(big)
        taken = len(big) - len(full.writes[0])
        assert 0 < taken < len(big) and full.writes[0] == big[taken:]
        got = b""
        while len(got) < taken:
            got += peer.recv(1 << 20)
        assert got == big[:taken]
        # everything else is the transport's
        assert _WriteNow(full, ours).get_extra_info("peername") == "info:peername"
