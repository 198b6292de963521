"""The saturation sweep's search: doubling, bisection, the stops (SLO missed at 1, over-saturated,
bounds at the limit and one past it) and the saturation rule."""

from __future__ import annotations

import pytest

from servingctl.loadgen.saturation import RATE_SHORTFALL, decide, decide_rate, rate_saturation, result_of, saturated, step_of
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


def _summary(c: int, ttft_median_ms: float, longest_ms: float, *, rate: float | None = None, goodput: float = 4.0):
    """A measured scenario as step_of reads it: no SLO verdict needed to see a stall."""
    from types import SimpleNamespace

    from servingctl.schema.results import MetricSummary, SloResult

    slo = SloResult(
        checks=[], good_requests=4, good_share=1.0, share_required=1.0, met=True, duration_s=1.0,
        goodput_rps=goodput, goodput_tok_s=goodput * 10, throughput_rps=goodput,
    )  # fmt: skip
    return SimpleNamespace(
        concurrency=c,
        name=f"in100-c{c}" if rate is None else f"in100-c{c}-rate{rate:g}",
        mode="burst" if rate is None else "rate",
        rate=rate,
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


def rate_step(rate: float, met: bool, *, achieved: float | None = None, ttft: float = 10.0, sat: bool = False) -> SweepStep:
    return SweepStep(
        concurrency=64,
        scenario=f"in100-c64-rate{rate:g}",
        met=met,
        goodput_rps=rate,
        goodput_tok_s=rate * 10,
        output_tok_s=rate * 10,
        ttft_median_ms=ttft,
        saturated=sat,
        rate=rate,
        scheduled_rate_rps=rate,
        achieved_rate_rps=rate if achieved is None else achieved,
    )


def rate_search(
    capacity: float, *, start: float = 1.0, max_rate: float = 1000.0, resolution: float = 0.1, max_steps: int = 12
) -> tuple[list[float], object]:
    """Run decide_rate against a server meeting the SLOs up to `capacity` req/s; returns the rates tried."""
    steps: list[SweepStep] = []
    decision = decide_rate(steps, start, max_rate, resolution, max_steps)
    while decision.next is not None:
        steps.append(rate_step(decision.next, decision.next <= capacity))
        decision = decide_rate(steps, start, max_rate, resolution, max_steps)
    return [s.rate for s in steps], decision


def test_the_rate_search_doubles_from_its_start_then_bisects_to_the_resolution():
    tried, decision = rate_search(capacity=11.0)
    assert tried == [1, 2, 4, 8, 16, 12, 10, 11]  # 11 met, 12 missed: 12 / 11 is within 10 %
    assert (decision.found, decision.stop) == (11, "converged")
    assert decision.reason.startswith("met at 11 req/s, missed at 12")
    tried, decision = rate_search(capacity=11.0, resolution=0.5)  # coarser: stops once 16 / 8 ... 12 / 8 is within 50 %
    assert tried == [1, 2, 4, 8, 16, 12] and decision.found == 8


def test_the_rate_search_starts_where_asked_and_bisects_between_fractions():
    tried, decision = rate_search(capacity=3.3, start=0.5, resolution=0.05)
    assert tried == [0.5, 1, 2, 4, 3, 3.5, 3.25, 3.375]
    assert (decision.found, decision.stop) == (3.25, "converged")  # 3.375 / 3.25 is under 5 %


def test_a_rate_missed_at_the_start_finds_nothing_and_says_to_start_lower():
    tried, decision = rate_search(capacity=0.5, start=1.0)
    assert tried == [1] and decision.found is None and decision.stop == "failed-at-start"
    assert "lower sweep_start_rate" in decision.reason


@pytest.mark.parametrize(("bound", "tried"), [(8.0, [1, 2, 4, 8]), (6.0, [1, 2, 4, 6]), (1.0, [1])])
def test_the_rate_bound_is_tried_and_never_passed(bound, tried):
    got, decision = rate_search(capacity=100.0, max_rate=bound)
    assert got == tried and decision.found == bound and decision.stop == "max-rate"


def test_one_past_the_rate_bound_bisects_below_it():
    tried, decision = rate_search(capacity=7.9, max_rate=8.0)  # 8 just missed: the bound is not the answer
    assert tried[:4] == [1, 2, 4, 8] and decision.stop == "converged" and 7.2 < decision.found < 7.9


def test_the_step_budget_stops_a_rate_search_at_the_limit():
    tried, decision = rate_search(capacity=11.0, max_steps=5)
    assert tried == [1, 2, 4, 8, 16] and (decision.found, decision.stop) == (8, "max-steps")
    tried, decision = rate_search(capacity=11.0, max_steps=6)  # one more step: the first bisection
    assert tried == [1, 2, 4, 8, 16, 12] and decision.found == 8


def test_a_saturated_rate_counts_as_missed_even_where_its_latencies_met_the_slo():
    steps = [rate_step(1, True), rate_step(2, True), rate_step(4, True, sat=True)]
    decision = decide_rate(steps, 1.0, 1000.0, 0.1, 12)
    assert (decision.next, decision.found) == (3, 2)  # bisects below the rate the server could not keep up with
    assert decision.reason == "bisect between 2 (met) and saturated at 4"
    steps.append(rate_step(3, True))
    steps.append(rate_step(3.5, True, sat=True))
    steps.append(rate_step(3.25, True))
    decision = decide_rate(steps, 1.0, 1000.0, 0.1, 12)
    assert (decision.found, decision.stop) == (3.25, "converged")
    result = result_of(steps, decision)
    assert (result.axis, result.found, result.found_rate, result.scenario) == ("rate", None, 3.25, "in100-c64-rate3.25")


def test_a_rate_is_saturated_when_completions_fall_short_of_the_arrivals_at_the_limit_and_one_past():
    limit = RATE_SHORTFALL * 10.0
    assert rate_saturation(None, rate_step(10, True, achieved=limit - 0.01)) == "completed 8.99 req/s of 10.00 arriving (-10%)"
    assert rate_saturation(None, rate_step(10, True, achieved=limit)) is None


def test_a_rate_is_saturated_when_ttft_rises_while_completions_stop_following_the_offered_rate():
    low = rate_step(4, True, achieved=4.0, ttft=100.0)
    # 4 -> 4.5 arriving (a bisection step): completions must follow half the added 0.5 req/s while TTFT rose x1.5,
    # a finer test than the 10 % shortfall (4.05 would pass that)
    assert rate_saturation(low, rate_step(4.5, True, achieved=4.25, ttft=150.0)) is None
    assert rate_saturation(low, rate_step(4.5, True, achieved=4.24, ttft=150.0)) == (
        "median TTFT x1.5 (100 -> 150 ms) while completions went 4.00 -> 4.24 req/s for +0.50 req/s arriving from 4"
    )
    assert rate_saturation(low, rate_step(4.5, True, achieved=4.24, ttft=149.0)) is None  # TTFT rose under x1.5
    # The schedules' own rates count: a Poisson schedule at 8 that came out at 4.4 added only 0.4 req/s
    slow_draw = rate_step(8, True, achieved=4.21, ttft=150.0)
    slow_draw.scheduled_rate_rps = 4.4
    assert rate_saturation(low, slow_draw) is None


def test_a_rate_step_records_the_offered_scheduled_and_completed_rates():
    one = step_of(_summary(64, 80.0, 100.0, rate=2.0, goodput=2.0), [], scheduled_rps=2.1, achieved_rps=2.0)
    assert (one.rate, one.scheduled_rate_rps, one.achieved_rate_rps, one.saturated) == (2.0, 2.1, 2.0, False)
    assert (one.concurrency, one.at()) == (64, "2 req/s")
    two = step_of(_summary(64, 90.0, 100.0, rate=4.0, goodput=2.5), [one], scheduled_rps=4.2, achieved_rps=2.5)
    assert two.saturated and two.why == "saturated: completed 2.50 req/s of 4.20 arriving (-40%)"
    decision = decide_rate([one, two], 2.0, 100.0, 0.1, 12)
    assert (decision.next, decision.found) == (3, 2)


def test_a_concurrency_sweep_written_before_rate_sweeps_still_loads():
    from servingctl.schema.results import SweepResult

    old = {
        "steps": [
            {"concurrency": 1, "scenario": "in100-c1", "met": True, "goodput_rps": 1.0, "goodput_tok_s": 10.0,
             "aggregate_tok_s": 100.0, "ttft_median_ms": 10.0, "saturated": False, "why": None}
        ],
        "found": 1, "scenario": "in100-c1", "stop": "max-concurrency", "reason": "met at the bound",
    }  # fmt: skip
    sweep = SweepResult.model_validate(old)
    assert sweep.axis == "concurrency" and sweep.found == 1 and sweep.found_rate is None
    assert sweep.steps[0].rate is None and sweep.steps[0].x() == 1.0 and sweep.steps[0].at() == "c=1"
