"""Capacity figures every output shares: each scenario against the run's SLOs with its goodput, and
the saturation sweep's search (the concurrency or arrival rate found, each step and why it stopped)."""

from __future__ import annotations

from servingctl.schema.results import RunResult, SloCheck, SweepStep

GOODPUT_HEADER = ("scenario", "SLO", "good", "goodput\nreq/s", "goodput\ntok/s", "req/s\nall ok")
# Not the output tok/s of the results table (burst: a median of rounds): named apart wherever both show.
GOODPUT_WORDS = (
    "goodput tok/s: output tokens of the requests meeting every SLO over the measured duration "
    "(burst: the rounds' wall times added), a total over time, not output tok/s's median of rounds"
)


def throughput_words(mode: str) -> str:
    """What the results table's output tok/s (output_tok_s) is in this mode, in one line."""
    if mode == "burst":
        return "output tok/s: the median of the measured rounds, each round's output tokens / its wall time"
    return "output tok/s: output tokens of the steady window / its length (first completion to last send)"


def slo_text(run: RunResult) -> str:
    """The SLOs as typed and the share required: 'ttft_ms=500, itl_ms:p90=50 for 90 % of requests'."""
    share = run.config.slo_share
    return ", ".join(s.label() for s in run.config.slos) + f" (every per-request SLO for {share:.0%} of requests)"


def _one(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _missed(checks: list[SloCheck]) -> str:
    return ", ".join(c.slo.label() for c in checks if not c.met)


def goodput_rows(run: RunResult) -> list[tuple[str, ...]]:
    """Per scenario (by concurrency): met or which SLO missed, good share, goodput and all-ok throughput."""
    rows: list[tuple[str, ...]] = []
    for s in sorted((sc.summary for sc in run.scenarios if sc.summary.slo), key=lambda s: (s.input_tokens, s.concurrency)):
        slo = s.slo
        assert slo is not None
        verdict = "met" if slo.met else "missed " + (_missed(slo.checks) or f"share < {slo.share_required:.0%}")
        rows.append(
            (
                s.name,
                verdict,
                f"{slo.good_share:.0%}",
                f"{slo.goodput_rps:,.2f}",
                f"{slo.goodput_tok_s:,.1f}",
                f"{slo.throughput_rps:,.2f}",
            )
        )
    return rows


def verdict(step: SweepStep) -> str:
    """A sweep step in one word: stalled, saturated, met or missed (the worst first)."""
    if step.stalled:
        return "stalled"
    if step.saturated:
        return "saturated"
    return "met" if step.met else "missed"


def _step_line(s: SweepStep) -> str:
    """One step of the search in a sentence: where, its verdict, the figures decided on, and why."""
    if s.rate is None:
        head = f"c={s.concurrency}: {'met' if s.met else 'missed'}"
    else:
        head = f"{s.rate:g} req/s offered: {verdict(s)}, completed {_two(s.achieved_rate_rps)} req/s"
    return (
        f"{head}, goodput {s.goodput_rps:.2f} req/s, TTFT median {_one(s.ttft_median_ms)} ms, "
        f"output {_one(s.output_tok_s)} tok/s" + (f" ({s.why})" if s.why else "")
    )


def _two(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def sweep_lines(run: RunResult) -> list[str]:
    """The sweep's answer then its steps, one sentence each (empty without a sweep)."""
    sweep = run.sweep
    if sweep is None:
        return []
    at = next((sc.summary for sc in run.scenarios if sc.summary.name == sweep.scenario), None)
    by_rate = sweep.axis == "rate"
    found = sweep.found_rate if by_rate else sweep.found
    if found is None or at is None or at.slo is None:
        head = f"Saturation sweep: no {'arrival rate' if by_rate else 'concurrency'} met the SLOs ({sweep.reason})."
    elif by_rate:
        cap = run.config.concurrencies[0]
        head = (
            f"Saturation sweep: highest arrival rate meeting the SLOs = {found:g} req/s (at most {cap} in flight), "
            f"goodput {at.slo.goodput_rps:.2f} req/s ({at.slo.goodput_tok_s:,.1f} output tok/s); stopped: {sweep.reason}."
        )
    else:
        head = (
            f"Saturation sweep: highest concurrency meeting the SLOs = {found}, goodput "
            f"{at.slo.goodput_rps:.2f} req/s ({at.slo.goodput_tok_s:,.1f} output tok/s); stopped: {sweep.reason}."
        )
    return [head, *(f"step {i}, {_step_line(s)}" for i, s in enumerate(sweep.steps, 1))]


def cost_line(run: RunResult) -> str | None:
    """Cost per 1M output tokens at the SLO next to the managed API's, and the break-even in requests a day."""
    return None if run.slo_cost is None else "Cost at the SLO: " + run.slo_cost.words() + "."
