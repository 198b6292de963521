"""--debug-timings' arrival stamp is the kernel's receive time: a request that waits in its socket
while the simulator cannot run (a busy loop, here a stopped process) is stamped when it arrived.
The reads that carry the stamp also keep the connection's behaviour: keep-alive, pipelining, and a
client that leaves mid-stream."""

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from .conftest import served

MODEL = "tiny"


def _request(salt: str, max_tokens: int = 4) -> bytes:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "cache_salt": salt,
        }
    ).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def _read_streams(sock: socket.socket, count: int) -> bytes:
    """Read until ``count`` chunked responses have ended."""
    data = b""
    while data.count(b"\r\n0\r\n\r\n") < count:
        more = sock.recv(65536)
        assert more, f"connection closed after {data!r}"
        data += more
    return data


@pytest.fixture
def sim() -> Iterator[tuple[str, subprocess.Popen]]:
    """The simulator as its own process (it can be stopped) with --debug-timings."""
    with served("--speed", "50", "--model", MODEL, "--mtp-tokens", "0", "--debug-timings", "--log-level", "warning") as (
        url,
        proc,
    ):
        try:
            yield url, proc
        finally:
            os.kill(proc.pid, signal.SIGCONT)


@contextmanager
def stopped(proc: subprocess.Popen) -> Iterator[None]:
    """The simulator's process cannot run inside (SIGSTOP); it is continued on the way out."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def _assert_stamped_at_arrival(url: str, salt: str, sent: int) -> None:
    s = _timings(url)[salt]
    # arrival is the loopback flight after our send, not the 300 ms later the process read it
    assert 0 <= s["received_ns"] - sent < 100e6
    # and the server really could not answer before it was continued
    assert s["first_chunk_sent_ns"] - sent >= 300e6


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(30)
    # a first request on the connection: the simulator has accepted it and reads it itself
    sock.sendall(_request("warm"))
    _read_streams(sock, 1)
    return sock


def _timings(url: str) -> dict[str, dict]:
    return {s["cache_salt"]: s for s in httpx.get(f"{url}/debug/timings").json()["streams"]}


def test_a_request_waiting_while_the_server_cannot_run_is_stamped_when_it_arrived(sim):
    url, proc = sim
    with _connect(url) as sock:
        with stopped(proc):
            sent = time.monotonic_ns()
            sock.sendall(_request("waited"))
            time.sleep(0.3)  # the bytes sit in the server's socket; its process cannot read them
        _read_streams(sock, 1)
    _assert_stamped_at_arrival(url, "waited", sent)


def test_a_request_on_a_connection_the_server_has_not_accepted_yet_is_stamped_when_it_arrived(sim):
    url, proc = sim
    host, port = url.removeprefix("http://").split(":")
    with stopped(proc):
        sock = socket.create_connection((host, int(port)), timeout=30)  # the kernel completes the handshake
        sent = time.monotonic_ns()
        sock.sendall(_request("unaccepted"))
        time.sleep(0.3)
    with sock:
        _read_streams(sock, 1)
    _assert_stamped_at_arrival(url, "unaccepted", sent)


def test_keep_alive_and_pipelined_requests_are_answered_in_order(sim):
    url, _ = sim
    with _connect(url) as sock:
        sock.sendall(_request("one") + _request("two"))  # two requests in one write: uvicorn pauses reading
        data = _read_streams(sock, 2)
        sock.sendall(_request("three"))
        data += _read_streams(sock, 1)
    assert data.count(b"HTTP/1.1 200 OK") == 3 and data.count(b"data: [DONE]") == 3
    timings = _timings(url)
    assert timings["one"]["received_ns"] <= timings["two"]["received_ns"] <= timings["three"]["received_ns"]
    assert all(timings[s]["completion_tokens"] == 4 for s in ("one", "two", "three"))


def test_a_client_leaving_mid_stream_frees_its_sequence(sim):
    url, _ = sim
    sock = _connect(url)
    sock.sendall(_request("left", max_tokens=5000))
    head = b""
    while b"data: " not in head:  # the stream is under way
        head += sock.recv(65536)
    sock.close()

    def running() -> float:
        for line in httpx.get(f"{url}/metrics").text.splitlines():
            if line.startswith("vllm:num_requests_running"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("no vllm:num_requests_running")

    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running() == 0  # 5000 tokens at speed 50 would take minutes: the server saw the client go
