"""The saturation sweep: the highest concurrency (mode rate: arrival rate) at which a scenario meets its SLOs.

The search doubles the concurrency from 1 until a scenario misses the SLOs, the server is
over-saturated or the bound is reached, then bisects between the highest concurrency that held and
the lowest that did not. Once over-saturated, the answer is the highest concurrency that met the SLOs
before the server saturated (beyond it requests only queue, even where they still meet the SLOs). Over-saturated
means more concurrency only queues: against the nearest
lower concurrency measured, TTFT rose by SATURATION_TTFT_RISE while throughput grew by less than
SATURATION_THROUGHPUT_GAIN, or goodput fell by more than GOODPUT_DROP.

A rate sweep (`decide_rate`) offers open-loop arrivals instead, from sweep_start_rate, doubling up to
sweep_max_rate, then bisecting until the rate missed is within sweep_resolution of the rate met. A rate
the server cannot keep up with counts as missed, whatever its latencies (they only grow with a longer
run): successful completions per second fell under RATE_SHORTFALL of the schedule's own arrival rate,
or, against the nearest lower rate measured, median TTFT rose by SATURATION_TTFT_RISE while
completions followed under RATE_FOLLOW of the added offered rate, or goodput fell by more than
GOODPUT_DROP.

`decide` and `decide_rate` are plain logic over the steps so far; the local command (`run_sweep`) and
the in-VPC run (the run_benchmark state machine's SweepNext step, one call per scenario; concurrency
only) share them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from servingctl.loadgen.measure import ProgressFn, planned_offsets
from servingctl.loadgen.metrics import completion_rate
from servingctl.loadgen.runner import begin_run, finish_run, run_scenario
from servingctl.loadgen.scheduler import schedule_rate
from servingctl.schema.results import RunConfig, RunResult, ScenarioSummary, SweepResult, SweepStep, SweepStop

SATURATION_TTFT_RISE = 1.5  # median TTFT x1.5 or more ...
SATURATION_THROUGHPUT_GAIN = 1.1  # ... while output tok/s gained under 10 %
GOODPUT_DROP = 0.9  # goodput below 90 % of the lower concurrency's
# A server that sent nothing to a request this long (and this many times its median TTFT) stalled:
# the step's verdict may be the stall's, not the load's (a 60 s stall once made the sweep answer 1).
STALL_MIN_S = 5.0
STALL_FACTOR = 10.0
RATE_SHORTFALL = 0.9  # a rate sweep's step completing under 90 % of its arrivals' rate did not keep up
RATE_FOLLOW = 0.5  # ... nor one whose completions grew by under half the added rate while TTFT rose x1.5
RATE_DIGITS = 4  # significant digits of a bisected rate (scenario names stay short; far finer than a resolution)


@dataclass(frozen=True)
class Decision:
    """The sweep's next concurrency, or why it stops and what it found."""

    next: int | None
    found: int | None
    stop: SweepStop | None
    reason: str


@dataclass(frozen=True)
class RateDecision:
    """A rate sweep's next rate (requests/s), or why it stops and the highest rate that held."""

    next: float | None
    found: float | None
    stop: SweepStop | None
    reason: str


def _goodput_fell(lower: SweepStep, step: SweepStep) -> str | None:
    """Why goodput fell from `lower` to `step`, None when it held within GOODPUT_DROP."""
    if lower.goodput_rps > 0 and step.goodput_rps / lower.goodput_rps < GOODPUT_DROP:
        where = f"{lower.rate:g} req/s offered" if lower.rate is not None else str(lower.concurrency)
        return f"goodput fell from {lower.goodput_rps:.2f} req/s at {where} to {step.goodput_rps:.2f} (under {GOODPUT_DROP:.0%})"
    return None


