"""The terminal rendering of a run and its JSON twin for scripts: the reference's table, the
side-by-side of a baseline run (each change with its bootstrap interval and verdict, then both
runs' fingerprints, differing fields coloured on a terminal), the cost comparison, then every warning. Plain text that fits the
terminal (80 columns included) and reads the same piped; every mode of `servingctl bench` and
`servingctl report` prints through print_run, so their tables are the same.

Scenarios come in the reference's order (input length, then concurrency: in64 before in128). A
percentile is shown only where the sample count resolves it (bench.stats.min_samples), otherwise
a dash and the count ("– n=2"), the rule said under the table; the input column shows the asked
length and, when calibration landed elsewhere, the measured one ("64 (63)"). A client-bound
scenario, or one measured on a busy machine, is flagged on the line under its row.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

from servingctl import render
from servingctl.loadgen.bootstrap import MIN_UNITS, RESAMPLES
from servingctl.loadgen.outputs.capacity import (
    GOODPUT_HEADER,
    GOODPUT_WORDS,
    cost_line,
    goodput_rows,
    slo_text,
    sweep_lines,
    throughput_words,
)
from servingctl.loadgen.outputs.fingerprint import compare_fingerprints, prompts_text
from servingctl.loadgen.outputs.markdown import fmt, fmt_pct, fmt_tail, warnings
from servingctl.loadgen.outputs.rows import ComparedFigure, ScenarioRow, compare_runs, scenario_rows
from servingctl.loadgen.stats import tail_rule
from servingctl.schema.comparison import Comparison
from servingctl.schema.results import RunResult

CLIENT_BOUND = "   ^ CLIENT-BOUND: the client was the bottleneck, not the server (see below)"
HOST_BUSY = "   ^ HOST BUSY: the machine was busy, not the client: timings late (see below)"


def _input(r: ScenarioRow) -> str:
    return str(r.input_tokens_target) + ("" if r.input_tokens == r.input_tokens_target else f" ({r.input_tokens})")


def _tail(r: ScenarioRow) -> str:
    """p90 / p99 TTFT where the sample count resolves them, else '– n=5' (stats.tail_rule)."""
    cells = [fmt_tail(r.ttft_p90_ms, r.ttft_samples, 0.90, 1), fmt_tail(r.ttft_p99_ms, r.ttft_samples, 0.99, 1)]
    return cells[0] if cells[0] == cells[1] else " / ".join(cells)


def _outputs(run: RunResult) -> str:
    """Where output lengths came from: max_tokens, a distribution or the dataset."""
    c = run.config
    if c.dataset is not None and c.dataset.output_tokens == "dataset":
        return "output tokens from the dataset"
    if c.output_distribution is not None:
        return f"output tokens {c.output_distribution.label()}"
    return f"max_tokens {c.max_tokens}"


def results_table(run: RunResult) -> str:
    """The reference's columns (plus TTFT tail and outcome counts), one row per scenario."""
    header = (
        "input\ntokens",
        "conc.",
        "output\ntok/s",
        "E2E tok/s\nper req",
        "TTFT ms\nmedian",
        "TTFT ms\np90 / p99",
        "decode\ntok/s",
        "ok /\nfailed",
    )
    lines = [render.note(f"run {run.metadata.run_id}: {run.config.model} ({run.config.mode}, {_outputs(run)})")]
    rows = scenario_rows(run)
    table = render.columns(
        header,
        [
            (
                _input(r),
                str(r.concurrency),
                fmt(r.output_tok_s),
                fmt(r.e2e_tok_s),
                fmt(r.ttft_median_ms, 1),
                _tail(r),
                fmt(r.decode_tok_s),
                f"{r.ok} / {r.failed}",
            )
            for r in rows
        ],
        right=range(1, 7),
        upper=False,
    ).split("\n")
    lines += table[:2]
    for r, line in zip(rows, table[2:], strict=False):
        lines.append(line)
        if r.client_bound:
            lines.append(CLIENT_BOUND)
        elif r.host_busy:
            lines.append(HOST_BUSY)
    accepted = [
        (s.summary.name, s.summary.server.spec_decode_acceptance_rate)
        for s in run.scenarios
        if s.summary.server.spec_decode_acceptance_rate is not None
    ]
    if accepted:  # speculative decoding (MTP): how much of the draft the model kept
        lines.append(render.note("spec-decode acceptance: " + ", ".join(f"{name} {rate:.1%}" for name, rate in accepted)))
    lines.append(render.note(throughput_words(run.config.mode)))
    if any(r.ttft_p99_ms is None and r.ttft_samples for r in rows):
        lines.append(render.note(tail_rule()))
    if any(_input(r) != str(r.input_tokens_target) for r in rows):
        lines.append(render.note("input tokens: asked (measured after the chat template, where it differs)"))
    return "\n".join(lines)


