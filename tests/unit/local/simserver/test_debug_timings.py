"""--debug-timings: the simulator tells when each stream arrived and when its first chunks left, on
the system-wide monotonic clock, so a client benchmark can measure its own TTFT error."""

import json
import time

import httpx

from servingctl.local.simserver import SimConfig, running


def _stream(client: httpx.Client, salt: str) -> tuple[int, int, int]:
    """Send one streaming request; return (sent ns, first content chunk ns, end ns) on our clock."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8,
            "ignore_eos": True, "stream": True, "cache_salt": salt}
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
        # Same clock in both processes' view: the server's instants fall inside the client's.
        assert sent <= s["received_ns"] <= s["first_chunk_sent_ns"] <= s["first_content_sent_ns"] <= first <= end


def test_debug_timings_route_is_off_by_default():
    with running(SimConfig(model="m", speed=20)) as url:
        assert httpx.get(f"{url}/debug/timings").status_code == 404