def rate_saturation(lower: SweepStep | None, step: SweepStep) -> str | None:
    """Why the server did not keep up with `step`'s arrival rate (`lower`: the nearest lower rate
    measured), None when it did (module docstring)."""
    offered, achieved = step.scheduled_rate_rps or step.rate, step.achieved_rate_rps
    if offered and achieved is not None and achieved < RATE_SHORTFALL * offered:
        return f"completed {achieved:.2f} req/s of {offered:.2f} arriving ({achieved / offered - 1:+.0%})"
    if lower is None or lower.rate is None or step.rate is None:
        return None
    if fell := _goodput_fell(lower, step):
        return fell
    if not (offered and lower.ttft_median_ms and step.ttft_median_ms and lower.achieved_rate_rps and achieved):
        return None
    rise = step.ttft_median_ms / lower.ttft_median_ms
    added = offered - (lower.scheduled_rate_rps or lower.rate)  # the schedules' own rates, as the shortfall
    followed = (achieved - lower.achieved_rate_rps) / added if added > 0 else 1.0
    if rise >= SATURATION_TTFT_RISE and followed < RATE_FOLLOW:
        return (
            f"median TTFT x{rise:.1f} ({lower.ttft_median_ms:,.0f} -> {step.ttft_median_ms:,.0f} ms) while completions "
            f"went {lower.achieved_rate_rps:.2f} -> {achieved:.2f} req/s for {added:+.2f} req/s arriving from {lower.rate:g}"
        )
    return None


def saturation(lower: SweepStep, step: SweepStep) -> str | None:
    """Why queueing grew from `lower` to `step` (a higher concurrency), None when it did not (module docstring)."""
    if fell := _goodput_fell(lower, step):
        return fell
    if not (lower.ttft_median_ms and step.ttft_median_ms and lower.output_tok_s and step.output_tok_s):
        return None
    rise = step.ttft_median_ms / lower.ttft_median_ms
    gain = step.output_tok_s / lower.output_tok_s
    if rise >= SATURATION_TTFT_RISE and gain < SATURATION_THROUGHPUT_GAIN:
        return (
            f"median TTFT x{rise:.1f} ({lower.ttft_median_ms:,.0f} -> {step.ttft_median_ms:,.0f} ms) while output tok/s "
            f"changed {gain - 1:+.0%} ({lower.output_tok_s:,.1f} -> {step.output_tok_s:,.1f}) from {lower.concurrency}"
        )
    return None


def saturated(lower: SweepStep, step: SweepStep) -> bool:
    """Queueing grew from `lower` to `step` (a higher concurrency): see the module docstring."""
    return saturation(lower, step) is not None


def step_of(
    summary: ScenarioSummary,
    previous: Sequence[SweepStep],
    *,
    scheduled_rps: float | None = None,
    achieved_rps: float | None = None,
) -> SweepStep:
    """The sweep step of a measured scenario, judged against the nearest lower concurrency measured (mode
    rate: the nearest lower rate, and the completions per second `achieved_rps` against the schedule's
    `scheduled_rps`)."""
    slo = summary.slo
    waits = [v for v in (summary.ttft_ms.max, summary.chunk_gap_ms.max) if v is not None]
    longest = max(waits) if waits else None
    step = SweepStep(
        concurrency=summary.concurrency,
        scenario=summary.name,
        met=bool(slo and slo.met),
        goodput_rps=slo.goodput_rps if slo else 0.0,
        goodput_tok_s=slo.goodput_tok_s if slo else 0.0,
        output_tok_s=summary.output_tok_s,
        ttft_median_ms=summary.ttft_ms.median,
        longest_wait_ms=longest,
        rate=summary.rate if summary.mode == "rate" else None,
        scheduled_rate_rps=scheduled_rps,
        achieved_rate_rps=achieved_rps,
    )
    median = summary.ttft_ms.median or 0.0
    step.stalled = longest is not None and longest >= STALL_MIN_S * 1000 and longest >= STALL_FACTOR * median
    why = []
    if slo and not slo.met:
        missed = [c.slo.label() for c in slo.checks if not c.met]
        why.append("missed " + (", ".join(missed) or f"the share: {slo.good_share:.0%} < {slo.share_required:.0%}"))
    elif slo is None:
        why.append("no SLO result")
    lower = [s for s in previous if s.x() < step.x()]
    nearest = max(lower, key=lambda s: s.x()) if lower else None
    if step.rate is not None:
        queueing = rate_saturation(nearest, step)
    else:
        queueing = saturation(nearest, step) if nearest is not None else None
    if queueing:
        step.saturated = True
        why.append("saturated: " + queueing)
    if step.stalled and longest is not None:
        why.append(f"STALLED: a request waited {longest / 1000:,.1f} s for a token (median TTFT {median:,.0f} ms)")
    step.why = "; ".join(why) or None
    return step


