"""Metric arithmetic with hand-computed expectations (times in ns; 1 ms = 1_000_000 ns)."""

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servingctl.loadgen.metrics import (
    check_mismatches,
    chunk_gaps_ms,
    count_mismatches,
    gap_summaries,
    itl_samples_ms,
    per_read,
    round_result,
    steady_window,
    tokens_per_chunk,
    unmeasured,
    with_request_metrics,
)
from servingctl.loadgen.stats import summarize
from servingctl.schema.results import RequestRecord

MS = 1_000_000


def record(index=0, start_ms=0, chunks_ms=((100, 1), (110, 2), (130, 1)), end_ms=140, ok=True, **extra):
    chunks = [(int(t * MS), k) for t, k in chunks_ms]
    return RequestRecord(
        scenario="in256-c1",
        round=0,
        index=index,
        ok=ok,
        t_start_ns=int(start_ms * MS),
        t_first_ns=chunks[0][0] if chunks else None,
        t_first_answer_ns=extra.pop("t_first_answer_ns", chunks[0][0] if chunks else None),
        t_last_ns=chunks[-1][0] if chunks else None,
        t_end_ns=int(end_ms * MS),
        completion_tokens=sum(k for _, k in chunks),
        chunks=chunks,
        token_counts_exact=True,
        **{"prompt_tokens": 254, "finish_reason": "length", **extra},
    )


def test_per_request_metrics():
    r = with_request_metrics(record())
    assert r.ttft_ms == 100.0  # first token chunk at 100 ms
    assert r.e2e_ms == 140.0
    assert r.e2e_tok_s == pytest.approx(4 / 0.140)  # 28.57 tok/s
    assert r.decode_tok_s == pytest.approx(3 / 0.030)  # (n-1) / (t_last - t_first) = 100 tok/s
    assert r.tpot_ms == pytest.approx(40 / 3)  # (E2E - TTFT) / (n-1)


def test_ttfc_ttft_and_ttfot_from_their_own_chunks():
    r = with_request_metrics(record(t_first_chunk_ns=90 * MS, t_first_answer_ns=130 * MS))
    assert (r.ttfc_ms, r.ttft_ms, r.ttfot_ms) == (90.0, 100.0, 130.0)


def test_decode_rate_leaves_out_every_token_of_the_first_chunk_under_mtp():
    # the first chunk carries k = 3 tokens (multi-token prediction): only 6 - 3 = 3 were decoded in 30 ms
    r = with_request_metrics(record(chunks_ms=((100, 3), (110, 2), (130, 1))))
    assert r.decode_tok_s == pytest.approx(3 / 0.030)
    assert r.coalesced_gaps == 0


def test_chunks_of_one_read_are_coalesced_not_zero_gaps():
    chunks_ms = ((100, 1), (100, 1), (120, 1), (120, 1), (130, 1))
    r = with_request_metrics(record(chunks_ms=chunks_ms))
    assert r.coalesced_gaps == 2
    assert per_read(r.chunks) == [(100 * MS, 2), (120 * MS, 2), (130 * MS, 1)]
    assert chunk_gaps_ms(r.chunks) == [20.0, 10.0]  # no 0 ms gaps
    assert itl_samples_ms(r.chunks) == [10.0, 10.0, 10.0]  # one sample per token after the first read
    assert r.decode_tok_s == pytest.approx(3 / 0.030)  # the first read brought k = 2
    assert "itl_ms: 2 of 4 chunk gaps" in unmeasured([r])[0]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), max_size=40))
def test_per_read_merges_consecutive_chunks_of_one_stamp_and_keeps_every_token(chunks):
    # stamps drawn from a few values, so reads of many chunks, repeats after a gap, and (the clock
    # read twice per kernel stamp) a stamp lower than the one before all occur
    expected: list[tuple[int, int]] = []
    for t, tokens in chunks:
        if expected and expected[-1][0] == t:
            expected[-1] = (t, expected[-1][1] + tokens)
        else:
            expected.append((t, tokens))
    assert per_read(chunks) == expected


