"""Prometheus text parsing, per-model totals, and the server cross-check verdicts."""

from servingctl.bench.server_metrics import (
    GENERATION,
    PREFIX_HITS,
    SPEC_ACCEPTED,
    SPEC_DRAFT,
    Snapshot,
    build_checks,
    model_totals,
    parse_prometheus,
)

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
    assert totals[GENERATION] == 128.0           # two engines of "tiny", not "other"
    assert totals[PREFIX_HITS] == 16.0            # no model label: counted
    assert "vllm:kv_cache_usage_perc" not in totals  # NaN skipped


def test_name_filter():
    assert [s.name for s in parse_prometheus(TEXT, frozenset({GENERATION}))] == [GENERATION] * 3


def snap(generation, hits=0.0, draft=None, accepted=None):
    totals = {GENERATION: generation, PREFIX_HITS: hits}
    if draft is not None:
        totals |= {SPEC_DRAFT: draft, SPEC_ACCEPTED: accepted}
    return Snapshot(totals=totals)


def checks(before, after, **kw):
    args = dict(client_completion_tokens=512, client_prompt_tokens=0, salted=True, peak_running=4,
                running_samples=20, intended_concurrency=4, exact_peak=True) | kw
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