def stall_note(steps: Sequence[SweepStep]) -> str:
    """'; stalled at 2 (...): its verdict may be the stall's, not the load's; measure again' ('' without stalls)."""
    stalled = [s for s in steps if s.stalled]
    if not stalled:
        return ""
    where = "rate" if stalled[0].rate is not None else "concurrency"
    at = ", ".join(f"{s.at().removeprefix('c=')} (a wait of {(s.longest_wait_ms or 0) / 1000:,.1f} s)" for s in stalled)
    return f"; the server stalled at {where} {at}: the verdict there may be the stall's, not the load's; measure again"


def decide(steps: Sequence[SweepStep], max_concurrency: int, max_steps: int) -> Decision:
    """The next concurrency to measure after `steps`, or the stop with the concurrency found and why,
    naming every step that stalled."""
    decision = _decide(steps, max_concurrency, max_steps)
    if decision.next is None:
        return Decision(decision.next, decision.found, decision.stop, decision.reason + stall_note(steps))
    return decision


def _decide(steps: Sequence[SweepStep], max_concurrency: int, max_steps: int) -> Decision:
    """decide without the stall note."""
    if not steps:
        return Decision(1, None, None, "start at concurrency 1")
    held = [s.concurrency for s in steps if s.met]
    missed = [s.concurrency for s in steps if not s.met]
    found = max(held) if held else None
    high = min((c for c in missed if found is None or c > found), default=None)
    last = steps[-1]
    if found is None:
        first = min(steps, key=lambda s: s.concurrency)
        return Decision(None, None, "failed-at-1", f"the SLOs are missed at concurrency {min(missed)} ({first.why})")
    if high is not None:
        if high - found <= 1:
            why = next((s.why for s in steps if s.concurrency == high), None)
            return Decision(None, found, "converged", f"met at {found}, missed at {high}" + (f" ({why})" if why else ""))
        nxt, why = (found + high) // 2, f"bisect between {found} (met) and {high} (missed)"
    elif last.saturated:
        # Past the knee more concurrency only queues: the answer is the highest that held before it.
        knee = max((s.concurrency for s in steps if s.met and not s.saturated), default=found)
        return Decision(
            None,
            knee,
            "over-saturated",
            f"over-saturated at {last.concurrency}: queueing grows ({last.why or 'TTFT rising while throughput flattens'}); "
            f"{knee} is the highest before it",
        )
    elif last.concurrency >= max_concurrency:
        return Decision(None, found, "max-concurrency", f"met at the bound sweep_max_concurrency={max_concurrency}")
    else:
        nxt, why = min(last.concurrency * 2, max_concurrency), f"met at {last.concurrency}: double"
    if len(steps) >= max_steps:
        return Decision(None, found, "max-steps", f"{len(steps)} steps run (sweep_max_steps={max_steps}); highest met {found}")
    return Decision(nxt, found, None, why)


def decide_rate(steps: Sequence[SweepStep], start: float, max_rate: float, resolution: float, max_steps: int) -> RateDecision:
    """A rate sweep's next rate after `steps`, or the stop with the rate found and why, naming every
    step that stalled (module docstring)."""
    decision = _decide_rate(steps, start, max_rate, resolution, max_steps)
    if decision.next is None:
        return RateDecision(decision.next, decision.found, decision.stop, decision.reason + stall_note(steps))
    return decision


