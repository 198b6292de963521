"""--debug-timings: the simulator tells when each stream arrived and when its first chunks left, on
the system-wide monotonic clock, so a client benchmark can measure its own TTFT error."""

import asyncio
import json
import socket
import time

import httpx
import pytest

from servingctl.loadgen.backend import Backend, ChatRequest, Connection
from servingctl.loadgen.metrics import per_read, with_request_metrics
from servingctl_twin.simserver import SimConfig, running


def _stream(client: httpx.Client, salt: str) -> tuple[int, int, int]:
    """Send one streaming request; return (sent ns, first content chunk ns, end ns) on our clock."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
        "cache_salt": salt,
    }
    sent = time.monotonic_ns()
    first = None
    with client.stream("POST", "/v1/chat/completions", json=body, headers={"x-request-id": f"req-{salt}"}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and first is None and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                first = time.monotonic_ns()
    return sent, first, time.monotonic_ns()


def test_debug_timings_bracket_what_the_client_saw():
    with running(SimConfig(model="m", speed=20, mtp_tokens=0, debug_timings=True)) as url, httpx.Client(base_url=url) as client:
        seen = {salt: _stream(client, salt) for salt in ("a", "b")}
        streams = client.get("/debug/timings").json()["streams"]
    assert sorted(s["cache_salt"] for s in streams) == ["a", "b"]
    for s in streams:
        sent, first, end = seen[s["cache_salt"]]
        assert s["x_request_id"] == f"req-{s['cache_salt']}"
        assert s["completion_tokens"] == 8
        # Same clock in both processes' view: the server's instants fall inside the client's. The
        # server stamps a write after it, so a busy machine may run the client's read of the first
        # content before that stamp; the server's later writes, and so the client's end, come after.
        assert sent <= s["received_ns"] <= s["first_chunk_sent_ns"] <= s["first_content_sent_ns"] < end
        assert sent < first < end


def test_debug_timings_route_is_off_by_default():
    with running(SimConfig(model="m", speed=20)) as url:
        assert httpx.get(f"{url}/debug/timings").status_code == 404


def test_received_is_when_the_first_bytes_arrived_not_when_the_app_ran():
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "ignore_eos": True,
            "stream": True,
            "cache_salt": "split",
        }
    ).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    with running(SimConfig(model="m", speed=50, mtp_tokens=0, debug_timings=True)) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sent = time.monotonic_ns()
            sock.sendall(head % len(body))
            time.sleep(0.2)  # the body comes later: the app cannot run before it
            body_sent = time.monotonic_ns()
            sock.sendall(body)
            while not sock.recv(65536).endswith(b"0\r\n\r\n"):
                pass
        (s,) = httpx.get(f"{url}/debug/timings").json()["streams"]
    assert sent <= s["received_ns"] < body_sent <= s["first_chunk_sent_ns"]


def test_pace_sends_one_event_per_write_at_least_pace_apart():
    async def stream(url):
        async with Backend(Connection(url), "m", max_connections=1) as backend:
            return await backend.stream_chat(ChatRequest("s", 0, 0, False, "hello"), max_tokens=6, seed=1, t0=0)

    with running(SimConfig(model="m", speed=1000, mtp_tokens=0, pace_ms=25)) as url:
        record = with_request_metrics(asyncio.run(stream(url)))
    # the engine is done within ~6 ms (1000 tok/s), yet each token leaves in its own event, 25 ms after
    # the one before: the stream lasts at least 5 paces. Reads, not the server, decide how many events
    # one read brings (a busy client coalesces them): the stream's length is what the client can check.
    assert record.ok and record.completion_tokens == 6 and len(record.chunks) == 6
    assert record.e2e_ms is not None and record.e2e_ms >= 5 * 25


@pytest.mark.parametrize(("phase", "in_step"), [("step", True), ("stream", False)])
def test_paced_streams_write_at_the_engine_s_steps_or_each_in_its_own_phase(phase, in_step):
    async def two_streams(url):
        async with Backend(Connection(url), "m", max_connections=2) as backend:
            await backend.warm(2)
            first = asyncio.create_task(backend.stream_chat(ChatRequest("s", 0, 0, False, "a"), max_tokens=4, seed=1, t0=0))
            await asyncio.sleep(0.1)  # half a pace later: out of phase, unless writes wait for the step
            second = await backend.stream_chat(ChatRequest("s", 0, 1, False, "b"), max_tokens=4, seed=1, t0=0)
            return await first, second

    with running(SimConfig(model="m", speed=1000, mtp_tokens=0, pace_ms=200, pace_phase=phase)) as url:
        first, second = asyncio.run(two_streams(url))
    assert first.completion_tokens == second.completion_tokens == 4
    # vLLM's engine advances every running sequence in one step, so their events leave together
    # (measured against vLLM on CPU: bursts of c reads within 0.5-3 ms); the second stream's reads
    # then land in the first's phase (a whole number of paces after its first read), not 100 ms
    # (half a pace) off it
    phase = per_read(first.chunks)[0][0]
    offsets_ms = [min((t - phase) % 200e6, -(t - phase) % 200e6) / 1e6 for t, _ in per_read(second.chunks)]
    assert all(offset < 50 for offset in offsets_ms) is in_step, offsets_ms
    assert all(offset > 50 for offset in offsets_ms) is not in_step, offsets_ms


def test_batch_writes_with_pace_send_what_is_pending_at_most_every_pace():
    async def stream(url):
        async with Backend(Connection(url), "m", max_connections=1) as backend:
            return await backend.stream_chat(ChatRequest("s", 0, 0, False, "hello"), max_tokens=40, seed=1, t0=0)

    with running(SimConfig(model="m", speed=10, mtp_tokens=0, pace_ms=300, pace_phase="stream", batch_writes=True)) as url:
        record = with_request_metrics(asyncio.run(stream(url)))
    # the engine makes the 40 tokens in about 40 ms: the first write takes what is there, the next one,
    # a pace later, all the rest (one event per write would take 40 paces, 12 s)
    assert record.ok and record.completion_tokens == 40
    reads = per_read(record.chunks)
    # a pace apart, as the client stamps them: a late stamp of the first read on a busy machine
    # shortens the gap (seen: 299.998 ms), back-to-back writes would be ~0
    assert len(reads) == 2 and reads[1][0] - reads[0][0] >= 250e6


def test_a_paced_stream_counts_as_running_until_written_out():
    def running_gauge(url):
        text = httpx.get(f"{url}/metrics").text
        (line,) = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running{")]
        return float(line.rsplit(" ", 1)[1])

    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "ignore_eos": True, "stream": True}
    with running(SimConfig(model="m", speed=1000, mtp_tokens=0, pace_ms=100)) as url, httpx.Client(base_url=url) as client:
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # streaming; the engine is long done
            time.sleep(0.2)
            during = running_gauge(url)  # 8 paces take 0.8 s: the server is still "generating"
            assert [line for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
        after = running_gauge(url)
    assert (during, after) == (1.0, 0.0)