VERDICT_WORDS = {
    "faster": "faster",
    "slower": "slower",
    "no change detected": "no change detected",
    "too few": "too few to compare",
    "baseline 0": "baseline is 0",
}


def _interval(f: ComparedFigure) -> str:
    """The change with its interval, or why there is none (the sample counts of both sides)."""
    if f.low_pct is not None and f.high_pct is not None:
        return f"{fmt_pct(f.change_pct)} [{f.low_pct:+.1f}, {f.high_pct:+.1f}]"
    if f.units == (0, 0):
        return f"{fmt_pct(f.change_pct)}, no {f.unit} to resample"
    return f"{fmt_pct(f.change_pct)}, {f.units[0]} vs {f.units[1]} {f.unit}"


def comparison_table(baseline: RunResult, run: RunResult) -> str:
    """Per scenario and figure: the baseline, this run, the verdict and the change with its interval."""
    compared = compare_runs(baseline, run)
    lines = [render.note(f"{baseline.metadata.run_id} (baseline) -> {run.metadata.run_id} (this run)")]
    rows: list[tuple[str, ...]] = []
    headings: dict[int, list[str]] = {}  # figure row index -> the scenario lines printed before it
    for sc in compared:
        heading = sc.name + (" (client-bound)" if sc.client_bound else "")
        if not (sc.in_baseline and sc.in_run):
            heading += ": only in " + ("the baseline" if sc.in_baseline else "this run")
        headings.setdefault(len(rows), []).append(heading)
        if sc.in_baseline and sc.in_run:
            for f in sc.figures:
                digits = 1 if f.metric.endswith("_ms") else 2
                rows.append(("  " + f.label, fmt(f.baseline, digits), fmt(f.run, digits), VERDICT_WORDS[f.verdict], _interval(f)))
    confidence = f"{compared[0].confidence:.0%}" if compared else "95%"
    table = render.columns(("", "baseline", "this run", "verdict", f"change [{confidence} CI]"), rows, right=(1, 2)).split("\n")
    lines.append(table[0])
    row = 0
    for line in table[1:]:
        if not line.startswith("   "):  # a figure's first line, not the wrapped rest of its last cell
            lines += headings.pop(row, [])
            row += 1
        lines.append(line)
    lines += [line for rest in headings.values() for line in rest]  # scenarios after the last figure
    lines.append(
        render.note(
            f"medians (output tok/s: of the rounds; sustained and rate: the steady window); change = this run / baseline - 1, "
            f"its {confidence} bootstrap interval resampling requests (rounds, window slices) {RESAMPLES} times; faster or "
            f"slower only when the interval excludes 0; too few: under {MIN_UNITS} on a side"
        )
    )
    return "\n".join(lines)


def fingerprint_lines(baseline: RunResult, run: RunResult) -> list[tuple[str, bool]]:
    """The two runs' fingerprints: (line, True when it shows a field that differs)."""
    rows = compare_fingerprints(baseline, run)
    lines: list[tuple[str, bool]] = [(render.note("fingerprints (* differs):"), False)]
    label = max((len(row.field) for row in rows), default=0)
    for row in rows:
        value = row.run if not row.differs else f"baseline: {row.baseline}\nthis run: {row.run}"
        text = render.details([(("* " if row.differs else "  ") + row.field.ljust(label), value)])  # aligned across rows
        lines += [(line, row.differs) for line in text.split("\n")]
    return lines


def _api_name(c: Comparison, api: str | None) -> str:
    """The managed API the comparison priced: its name when the caller knows it, and its prices."""
    prices = (c.inputs.api_input_usd_per_m, c.inputs.api_output_usd_per_m)
    said = f"{prices[0]:g} / {prices[1]:g} USD per 1M input / output tokens"
    return f"{api} ({said})" if api else f"a managed API at {said}"


