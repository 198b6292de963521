"""The saturation sweep's search: doubling, bisection, the stops (SLO missed at 1, over-saturated,
bounds at the limit and one past it) and the saturation rule."""

from __future__ import annotations

import pytest

from servingctl.loadgen.saturation import decide, result_of, saturated
from servingctl.schema.results import SweepStep


def step(
    c: int, met: bool, *, goodput: float = 1.0, tok_s: float | None = 100.0, ttft: float | None = 10.0, sat: bool = False
) -> SweepStep:
    return SweepStep(
        concurrency=c,
        scenario=f"in100-c{c}",
        met=met,
        goodput_rps=goodput,
        goodput_tok_s=goodput * 10,
        output_tok_s=tok_s,
        ttft_median_ms=ttft,
        saturated=sat,
    )


def search(capacity: int, max_concurrency: int = 256, max_steps: int = 12) -> tuple[list[int], object]:
    """Run decide against a server that meets the SLO up to `capacity`; returns the concurrencies tried."""
    steps: list[SweepStep] = []
    decision = decide(steps, max_concurrency, max_steps)
    while decision.next is not None:
        steps.append(step(decision.next, decision.next <= capacity))
        decision = decide(steps, max_concurrency, max_steps)
    return [s.concurrency for s in steps], decision


def test_doubles_then_bisects_to_the_highest_concurrency_meeting_the_slo():
    tried, decision = search(capacity=11)
    assert tried == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (decision.found, decision.stop) == (11, "converged")
    assert decision.reason == "met at 11, missed at 12"


def test_missed_at_one_finds_nothing():
    tried, decision = search(capacity=0)
    assert tried == [1] and decision.found is None and decision.stop == "failed-at-1"


@pytest.mark.parametrize(("bound", "tried"), [(8, [1, 2, 4, 8]), (6, [1, 2, 4, 6]), (1, [1])])
def test_the_concurrency_bound_is_tried_and_never_passed(bound, tried):
    got, decision = search(capacity=100, max_concurrency=bound)
    assert got == tried and decision.found == bound and decision.stop == "max-concurrency"


def test_the_step_budget_stops_at_the_limit():
    tried, decision = search(capacity=11, max_steps=5)
    assert tried == [1, 2, 4, 8, 16] and (decision.found, decision.stop) == (8, "max-steps")
    tried, decision = search(capacity=11, max_steps=6)  # one more step: the first bisection
    assert tried == [1, 2, 4, 8, 16, 12] and decision.found == 8


def test_over_saturation_stops_the_doubling_with_what_held():
    steps = [step(1, True), step(2, True), step(4, True, sat=True)]
    decision = decide(steps, 256, 12)
    # 4 still met the SLO, but only by queueing: the answer is the highest concurrency before it
    assert (decision.next, decision.found, decision.stop) == (None, 2, "over-saturated")
    assert decision.reason.endswith("2 is the highest before it")
    assert result_of(steps, decision).scenario == "in100-c2"
    assert decide([step(1, True), step(2, True, sat=True)], 256, 12).found == 1


def test_saturated_when_ttft_rises_while_throughput_flattens_or_goodput_falls():
    low = step(4, True, goodput=10.0, tok_s=100.0, ttft=100.0)
    assert saturated(low, step(8, True, goodput=10.0, tok_s=109.0, ttft=150.0))
    assert not saturated(low, step(8, True, goodput=10.0, tok_s=110.0, ttft=150.0))  # throughput still grows 10 %
    assert not saturated(low, step(8, True, goodput=10.0, tok_s=100.0, ttft=149.0))  # TTFT rose under x1.5
    assert saturated(low, step(8, True, goodput=8.9, tok_s=200.0, ttft=100.0))  # goodput fell over 10 %
    assert not saturated(low, step(8, True, goodput=9.0, tok_s=200.0, ttft=100.0))
    assert not saturated(low, step(8, True, goodput=10.0, tok_s=None, ttft=None))


def _summary(c: int, ttft_median_ms: float, longest_ms: float):
    """A measured scenario as step_of reads it: no SLO verdict needed to see a stall."""
    from types import SimpleNamespace

    from servingctl.schema.results import MetricSummary, SloResult

    slo = SloResult(
        checks=[], good_requests=4, good_share=1.0, share_required=1.0, met=True, duration_s=1.0,
        goodput_rps=4.0, goodput_tok_s=40.0, throughput_rps=4.0,
    )  # fmt: skip
    return SimpleNamespace(
        concurrency=c,
        name=f"in100-c{c}",
        slo=slo,
        output_tok_s=100.0,
        ttft_ms=MetricSummary(count=4, median=ttft_median_ms, max=longest_ms),
        chunk_gap_ms=MetricSummary(count=4, median=10.0, max=20.0),
    )


def test_a_stall_is_seen_from_its_limit_and_named_in_the_answer():
    from servingctl.loadgen.saturation import STALL_MIN_S, step_of

    at = step_of(_summary(2, 80.0, STALL_MIN_S * 1000), [])
    below = step_of(_summary(2, 80.0, STALL_MIN_S * 1000 - 1), [])
    assert at.stalled and not below.stalled
    assert at.why == "STALLED: a request waited 5.0 s for a token (median TTFT 80 ms)"
    slow_anyway = step_of(_summary(2, 1000.0, 6000.0), [])  # 6 x its median: slow, not a stall
    assert not slow_anyway.stalled


def test_a_stall_that_ends_the_sweep_is_reported_with_why_the_level_was_chosen():
    from servingctl.loadgen.saturation import step_of

    one = step_of(_summary(1, 80.0, 100.0), [])
    stalled = _summary(2, 400.0, 60_000.0)  # a 60 s stall dragged the median TTFT up x5
    two = step_of(stalled, [one])
    assert two.saturated and two.stalled
    decision = decide([one, two], 256, 12)
    assert (decision.found, decision.stop) == (1, "over-saturated")
    assert decision.reason == (
        "over-saturated at 2: queueing grows (saturated: median TTFT x5.0 (80 -> 400 ms) while output tok/s changed "
        "+0% (100.0 -> 100.0) from 1; STALLED: a request waited 60.0 s for a token (median TTFT 400 ms)); "
        "1 is the highest before it; the server stalled at concurrency 2 (a wait of 60.0 s): the verdict there may be "
        "the stall's, not the load's; measure again"
    )
