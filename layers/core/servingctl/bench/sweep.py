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

from servingctl.bench.runner import ProgressFn, begin_run, finish_run, run_scenario
from servingctl.schema.results import RunConfig, RunResult, ScenarioSummary, SweepResult, SweepStep, SweepStop

SATURATION_TTFT_RISE = 1.5  # median TTFT x1.5 or more ...
SATURATION_THROUGHPUT_GAIN = 1.1  # ... while aggregate throughput gained under 10 %
GOODPUT_DROP = 0.9  # goodput below 90 % of the lower concurrency's


@dataclass(frozen=True)
class Decision:
    """The sweep's next concurrency, or why it stops and what it found."""

    next: int | None
    found: int | None
    stop: SweepStop | None
    reason: str


def saturated(lower: SweepStep, step: SweepStep) -> bool:
    """Queueing grew from `lower` to `step` (a higher concurrency): see the module docstring."""
    if lower.goodput_rps > 0 and step.goodput_rps / lower.goodput_rps < GOODPUT_DROP:
        return True
    if not (lower.ttft_median_ms and step.ttft_median_ms and lower.aggregate_tok_s and step.aggregate_tok_s):
        return False
    ttft_rose = step.ttft_median_ms / lower.ttft_median_ms >= SATURATION_TTFT_RISE
    flat = step.aggregate_tok_s / lower.aggregate_tok_s < SATURATION_THROUGHPUT_GAIN
    return ttft_rose and flat


def step_of(summary: ScenarioSummary, previous: Sequence[SweepStep]) -> SweepStep:
    """The sweep step of a measured scenario, judged against the nearest lower concurrency measured."""
    slo = summary.slo
    step = SweepStep(
        concurrency=summary.concurrency,
        scenario=summary.name,
        met=bool(slo and slo.met),
        goodput_rps=slo.goodput_rps if slo else 0.0,
        goodput_tok_s=slo.goodput_tok_s if slo else 0.0,
        aggregate_tok_s=summary.aggregate_tok_s,
        ttft_median_ms=summary.ttft_ms.median,
    )
    lower = [s for s in previous if s.concurrency < step.concurrency]
    if lower:
        step.saturated = saturated(max(lower, key=lambda s: s.concurrency), step)
    return step


def decide(steps: Sequence[SweepStep], max_concurrency: int, max_steps: int) -> Decision:
    """The next concurrency to measure after `steps`, or the stop with the concurrency found."""
    if not steps:
        return Decision(1, None, None, "start at concurrency 1")
    held = [s.concurrency for s in steps if s.met]
    missed = [s.concurrency for s in steps if not s.met]
    found = max(held) if held else None
    high = min((c for c in missed if found is None or c > found), default=None)
    last = steps[-1]
    if found is None:
        return Decision(None, None, "failed-at-1", f"the SLOs are missed at concurrency {min(missed)}")
    if high is not None:
        if high - found <= 1:
            return Decision(None, found, "converged", f"met at {found}, missed at {high}")
        nxt, why = (found + high) // 2, f"bisect between {found} (met) and {high} (missed)"
    elif last.saturated:
        # Past the knee more concurrency only queues: the answer is the highest that held before it.
        knee = max((s.concurrency for s in steps if s.met and not s.saturated), default=found)
        return Decision(
            None,
            knee,
            "over-saturated",
            f"over-saturated at {last.concurrency}: queueing grows "
            f"(TTFT rising while throughput flattens, or goodput falling); {knee} is the highest before it",
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
