"""The saturation sweep: the highest concurrency at which a scenario meets its SLOs.

The search doubles the concurrency from 1 until a scenario misses the SLOs, the server is
over-saturated or the bound is reached, then bisects between the highest concurrency that held and
the lowest that did not. Once over-saturated, the answer is the highest concurrency that met the SLOs
before the server saturated (beyond it requests only queue, even where they still meet the SLOs). Over-saturated
means more concurrency only queues: against the nearest
lower concurrency measured, TTFT rose by SATURATION_TTFT_RISE while throughput grew by less than
SATURATION_THROUGHPUT_GAIN, or goodput fell by more than GOODPUT_DROP.

`decide` is plain logic over the steps so far; the local command (`run_sweep`) and the in-VPC run
(the run_benchmark state machine's SweepNext step, one call per scenario) share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from servingctl.loadgen.measure import ProgressFn
from servingctl.loadgen.runner import begin_run, finish_run, run_scenario
from servingctl.schema.results import RunConfig, RunResult, ScenarioSummary, SweepResult, SweepStep, SweepStop

SATURATION_TTFT_RISE = 1.5  # median TTFT x1.5 or more ...
SATURATION_THROUGHPUT_GAIN = 1.1  # ... while aggregate throughput gained under 10 %
GOODPUT_DROP = 0.9  # goodput below 90 % of the lower concurrency's
# A server that sent nothing to a request this long (and this many times its median TTFT) stalled:
# the step's verdict may be the stall's, not the load's (a 60 s stall once made the sweep answer 1).
STALL_MIN_S = 5.0
STALL_FACTOR = 10.0


@dataclass(frozen=True)
class Decision:
    """The sweep's next concurrency, or why it stops and what it found."""

    next: int | None
    found: int | None
    stop: SweepStop | None
    reason: str


def saturation(lower: SweepStep, step: SweepStep) -> str | None:
    """Why queueing grew from `lower` to `step` (a higher concurrency), None when it did not (module docstring)."""
    if lower.goodput_rps > 0 and step.goodput_rps / lower.goodput_rps < GOODPUT_DROP:
        return (
            f"goodput fell from {lower.goodput_rps:.2f} req/s at {lower.concurrency} to {step.goodput_rps:.2f} "
            f"(under {GOODPUT_DROP:.0%})"
        )
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


def step_of(summary: ScenarioSummary, previous: Sequence[SweepStep]) -> SweepStep:
    """The sweep step of a measured scenario, judged against the nearest lower concurrency measured."""
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
    )
    median = summary.ttft_ms.median or 0.0
    step.stalled = longest is not None and longest >= STALL_MIN_S * 1000 and longest >= STALL_FACTOR * median
    why = []
    if slo and not slo.met:
        missed = [c.slo.label() for c in slo.checks if not c.met]
        why.append("missed " + (", ".join(missed) or f"the share: {slo.good_share:.0%} < {slo.share_required:.0%}"))
    elif slo is None:
        why.append("no SLO result")
    lower = [s for s in previous if s.concurrency < step.concurrency]
    if lower and (queueing := saturation(max(lower, key=lambda s: s.concurrency), step)):
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
    at = ", ".join(f"{s.concurrency} (a wait of {(s.longest_wait_ms or 0) / 1000:,.1f} s)" for s in stalled)
    return f"; the server stalled at concurrency {at}: the verdict there may be the stall's, not the load's; measure again"


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


def result_of(steps: Sequence[SweepStep], decision: Decision) -> SweepResult:
    """The sweep's record once `decision` stopped it."""
    at = [s.scenario for s in steps if s.concurrency == decision.found]
    return SweepResult(
        steps=list(steps), found=decision.found, scenario=at[-1] if at else None, stop=decision.stop, reason=decision.reason
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
    decision = decide(steps, config.sweep_max_concurrency, config.sweep_max_steps)
    while decision.next is not None:
        result = await run_scenario(
            config,
            connection,
            run.calibrations[0],
            decision.next,
            run_id=run_id,
            progress=progress,
            transport=transport,
            processes=processes,
        )
        run.scenarios.append(result)
        steps.append(step_of(result.summary, steps))
        decision = decide(steps, config.sweep_max_concurrency, config.sweep_max_steps)
    run.sweep = result_of(steps, decision)
    return finish_run(run)