def _decide_rate(steps: Sequence[SweepStep], start: float, max_rate: float, resolution: float, max_steps: int) -> RateDecision:
    """decide_rate without the stall note."""
    if not steps:
        return RateDecision(start, None, None, f"start at {start:g} req/s")
    held = [s.x() for s in steps if s.met and not s.saturated]
    found = max(held) if held else None
    if found is None:
        first = min(steps, key=lambda s: s.x())
        return RateDecision(
            None, None, "failed-at-start", f"not met at the start rate {first.x():g} req/s ({first.why}); lower sweep_start_rate"
        )
    high = min((s for s in steps if s.x() > found and not (s.met and not s.saturated)), key=lambda s: s.x(), default=None)
    if high is not None:
        above = f"{'saturated' if high.met else 'missed'} at {high.x():g}"
        if high.x() <= found * (1 + resolution):
            why = f"met at {found:g} req/s, {above} ({high.why}), within {resolution:.0%}"
            return RateDecision(None, found, "converged", why)
        nxt, why = float(f"{(found + high.x()) / 2:.{RATE_DIGITS}g}"), f"bisect between {found:g} (met) and {above}"
    elif found >= max_rate:
        return RateDecision(None, found, "max-rate", f"met at the bound sweep_max_rate={max_rate:g} req/s")
    else:
        nxt, why = min(found * 2, max_rate), f"met at {found:g} req/s: double"
    if len(steps) >= max_steps:
        return RateDecision(
            None, found, "max-steps", f"{len(steps)} steps run (sweep_max_steps={max_steps}); highest met {found:g} req/s"
        )
    return RateDecision(nxt, found, None, why)


def result_of(steps: Sequence[SweepStep], decision: Decision | RateDecision) -> SweepResult:
    """The sweep's record once `decision` stopped it."""
    at = [s.scenario for s in steps if decision.found is not None and s.x() == decision.found]
    by_rate = isinstance(decision, RateDecision)
    return SweepResult(
        axis="rate" if by_rate else "concurrency",
        steps=list(steps),
        found=None if isinstance(decision, RateDecision) else decision.found,
        found_rate=decision.found if by_rate else None,
        scenario=at[-1] if at else None,
        stop=decision.stop,
        reason=decision.reason,
    )


async def run_sweep(
    config: RunConfig,
    *,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    progress: ProgressFn | None = None,
    run_id: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    processes: int = 1,
) -> RunResult:
    """Run the saturation sweep from this machine: one scenario per step, in order."""
    run, connection, run_id = await begin_run(
        config, api_key=api_key, headers=headers, progress=progress, run_id=run_id, transport=transport
    )
    steps: list[SweepStep] = []
    by_rate = config.mode == "rate"

    def next_step() -> Decision | RateDecision:
        if by_rate:
            c = config
            return decide_rate(steps, c.sweep_start_rate, c.sweep_max_rate, c.sweep_resolution, c.sweep_max_steps)
        return decide(steps, config.sweep_max_concurrency, config.sweep_max_steps)

    decision = next_step()
    while decision.next is not None:
        # A rate step is a scenario of its own rate, capped at the one concurrency given.
        at = config.model_copy(update={"rate": decision.next}) if by_rate else config
        concurrency = config.concurrencies[0] if by_rate else int(decision.next)
        result = await run_scenario(
            at,
            connection,
            run.calibrations[0],
            concurrency,
            run_id=run_id,
            progress=progress,
            transport=transport,
            processes=processes,
        )
        run.scenarios.append(result)
        scheduled = achieved = None
        if by_rate:
            scheduled, achieved = schedule_rate(planned_offsets(at, None)), completion_rate(result.records)
        steps.append(step_of(result.summary, steps, scheduled_rps=scheduled, achieved_rps=achieved))
        decision = next_step()
    run.sweep = result_of(steps, decision)
    return finish_run(run)
