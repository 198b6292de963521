"""Engine behaviour seen over HTTP: prefix cache and cache_salt, max-num-seqs queueing, speed."""

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from servingctl_twin.simserver import SimConfig

LONG = "This is deterministic benchmark input text. " * 300  # about 2,100 tokens


def _cache_delta(api, bodies):
    before = api.scrape()
    for body in bodies:
        api.stream(body)
    after = api.scrape()
    return {
        name: api.metric(after, name) - api.metric(before, name)
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
    }


def test_repeated_long_prompt_without_salt_hits_the_prefix_cache(api):
    delta = _cache_delta(api, [api.body(LONG + "unsalted", max_tokens=4)] * 2)
    prompt_tokens = api.post("/tokenize", json={"messages": [{"role": "user", "content": LONG + "unsalted"}]}).json()
    assert delta["vllm:prefix_cache_queries_total"] == 2 * prompt_tokens["count"]
    # The second request reuses every full block but the one holding its last token.
    assert delta["vllm:prefix_cache_hits_total"] == (prompt_tokens["count"] - 1) // 16 * 16


def test_unique_salts_get_no_hits(api):
    bodies = [api.body(LONG + "salted", max_tokens=4, cache_salt=f"run-1-req-{i}") for i in range(3)]
    delta = _cache_delta(api, bodies)
    assert delta["vllm:prefix_cache_queries_total"] > 0
    assert delta["vllm:prefix_cache_hits_total"] == 0


def test_same_salt_shares_the_cache(api):
    bodies = [api.body(LONG + "shared salt", max_tokens=4, cache_salt="tenant-a")] * 2
    assert _cache_delta(api, bodies)["vllm:prefix_cache_hits_total"] > 0


def test_prefix_hit_shortens_ttft_in_the_timing_model():
    config = SimConfig()
    tokens = 2100
    assert config.expected_ttft_s(tokens, cached_tokens=2080) < config.expected_ttft_s(tokens) / 1.5


def test_max_num_seqs_queues_requests_and_ttft_grows(make_api):
    api = make_api(SimConfig(speed=5, max_num_seqs=1))
    bodies = [api.body(f"queued {i}", max_tokens=200, cache_salt=str(i)) for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(api.stream, bodies))
    for result in results:
        assert result.events[-1]["usage"]["completion_tokens"] == 200
    ttfts = sorted(r.first_content_time() for r in results)
    # One sequence at a time: a generation takes ~0.3 s here, so the last request served waits
    # ~0.6 s longer than the first. Half of that as the bound leaves room for a loaded machine.
    assert ttfts[2] > ttfts[0] + 0.3


def test_waiting_requests_show_in_metrics(make_api):
    # Near real time with few chunks (about 0.6 s per request): the in-process client threads share
    # the GIL with the server, so a fast, chunk-heavy run would starve the poller.
    api = make_api(SimConfig(speed=2, max_num_seqs=2))
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(api.stream, api.body(f"w{i}", max_tokens=150)) for i in range(3)]
        seen = []
        with httpx.Client() as client:
            while not all(f.done() for f in futures):
                text = client.get(f"{api.url}/metrics").text
                running = [ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running")]
                waiting = [ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_waiting")]
                seen.append((float(running[0].split()[-1]), float(waiting[0].split()[-1])))
                time.sleep(0.01)
        for f in futures:
            f.result()
    assert max(r for r, _ in seen) == 2  # never more than max-num-seqs in the batch
    assert max(w for _, w in seen) >= 1  # the rest waited


def test_speed_factor_scales_wall_time(make_api):
    slow, fast = make_api(SimConfig(speed=5)), make_api(SimConfig(speed=100))
    body = slow.body("timing", max_tokens=60)
    slow_e2e = (lambda r: r.times[-1] - r.start)(slow.stream(body))
    fast_e2e = (lambda r: r.times[-1] - r.start)(fast.stream(body))
    assert slow_e2e > 3 * fast_e2e  # 20x apart in theory; generous margin
