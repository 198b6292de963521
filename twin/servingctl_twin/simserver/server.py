"""Running the simulator: in the foreground (``serve``) or in a background thread for tests."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from servingctl.shared import rxstamp
from servingctl_twin.simserver.app import ARRIVAL_NS, StreamCut, create_app
from servingctl_twin.simserver.config import SimConfig


class _HideInjectedCuts(logging.Filter):
    """Drop uvicorn's traceback for the stream-cut fault: the cut is the point, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamCut))


class _StampingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that stamps each read on arrival, before parsing, and hands a
    request the stamp of the read that began it (scope extension ARRIVAL_NS): the TTFT reference
    of --debug-timings then holds no parsing and no wait for the app task to be scheduled."""

    arrival_ns = 0

    def data_received(self, data: bytes) -> None:
        """A read from the loop's transport: stamped now."""
        self.received(data, time.monotonic_ns())

    def received(self, data: bytes, arrival_ns: int) -> None:
        """Stamp, then parse."""
        self.arrival_ns = arrival_ns
        super().data_received(data)

    def on_message_begin(self) -> None:
        """A new request: carry the arrival stamp in its scope."""
        super().on_message_begin()
        self.scope["extensions"] = {ARRIVAL_NS: {"ns": self.arrival_ns}}


_READ_SIZE = 65536