def costs_table(comparisons: Mapping[str, Comparison], run: RunResult | None = None, api: str | None = None) -> str:
    """Self-hosted vs managed API per scenario, in the results' order, naming the API priced (`api`)."""
    order = [r.name for r in scenario_rows(run)] if run is not None else []
    names = sorted(comparisons, key=lambda n: (order.index(n) if n in order else len(order), n))
    first = comparisons[names[0]]
    lines = [
        render.note(f"Self-hosted vs managed API (per month, {first.inputs.hours:g} h at the measured throughput)"),
        render.note(f"priced against {_api_name(first, api)}"),
    ]
    rows = [
        (
            n,
            fmt(c.inputs.output_tok_s),
            fmt(c.self_hosted_monthly_usd, 0),
            fmt(c.api_monthly_usd, 0),
            fmt(c.ratio_self_hosted_to_api),
            fmt(c.self_hosted_usd_per_m_output),
            f"{c.break_even_utilization:.0%}" if c.breaks_even else "never",
        )
        for n, c in ((n, comparisons[n]) for n in names)
    ]
    header = (
        "scenario",
        "output\ntok/s",
        "self-hosted\nUSD",
        "API\nUSD",
        "self-hosted\n/ API",
        "USD per 1M\noutput",
        "break-\neven",
    )
    lines.append(render.columns(header, rows, right=range(1, 6), upper=False))
    best = min(names, key=lambda n: comparisons[n].break_even_utilization)
    lines.append(render.note(f"break-even, best scenario ({best}): {comparisons[best].break_even_words()}"))
    return "\n".join(lines)


def capacity_text(run: RunResult) -> str:
    """Goodput at the SLOs per scenario and the saturation sweep's answer ('' without SLOs)."""
    if not run.config.slos:
        return ""
    lines = [render.note(f"Goodput at the SLO: {slo_text(run)}")]
    lines.append(render.columns(GOODPUT_HEADER, goodput_rows(run), right=range(2, 6), upper=False))
    lines.append(render.note(GOODPUT_WORDS))
    sweep = sweep_lines(run)
    if sweep:
        lines.append(render.note(sweep[0]))
        lines += [render.note(line, "  - ") for line in sweep[1:]]
    if cost := cost_line(run):
        lines.append(render.note(cost))
    return "\n".join(lines)


def print_run(
    run: RunResult,
    *,
    baseline: RunResult | None = None,
    comparisons: Mapping[str, Comparison] | None = None,
    api: str | None = None,
    file: TextIO | None = None,
) -> None:
    """Print the results table, the comparison and costs when given (priced against `api`), then every warning."""
    out = file or sys.stdout
    print(results_table(run), file=out)
    if run.dataset is not None or run.config.input_distribution or run.config.output_distribution:
        print("prompts: " + prompts_text(run), file=out)
    if capacity := capacity_text(run):
        print("\n" + capacity, file=out)
    if baseline is not None:
        print("\n" + comparison_table(baseline, run) + "\n", file=out)
        # Rich colours the differing fields on a terminal and writes plain text to a pipe.
        console = Console(file=out, highlight=False, soft_wrap=True)
        for line, differs in fingerprint_lines(baseline, run):
            console.print(Text(line, style="bold yellow" if differs else ""))
    if comparisons:
        print("\n" + costs_table(comparisons, run, api), file=out)
    for warning in warnings(run):
        print(render.note(warning.replace("**", ""), "! "), file=out)


def run_json(
    run: RunResult,
    *,
    baseline: RunResult | None = None,
    comparisons: Mapping[str, Comparison] | None = None,
) -> dict[str, Any]:
    """The same content as print_run, as a JSON-ready dict."""
    out: dict[str, Any] = {
        "run_id": run.metadata.run_id,
        "failed_scenarios": run.failed_scenarios,
        "warnings": [w.replace("**", "") for w in warnings(run)],
        "scenarios": [r.as_dict() for r in scenario_rows(run)],
    }
    if run.config.slos:
        out["slo"] = {s.summary.name: s.summary.slo.model_dump(mode="json") for s in run.scenarios if s.summary.slo}
    if run.sweep is not None:
        out["sweep"] = run.sweep.model_dump(mode="json")
    if run.slo_cost is not None:
        out["slo_cost"] = run.slo_cost.model_dump(mode="json") | {"breaks_even": run.slo_cost.breaks_even}
    if baseline is not None:
        out["baseline_run_id"] = baseline.metadata.run_id
        out["comparison"] = [c.as_dict() for c in compare_runs(baseline, run)]
        out["fingerprints"] = [row.as_dict() for row in compare_fingerprints(baseline, run)]
    if comparisons:
        out["costs"] = {name: c.model_dump(mode="json") | {"breaks_even": c.breaks_even} for name, c in comparisons.items()}
    return out
