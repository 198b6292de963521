"""Fixtures: the simulator served in-process over real HTTP, and an SSE reader for its streams."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from servingctl_twin.simserver import SimConfig, running

MODEL = SimConfig().model


@dataclass
class StreamResult:
    """What a client saw on one stream: parsed events with arrival times, raw lines and the end."""

    events: list[dict] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)
    done: bool = False
    start: float = 0.0

    @property
    def content_chunks(self) -> list[dict]:
        """Events carrying choices (role, content and final chunks)."""
        return [e for e in self.events if e["choices"]]

    def first_content_time(self) -> float:
        """Seconds from request to the first chunk with non-empty content."""
        for event, t in zip(self.events, self.times, strict=True):
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                return t - self.start
        raise AssertionError("no content chunk")


def chat_body(content: str = "Tell me about serving.", **extra) -> dict:
    """A chat request in the reference benchmark's shape."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 32,
        "ignore_eos": True,
        "temperature": 0,
        "seed": 42,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    body.update(extra)
    return body


def read_stream(client: httpx.Client, url: str, body: dict) -> StreamResult:
    """POST a streaming chat request and parse every SSE line."""
    result = StreamResult(start=time.monotonic())
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                result.done = True
                continue
            try:
                result.events.append(json.loads(payload))
                result.times.append(time.monotonic())
            except ValueError:
                result.bad_lines.append(line)
    return result


def scrape(client: httpx.Client, url: str) -> dict[str, float]:
    """/metrics as {series: value} (label sets kept in the key)."""
    out = {}
    for line in client.get(f"{url}/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    """Sum of a metric's series matching ``labels``."""
    total = 0.0
    for key, value in values.items():
        if key.split("{")[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += value
    return total


class Api:
    """Test-side view of one simulator: the helpers above bound to its URL and a client."""

    MODEL = MODEL
    body = staticmethod(chat_body)
    metric = staticmethod(metric)

    def __init__(self, url: str, client: httpx.Client) -> None:
        self.url, self.client = url, client

    def stream(self, body: dict) -> StreamResult:
        """Run one streaming request."""
        return read_stream(self.client, self.url, body)

    def scrape(self) -> dict[str, float]:
        """Read /metrics."""
        return scrape(self.client, self.url)

    def post(self, path: str, **kwargs) -> httpx.Response:
        """POST to a path of the simulator."""
        return self.client.post(self.url + path, **kwargs)

    def get(self, path: str) -> httpx.Response:
        """GET a path of the simulator."""
        return self.client.get(self.url + path)


@contextmanager
def served(*flags: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m servingctl_twin.simserver FLAGS` on a free port, as its own process, once healthy:
    yields (base URL, process); terminated afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "servingctl_twin.simserver", "--port", str(port), *flags])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    """A fast simulator with the reference defaults (4 sequences, MTP 1)."""
    with running(SimConfig(speed=100)) as url:
        yield url


@pytest.fixture
def api(sim: str) -> Iterator[Api]:
    """Helpers bound to the module's simulator."""
    with httpx.Client(timeout=30) as client:
        yield Api(sim, client)


@pytest.fixture
def make_api() -> Iterator:
    """Start a simulator with a custom config; returns its Api (stopped after the test)."""
    stack = []

    def make(config: SimConfig) -> Api:
        cm = running(config)
        url = cm.__enter__()
        client = httpx.Client(timeout=30)
        stack.append((cm, client))
        return Api(url, client)

    yield make
    for cm, client in stack:
        client.close()
        cm.__exit__(None, None, None)