class _KernelReads:
    """Reads one connection with recvmsg instead of the loop's transport, so each read carries the
    kernel's receive time (shared.rxstamp): a request that waits in its socket while the simulator's
    one loop writes other streams' events is stamped when it arrived, not when the loop got to it.
    uvicorn's read pauses toggle this reader; at end of stream or on an error the transport reads
    again and closes the connection its usual way."""

    def __init__(self, protocol: _StampingProtocol, transport: asyncio.Transport) -> None:
        """Dup the connection's socket; reading starts with take()."""
        raw = transport.get_extra_info("socket")  # stamps on: accepted sockets inherit the listener's option
        self.sock = socket.socket(raw.family, raw.type, fileno=os.dup(raw.fileno()))
        self._protocol, self._transport = protocol, transport
        self._loop = asyncio.get_running_loop()
        self._own = self._paused = self._reading = False

    def take(self) -> None:
        """Read from here on (the loop starts its transport reading only after connection_made)."""
        if self._transport.is_closing() or self.sock.fileno() < 0:
            return
        self._transport.pause_reading()
        self._own = True
        self._set_reading(not self._paused)

    def pause_reading(self) -> None:
        """uvicorn's flow control: stop reading."""
        self._paused = True
        if self._own:
            self._set_reading(False)
        else:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        """uvicorn's flow control: read again."""
        self._paused = False
        if self._own:
            self._set_reading(True)
        else:
            self._transport.resume_reading()

    def close(self) -> None:
        """The connection is gone: stop reading and drop the dup."""
        self._set_reading(False)
        self._own = False
        self.sock.close()

    def _set_reading(self, on: bool) -> None:
        if on and not self._reading:
            self._loop.add_reader(self.sock.fileno(), self._read)
        elif not on and self._reading:
            self._loop.remove_reader(self.sock.fileno())
        self._reading = on

    def _hand_back(self) -> None:
        self._set_reading(False)
        self._own = False
        if not self._paused:
            self._transport.resume_reading()

    def peek_arrival(self) -> int | None:
        """The kernel's receive time of bytes already waiting in the socket, left unread; None if none."""
        try:
            data, arrival_ns = rxstamp.recv_stamped(self.sock, 1, flags=socket.MSG_PEEK)
        except OSError:
            return None
        return arrival_ns if data else None

    def _read(self) -> None:
        try:
            data, arrival_ns = rxstamp.recv_stamped(self.sock, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # end of stream or an error: the transport meets it and closes as usual
            self._hand_back()
            return
        self._protocol.received(data, arrival_ns)


class _WriteNow:
    """A connection's transport whose writes into an empty buffer go to the socket at once: uvloop
    queues writes until the end of the loop's turn, after every other callback of that turn, so a
    stamp taken after send() would precede the bytes leaving by that much. Data already queued
    keeps the transport's order; what the socket does not take now is queued behind it."""

    def __init__(self, transport: asyncio.Transport, sock: socket.socket) -> None:
        """Wrap the transport; `sock` is (a dup of) its socket."""
        self._transport, self._sock = transport, sock

    def write(self, data: bytes) -> None:
        """Send now if nothing is queued, queue the rest."""
        if self._transport.get_write_buffer_size() == 0 and not self._transport.is_closing():
            try:
                sent = self._sock.send(data)
            except OSError:  # would block, or an error the transport meets on its own write
                sent = 0
            data = data[sent:]
        if data:
            self._transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


class _KernelStampingProtocol(_StampingProtocol):
    """_StampingProtocol whose reads carry the kernel's receive time and whose writes leave when
    the app sends them (Linux): --debug-timings' reference instants hold no event-loop lag."""

    _reads: _KernelReads | None = None
    _waiting_ns: int | None = None

    # uvicorn's protocol takes a Transport where asyncio's declares a BaseTransport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Set up the kernel-stamped reader; it takes over once the transport has started reading."""
        super().connection_made(transport)
        self._reads = _KernelReads(self, transport)
        # Both stand in for the transport by duck typing: FlowControl only pauses and resumes reading
        # (the reader's to do now), and _WriteNow delegates all but write().
        self.flow = FlowControl(self._reads)  # type: ignore[arg-type]
        self.transport = _WriteNow(transport, self._reads.sock)  # type: ignore[assignment]
        # Until take() runs (the loop's next turn) the transport reads: a busy server accepts late,
        # when the first request may already be waiting, so its kernel stamp is peeked now.
        self._waiting_ns = self._reads.peek_arrival()
        self.loop.call_soon(self._reads.take)

    def data_received(self, data: bytes) -> None:
        """A read by the transport before the reader took over: bytes that waited keep their peeked stamp."""
        arrival_ns, self._waiting_ns = self._waiting_ns or time.monotonic_ns(), None
        self.received(data, arrival_ns)

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the reader with the connection."""
        if self._reads is not None:
            self._reads.close()
        super().connection_lost(exc)


def _server(config: SimConfig, log_level: str) -> uvicorn.Server:
    logging.getLogger("uvicorn.error").addFilter(_HideInjectedCuts())
    uv_config = uvicorn.Config(
        create_app(config),
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_keep_alive=300,  # like the reference ALB idle timeout: benchmark pools stay warm
        backlog=4096,
        http=_KernelStampingProtocol if _kernel_stamps(config) else _StampingProtocol,
    )
    return uvicorn.Server(uv_config)


def _kernel_stamps(config: SimConfig) -> bool:
    """Kernel receive stamps where the reference needs them (--debug-timings) and Linux has them."""
    return config.debug_timings and rxstamp.SUPPORTED


def _bind(host: str, port: int, config: SimConfig) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if _kernel_stamps(config):  # on the listener, so bytes that arrive before accept() are stamped too
        rxstamp.enable(sock)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def serve(host: str = "127.0.0.1", port: int = 8000, config: SimConfig | None = None, log_level: str = "info") -> None:
    """Serve in the foreground until interrupted."""
    config = config or SimConfig()
    sock = _bind(host, port, config)
    server = _server(config, log_level)
    print(
        f"servingctl simulator serving {config.model!r} on http://{host}:{sock.getsockname()[1]} "
        f"(speed x{config.speed}, max-num-seqs {config.max_num_seqs}, mtp {config.mtp_tokens})",
        flush=True,
    )
    server.run(sockets=[sock])


@contextmanager
def running(config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Context manager: the simulator in a background thread; yields its base URL."""
    url, stop = run_in_thread(config, host=host, port=port)
    try:
        yield url
    finally:
        stop()


def run_in_thread(
    config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0, timeout: float = 10.0
) -> tuple[str, Callable[[], None]]:
    """Start the simulator in a daemon thread; return (base URL, stop function)."""
    config = config or SimConfig()
    sock = _bind(host, port, config)
    server = _server(config, "warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="simserver", daemon=True)
    thread.start()
    for _ in range(int(timeout / 0.01)):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.01)
    if not server.started:
        raise RuntimeError("simulator server did not start")
    url = f"http://{host}:{sock.getsockname()[1]}"

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout)
        sock.close()

    return url, stop
