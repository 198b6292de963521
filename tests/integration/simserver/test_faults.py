"""Injected faults over real HTTP: error rate, stream cut, stall, malformed lines."""

import time

import httpx
import pytest

from servingctl_twin.simserver import SimConfig, parse_faults


def _api(make_api, *specs):
    return make_api(SimConfig(speed=100, faults=parse_faults(list(specs), seed=1)))


def test_error_rate_one_answers_500_as_openai_error(make_api):
    api = _api(make_api, "error-rate=1")
    response = api.post("/v1/chat/completions", json=api.body())
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "InternalServerError"
    assert api.get("/health").status_code == 200  # the fault hits chat requests only


def test_error_rate_is_a_seeded_fraction(make_api):
    api = _api(make_api, "error-rate=0.5")
    body = api.body(max_tokens=2)
    del body["stream_options"]
    body["stream"] = False
    statuses = [api.post("/v1/chat/completions", json=body).status_code for _ in range(40)]
    assert 5 < statuses.count(500) < 35 and statuses.count(200) == 40 - statuses.count(500)


def test_stream_cut_drops_the_connection_before_done(make_api):
    api = _api(make_api, "stream-cut=1")
    seen = []
    with (
        pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"),
        api.client.stream("POST", f"{api.url}/v1/chat/completions", json=api.body(max_tokens=64)) as r,
    ):
        seen.extend(line for line in r.iter_lines() if line)
    assert seen and "data: [DONE]" not in seen
    assert api.metric(api.scrape(), "vllm:num_requests_running") == 0
    assert api.get("/health").status_code == 200  # the server itself is fine


def test_stall_pauses_once_mid_stream(make_api):
    api = _api(make_api, "stall=0.4")
    result = api.stream(api.body(max_tokens=64))
    gaps = [b - a for a, b in zip(result.times, result.times[1:], strict=False)]
    assert result.done and result.events[-1]["usage"]["completion_tokens"] == 64
    # The stall is a 0.4 s sleep; chunks otherwise come every ~0.1 ms: wide margins both ways.
    assert sum(gap >= 0.3 for gap in gaps) == 1


def test_malformed_line_then_the_stream_goes_on(make_api):
    api = _api(make_api, "malformed=1")
    result = api.stream(api.body(max_tokens=64))
    assert len(result.bad_lines) == 1
    assert result.done and result.events[-1]["usage"]["completion_tokens"] == 64


def test_no_faults_means_clean_streams(api):
    start = time.monotonic()
    results = [api.stream(api.body(max_tokens=16)) for _ in range(5)]
    assert all(r.done and not r.bad_lines for r in results)
    assert time.monotonic() - start < 30
