"""Prometheus text parsing, per-model totals, and the server cross-check verdicts."""

import asyncio
import time
from itertools import pairwise

import pytest

from servingctl.loadgen import server_metrics
from servingctl.loadgen.server_metrics import (
    GENERATION,
    PREFIX_HITS,
    SPEC_ACCEPTED,
    SPEC_DRAFT,
    ServerMetrics,
    Snapshot,
    build_checks,
    model_totals,
    parse_prometheus,
    thinned,
)
from servingctl.schema.results import ServerSample

TEXT = """# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 100.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 28
vllm:generation_tokens_total{engine="0",model_name="other"} 999
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.7e9
vllm:num_requests_running{model_name="tiny",note="a \\"quoted\\", comma"} 3 1700000000000
vllm:prefix_cache_hits_total 16
not a metric line at all
vllm:broken{model_name="tiny" 5
vllm:kv_cache_usage_perc{model_name="tiny"} NaN
"""


def test_parse_labels_escapes_timestamps_and_skip_junk():
    samples = parse_prometheus(TEXT)
    names = [s.name for s in samples]
    assert "vllm:broken" not in names
    running = next(s for s in samples if s.name == "vllm:num_requests_running")
    assert running.value == 3.0
    assert running.labels == {"model_name": "tiny", "note": 'a "quoted", comma'}


def test_totals_sum_label_sets_of_the_model_only():
    totals = model_totals(parse_prometheus(TEXT), "tiny")
    assert totals[GENERATION] == 128.0  # two engines of "tiny", not "other"
    assert totals[PREFIX_HITS] == 16.0  # no model label: counted
    assert "vllm:kv_cache_usage_perc" not in totals  # NaN skipped


def test_name_filter():
    assert [s.name for s in parse_prometheus(TEXT, frozenset({GENERATION}))] == [GENERATION] * 3
    # a longer name that begins with a wanted one is not it; indented and CRLF lines still count
    text = 'vllm:generation_tokens_total_x 5\r\n  vllm:generation_tokens_total 7\r\nvllm:generation_tokens_total{a="b"} 1'
    assert [(s.value, s.labels) for s in parse_prometheus(text, frozenset({GENERATION}))] == [(7.0, {}), (1.0, {"a": "b"})]


def snap(generation, hits=0.0, draft=None, accepted=None):
    totals = {GENERATION: generation, PREFIX_HITS: hits}
    if draft is not None:
        totals |= {SPEC_DRAFT: draft, SPEC_ACCEPTED: accepted}
    return Snapshot(totals=totals)


def checks(before, after, **kw):
    args = {
        "client_completion_tokens": 512,
        "client_prompt_tokens": 0,
        "salted": True,
        "peak_running": 4,
        "running_samples": 20,
        "intended_concurrency": 4,
        "exact_peak": True,
    } | kw
    return build_checks(before, after, **args)


def test_all_checks_pass():
    c = checks(snap(100, 0, 10, 0), snap(612, 0, 310, 198))
    assert c.available and c.generation_tokens_equal and c.prefix_cache_ok and c.peak_running_ok
    assert c.generation_tokens_delta == 512
    assert c.spec_decode_acceptance_rate == 0.66
    assert c.failures == []


def test_each_check_can_fail_with_a_reason():
    c = checks(snap(100, 0), snap(700, 48), peak_running=2)
    assert c.generation_tokens_equal is False and "600" in c.failures[0]
    assert c.prefix_cache_ok is False and "48" in c.failures[1]
    assert c.peak_running_ok is False and "max-num-seqs" in c.failures[2]


def test_unsalted_runs_report_hits_without_a_verdict_and_rate_mode_peak_is_a_cap():
    c = checks(snap(0), snap(512, 300), salted=False, peak_running=3, exact_peak=False)
    assert c.prefix_cache_hits_delta == 300 and c.prefix_cache_ok is None
    assert c.peak_running_ok is True and c.failures == []


def test_peak_from_too_few_samples_gets_no_verdict():
    c = checks(snap(0), snap(512), peak_running=1, running_samples=2)
    assert c.peak_running == 1 and c.peak_running_ok is None and c.failures == []


def test_missing_metrics_are_unavailable_not_failed():
    c = checks(Snapshot(unavailable="no usable /metrics (HTTP 404)"), snap(512))
    assert (c.available, c.generation_tokens_equal, c.failures) == (False, None, [])
    assert "404" in c.reason


# ---- the sampler: peak and metrics over time -------------------------------------------------


class _Server:
    """A backend whose /metrics counts up per scrape; from scrape `hang_after` on it never answers,
    and scrapes listed in `errors` fail like a refused connection."""

    def __init__(
        self, *, kv_name: str = "vllm:kv_cache_usage_perc", hang_after: int | None = None, errors: frozenset[int] = frozenset()
    ) -> None:
        self.kv_name, self.hang_after, self.errors = kv_name, hang_after, errors
        self.scrapes = 0

    def clock(self) -> int:
        return time.monotonic_ns()

    async def get_text(self, path: str) -> tuple[int | None, str]:
        assert path == "/metrics"
        n = self.scrapes
        self.scrapes += 1
        if self.hang_after is not None and n >= self.hang_after:
            await asyncio.sleep(3600)
        if n in self.errors:
            return None, "ConnectError: refused"
        return 200, "\n".join(
            [
                f'vllm:num_requests_running{{model_name="tiny"}} {n % 3}',
                'vllm:num_requests_waiting{model_name="tiny"} 1',
                f'{self.kv_name}{{model_name="tiny"}} 0.25',
                f'vllm:generation_tokens_total{{model_name="tiny"}} {10 * n}',
                f'vllm:prompt_tokens_total{{model_name="tiny"}} {100 * n}',
                f'vllm:spec_decode_num_draft_tokens_total{{model_name="tiny"}} {3 * n}',
                f'vllm:spec_decode_num_accepted_tokens_total{{model_name="tiny"}} {2 * n}',
            ]
        )


