"""Running the simulator: in the foreground (``serve``) or in a background thread for tests."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from servingctl.local.simserver.app import ARRIVAL_NS, StreamCut, create_app
from servingctl.local.simserver.config import SimConfig


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
        """Stamp, then parse."""
        self.arrival_ns = time.monotonic_ns()
        super().data_received(data)

    def on_message_begin(self) -> None:
        """A new request: carry the arrival stamp in its scope."""
        super().on_message_begin()
        self.scope["extensions"] = {ARRIVAL_NS: self.arrival_ns}  # type: ignore[typeddict-unknown-key]


def _server(config: SimConfig, log_level: str) -> uvicorn.Server:
    logging.getLogger("uvicorn.error").addFilter(_HideInjectedCuts())
    uv_config = uvicorn.Config(
        create_app(config),
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_keep_alive=300,  # like the reference ALB idle timeout: benchmark pools stay warm
        backlog=4096,
        http=_StampingProtocol,
    )
    return uvicorn.Server(uv_config)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def serve(host: str = "127.0.0.1", port: int = 8000, config: SimConfig | None = None,
          log_level: str = "info") -> None:
    """Serve in the foreground until interrupted."""
    config = config or SimConfig()
    sock = _bind(host, port)
    server = _server(config, log_level)
    print(f"servingctl simulator serving {config.model!r} on http://{host}:{sock.getsockname()[1]} "
          f"(speed x{config.speed}, max-num-seqs {config.max_num_seqs}, mtp {config.mtp_tokens})", flush=True)
    server.run(sockets=[sock])


@contextmanager
def running(config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Context manager: the simulator in a background thread; yields its base URL."""
    url, stop = run_in_thread(config, host=host, port=port)
    try:
        yield url
    finally:
        stop()


def run_in_thread(config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0,
                  timeout: float = 10.0) -> tuple[str, Callable[[], None]]:
    """Start the simulator in a daemon thread; return (base URL, stop function)."""
    sock = _bind(host, port)
    server = _server(config or SimConfig(), "warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="simserver", daemon=True)
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
