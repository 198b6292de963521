"""The runner against a managed-API-like fake (no /tokenize, no /metrics, no /version): usage
calibration, checks unavailable rather than failed, one scenario runnable on its own."""

import asyncio
import gc
import json

import httpx

from servingctl.loadgen.backend import Connection
from servingctl.loadgen.calibration import UNIT
from servingctl.loadgen.runner import run_benchmark, run_scenario
from servingctl.schema.results import Calibration, RunConfig


def managed_api(fail_every: int = 0):
    """Counts prompt tokens as 3 + 9 per unit sentence; streams max_tokens one-token chunks."""
    calls = {"chat": 0, "salts": []}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404, json={"error": "not found"})
        body = json.loads(request.content)
        prompt = 3 + 9 * body["messages"][0]["content"].count(UNIT)
        if not body["stream"]:
            return httpx.Response(200, json={"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1}})
        calls["chat"] += 1
        calls["salts"].append(body.get("cache_salt"))
        if fail_every and calls["chat"] % fail_every == 0:
            return httpx.Response(429, json={"error": "rate limited"})
        n = body["max_tokens"]
        events = [{"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
        events += [
            {"choices": [{"delta": {"content": "x"}, "finish_reason": "length" if i == n - 1 else None}]} for i in range(n)
        ]
        events += [{"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": n}}]
        lines = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]

        async def stream():  # streamed like a network body, one read per event
            for line in lines:
                yield line

        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler), calls


def test_sweep_against_a_managed_api_without_metrics_or_tokenize():
    transport, calls = managed_api()
    config = RunConfig(
        endpoint="https://api.example.com/v1",
        model="m",
        input_tokens=[100],
        concurrencies=[1, 2],
        warmup=1,
        rounds=2,
        max_tokens=5,
    )
    run = asyncio.run(run_benchmark(config, api_key="sk", transport=transport, run_id="r1"))
    assert run.exit_code == 0 and run.metadata.server_version is None
    assert run.calibrations[0].method == "usage" and run.calibrations[0].actual_tokens == 93  # 3 + 9 x 10
    for scenario in run.scenarios:
        s = scenario.summary
        assert s.failed == 0 and s.mismatches.prompt_tokens == 0 and s.mismatches.completion_tokens == 0
        assert s.server.available is False and "metrics" in s.server.reason and s.server.failures == []
        assert not s.token_counts_exact  # no continuous usage stats: flagged approximate
    # warm-ups included, every request had its own salt
    assert len(calls["salts"]) == len(set(calls["salts"])) == (1 + 2) * 1 + (1 + 2) * 2


def test_one_scenario_with_a_given_calibration_counts_failures_by_kind():
    transport, _ = managed_api(fail_every=3)
    config = RunConfig(endpoint="https://api.example.com", model="m", warmup=0, rounds=3, max_tokens=4)
    calibration = Calibration(target_tokens=100, actual_tokens=93, repetitions=10, method="usage", unit=UNIT)
    result = asyncio.run(run_scenario(config, Connection(config.endpoint), calibration, 2, run_id="r1", transport=transport))
    s = result.summary
    assert (s.name, s.requests, s.ok, s.failed) == ("in100-c2", 6, 4, 2)
    assert s.failures_by_kind == {"http_status": 2} and s.failure_rate == 2 / 6
    assert s.failure_examples == {"http_status": 'HTTP 429: {"error":"rate limited"}'}  # what the server said
    assert [r.index for r in result.records] == list(range(6))
    assert len(result.rounds) == 3 and len(s.rounds_output_tok_s) == 3


def test_the_garbage_collector_pauses_while_the_load_runs_and_comes_back_after():
    transport, _ = managed_api()
    config = RunConfig(
        endpoint="https://api.example.com/v1", model="m", input_tokens=[100], concurrencies=[2], warmup=1, rounds=1, max_tokens=5
    )
    seen = []  # gc state at each request's end (request_done is sent from inside the load)

    def progress(event):
        if event.kind == "request_done":
            seen.append((gc.isenabled(), gc.get_freeze_count() > 0))

    assert gc.isenabled()
    run = asyncio.run(run_benchmark(config, api_key="sk", transport=transport, run_id="r1", progress=progress))
    # off, and what was alive before the load frozen out of it; afterwards on, nothing frozen
    assert run.exit_code == 0 and seen == [(False, True)] * 4 and gc.isenabled() and gc.get_freeze_count() == 0
    # a caller that had turned it off keeps it off
    gc.disable()
    try:
        asyncio.run(run_benchmark(config, api_key="sk", transport=transport, run_id="r2"))
        assert not gc.isenabled()
    finally:
        gc.enable()