def test_a_whole_answer_in_one_read_says_why_decode_is_unmeasured():
    whole = with_request_metrics(record(chunks_ms=((100, 1), (100, 1), (100, 2))))
    fine = with_request_metrics(record(index=1))
    assert whole.decode_tok_s is None and fine.decode_tok_s is not None
    reasons = unmeasured([whole, fine])
    assert reasons[0].startswith("decode_tok_s: 1 of 2 requests got all their tokens in one network read")
    assert unmeasured([fine]) == []


def test_decode_rate_is_measured_with_half_the_gaps_coalesced_and_not_one_past_half():
    # 4 gaps, 2 inside shared reads: the reads still say the server's pace
    half = with_request_metrics(record(chunks_ms=((100, 1), (100, 1), (120, 1), (120, 1), (130, 1))))
    assert half.coalesced_gaps == 2 and half.decode_tok_s == pytest.approx(3 / 0.030)
    # 3 of 4 gaps coalesced: a late client got the answer in two bunches, so 255 tokens "in 2 ms" is
    # its own schedule; the rate is left out and the run says why
    bunched = with_request_metrics(record(chunks_ms=((100, 1), (100, 1), (100, 1), (102, 1), (102, 1))))
    assert bunched.coalesced_gaps == 3 and bunched.decode_tok_s is None
    assert bunched.e2e_tok_s is not None and bunched.ttft_ms == 100.0  # the rest still stands
    assert unmeasured([bunched, half])[0].startswith(
        "decode_tok_s: 1 of 2 requests got all their tokens in one network read, or more than half of their chunk gaps coalesced"
    )


def test_reasoning_only_answer_has_no_ttfot_and_says_so():
    r = with_request_metrics(record(t_first_chunk_ns=90 * MS, t_first_answer_ns=None))
    assert r.ttfot_ms is None
    assert unmeasured([r]) == ["ttfot_ms: 1 of 1 requests ended before any answer token (reasoning only)"]


def test_single_token_has_no_decode_rate_nor_tpot():
    r = with_request_metrics(record(chunks_ms=((50, 1),), end_ms=60))
    assert (r.ttft_ms, r.e2e_ms) == (50.0, 60.0)
    assert r.decode_tok_s is None and r.tpot_ms is None


def test_itl_is_token_normalized_while_chunk_gaps_stay_raw():
    chunks = record().chunks
    assert chunk_gaps_ms(chunks) == [10.0, 20.0]
    # the 2-token chunk after a 10 ms gap gives two 5 ms samples: mean ITL = 30 ms / 3 tokens = 1 / decode rate
    assert itl_samples_ms(chunks) == [5.0, 5.0, 20.0]


def test_gap_summaries_pool_itl_samples_and_raw_gaps_over_requests():
    one_token_reads = record(chunks_ms=((100, 1), (110, 1), (130, 1)))  # gaps 10, 20
    with_a_pair = record(chunks_ms=((100, 1), (140, 2), (150, 1)))  # gaps 40 (2 tokens), 10
    itl, gaps = gap_summaries([one_token_reads, with_a_pair])
    assert (itl.count, itl.min, itl.max, itl.mean) == (5, 10.0, 20.0, pytest.approx(80 / 5))
    assert (gaps.count, gaps.min, gaps.max, gaps.mean) == (4, 10.0, 40.0, 20.0)


@given(st.lists(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), max_size=12).map(sorted), max_size=6))
def test_gap_summaries_equal_the_summaries_of_every_request_s_samples(chunk_lists):
    # one-token reads share a sorted list between both summaries; that must not change either
    records = [record(chunks_ms=chunks) for chunks in chunk_lists if chunks]
    every_itl, every_gap = [], []
    for r in records:
        reads = per_read(r.chunks)
        for (t0, _), (t1, k) in pairwise(reads):
            every_gap.append((t1 - t0) / MS)
            every_itl += [(t1 - t0) / MS / k] * k if k else []
    assert gap_summaries(records) == (summarize(every_itl), summarize(every_gap))
    assert [s for r in records for s in itl_samples_ms(r.chunks)] == every_itl
    assert [g for r in records for g in chunk_gaps_ms(r.chunks)] == every_gap