async def _sample_for(server: _Server, seconds: float) -> tuple[ServerMetrics, float]:
    """Run the sampler `seconds`, then stop it; returns it and how long stopping took."""
    metrics = ServerMetrics(server, "tiny", interval_s=0.02)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(metrics.sample(stop, server.clock()))
    await asyncio.sleep(seconds)
    stopping = time.monotonic()
    stop.set()
    await task
    return metrics, time.monotonic() - stopping


@pytest.mark.parametrize("kv_name", ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"])
def test_sampler_keeps_one_sample_per_interval_of_every_metric(monkeypatch, kv_name):
    monkeypatch.setattr(server_metrics, "TIMELINE_INTERVAL_S", 0.2)
    metrics, _ = asyncio.run(_sample_for(_Server(kv_name=kv_name), 1.0))
    timeline = metrics.timeline
    assert 4 <= len(timeline) <= 6  # one a 0.2 s over 1 s (first at once)
    assert len({p.t_ns // int(0.2e9) for p in timeline}) == len(timeline)  # no interval twice
    gaps = [b.t_ns - a.t_ns for a, b in pairwise(timeline)]
    assert all(gap >= 0.1e9 for gap in gaps) and timeline[0].t_ns < 0.1e9  # the slow ones mid-interval
    assert {(p.waiting, p.kv_cache_usage) for p in timeline} == {(1.0, 0.25)}  # either name of the KV gauge
    assert [p.generation_tokens for p in timeline] == sorted(p.generation_tokens for p in timeline)
    assert all(p.spec_accepted_tokens == 2 / 3 * p.spec_draft_tokens for p in timeline)
    # the peak still comes from every scrape (0.02 s apart), not only the kept ones
    assert metrics.running_samples >= server_metrics.FAST_SCRAPES > len(timeline) and metrics.peak_running == 2


def test_sampler_slows_to_one_scrape_per_timeline_interval_after_the_first_fast_ones(monkeypatch):
    monkeypatch.setattr(server_metrics, "TIMELINE_INTERVAL_S", 0.2)
    server = _Server()

    async def go():
        metrics = ServerMetrics(server, "tiny", interval_s=0.01)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(metrics.sample(stop, server.clock()))
        await asyncio.sleep(1.2)
        stop.set()
        await task

    asyncio.run(go())
    # FAST_SCRAPES 0.01 s apart (0.1 s), then one in each 0.2 s interval of the other 1.1 s: not 120
    # scrapes, nor the two per interval (11) of before
    assert server_metrics.FAST_SCRAPES + 4 <= server.scrapes <= server_metrics.FAST_SCRAPES + 7


def test_a_load_planned_for_twice_the_running_samples_skips_the_fast_scrapes_and_one_just_shorter_keeps_them(monkeypatch):
    monkeypatch.setattr(server_metrics, "TIMELINE_INTERVAL_S", 0.2)
    long_enough = 2 * server_metrics.MIN_RUNNING_SAMPLES * 0.2

    async def scrapes_after(planned_s):
        server = _Server()
        metrics = ServerMetrics(server, "tiny", interval_s=0.01)  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(metrics.sample(stop, server.clock(), planned_s))
        await asyncio.sleep(0.5)
        stop.set()
        await task
        return server.scrapes

    assert asyncio.run(scrapes_after(long_enough)) <= 4  # at once, then one an interval (mid-interval)
    assert asyncio.run(scrapes_after(long_enough - 0.1)) >= server_metrics.FAST_SCRAPES
    assert asyncio.run(scrapes_after(None)) >= server_metrics.FAST_SCRAPES


def test_sampler_skips_failed_scrapes_and_stops_promptly_when_the_server_stops_answering(monkeypatch):
    monkeypatch.setattr(server_metrics, "TIMELINE_INTERVAL_S", 0.0)  # keep every answered scrape
    monkeypatch.setattr(server_metrics, "SCRAPE_TIMEOUT_S", 0.3)
    metrics, stopping_s = asyncio.run(_sample_for(_Server(hang_after=5, errors=frozenset({1, 2})), 1.0))
    assert [p.generation_tokens for p in metrics.timeline] == [0.0, 30.0, 40.0]  # scrapes 1, 2 failed; then it hung
    assert stopping_s < 0.3 + 0.2  # a hung scrape holds the end of a scenario at most SCRAPE_TIMEOUT_S


def test_a_server_without_the_metrics_gives_empty_samples_not_errors():
    sample = server_metrics.server_sample({}, 5)
    assert sample == ServerSample(t_ns=5)


def test_thinned_keeps_the_limit_at_the_limit_and_spreads_one_past_it():
    timeline = [ServerSample(t_ns=i) for i in range(301)]
    assert thinned(timeline[:300], 300) == timeline[:300]
    kept = thinned(timeline, 300)
    assert len(kept) == 300 and kept[0].t_ns == 0 and kept[-1].t_ns == 300
    assert len({p.t_ns for p in kept}) == 300