def test_tokens_per_chunk_histogram_over_requests():
    assert tokens_per_chunk([record(), record(chunks_ms=((10, 3), (20, 3)))]) == {1: 2, 2: 1, 3: 2}


def test_mismatches_flag_prompt_completion_and_finish_reason():
    good = check_mismatches(record(), prompt_tokens=254, max_tokens=4)
    assert good.mismatches == []
    bad = check_mismatches(record(finish_reason="stop"), prompt_tokens=256, max_tokens=8)
    assert bad.mismatches == ["prompt_tokens", "completion_tokens", "finish_reason"]
    counts = count_mismatches([good, bad], prompt_tokens=256, max_tokens=8)
    assert (counts.prompt_tokens, counts.completion_tokens, counts.finish_reason) == (1, 1, 1)
    assert "completion_tokens 4 (max_tokens 8)" in counts.examples[0]


def test_burst_round_aggregate_is_tokens_over_round_wall_time():
    a = record(index=0, start_ms=0, end_ms=140)  # 4 tokens
    b = record(index=1, start_ms=2, chunks_ms=((120, 2), (190, 2)), end_ms=200)  # 4 tokens
    failed = record(index=2, start_ms=1, chunks_ms=((150, 5),), end_ms=160, ok=False)
    result = round_result(3, False, [a, b, failed])
    assert (result.t_start_ns, result.t_end_ns) == (0, 200 * MS)
    assert (result.completion_tokens, result.ok, result.failed) == (8, 2, 1)  # failed tokens not counted
    assert result.output_tok_s == pytest.approx(8 / 0.200)


def test_steady_window_runs_from_first_completion_to_last_send():
    records = [
        record(index=0, start_ms=0, chunks_ms=((50, 1), (80, 1), (100, 1)), end_ms=100),
        record(index=1, start_ms=0, chunks_ms=((60, 1), (120, 2), (150, 1)), end_ms=150),
        record(index=2, start_ms=100, chunks_ms=((140, 1), (180, 1), (200, 1)), end_ms=200),
        record(index=3, start_ms=150, chunks_ms=((190, 2), (230, 1)), end_ms=240),
    ]
    window = steady_window(records)
    assert (window.t_start_ns, window.t_end_ns) == (100 * MS, 150 * MS)
    # chunks at 100 (1), 120 (2), 140 (1), 150 (1) fall inside [100, 150] ms
    assert window.completion_tokens == 5
    assert window.duration_s == pytest.approx(0.05)
    assert window.warnings == []


@given(
    st.lists(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 3)), max_size=8), min_size=1, max_size=6),
    st.integers(1, 19),
    st.integers(1, 19),
)
def test_steady_window_counts_the_tokens_stamped_inside_it_whole_requests_or_parts(chunk_lists, a, b):
    # requests wholly inside, wholly outside and across the window [first completion, last send]
    records = [record(index=i, chunks_ms=tuple(chunks), end_ms=30) for i, chunks in enumerate(chunk_lists)]
    n = len(records)
    records += [record(index=n, chunks_ms=(), end_ms=min(a, b)), record(index=n + 1, start_ms=max(a, b), chunks_ms=(), end_ms=30)]
    window = steady_window(records)
    assert a == b or (window.t_start_ns, window.t_end_ns) == (min(a, b) * MS, max(a, b) * MS)
    expected = sum(tokens for r in records for t, tokens in r.chunks if window.t_start_ns <= t <= window.t_end_ns)
    assert window.completion_tokens == expected


def test_steady_window_without_steady_phase_falls_back_loudly():
    records = [record(index=0, start_ms=0, end_ms=140), record(index=1, start_ms=0, end_ms=140)]
    window = steady_window(records)
    assert window.method.startswith("whole span")
    assert (window.t_start_ns, window.t_end_ns, window.completion_tokens) == (0, 140 * MS, 8)
    assert "no steady phase" in window.warnings[0]
