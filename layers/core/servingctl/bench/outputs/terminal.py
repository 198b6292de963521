"""The terminal rendering of a run (rich tables) and its JSON twin for scripts: the reference's
table, warnings, and optionally the side-by-side of a baseline run and the cost comparison."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

from servingctl.bench.models import RunResult
from servingctl.bench.outputs.markdown import fmt, fmt_pct, warnings
from servingctl.bench.outputs.rows import COMPARED, compare_runs, scenario_rows
from servingctl.costs import Comparison


TERMINAL_HEADER = (
    "input tokens", "conc.", "aggregate tok/s", "E2E tok/s per req", "median TTFT ms", "decode tok/s",
    "p90 TTFT ms", "p99 TTFT ms", "ok/failed",
)


def results_table(run: RunResult) -> Table:
    """The reference's columns (plus TTFT tail and outcome counts), client-bound rows flagged in red."""
    table = Table(title=f"{run.metadata.run_id}: {run.config.model} ({run.config.mode}, max_tokens {run.config.max_tokens})")
    # Short headers: the table must stay readable in an 80-column terminal.
    for header in TERMINAL_HEADER:
        table.add_column(header, justify="right")
    for r in scenario_rows(run):
        table.add_row(
            str(r.input_tokens), str(r.concurrency), fmt(r.aggregate_tok_s), fmt(r.e2e_tok_s),
            fmt(r.ttft_median_ms, 1), fmt(r.decode_tok_s), fmt(r.ttft_p90_ms, 1), fmt(r.ttft_p99_ms, 1),
            f"{r.ok}/{r.failed}" + (" [bold]CLIENT-BOUND[/]" if r.client_bound else ""),
            style="red" if r.client_bound else None,
        )
    return table


def comparison_table(baseline: RunResult, run: RunResult) -> Table:
    """Per scenario: baseline -> this run (change in %) for each compared figure."""
    table = Table(title=f"{baseline.metadata.run_id} (baseline) → {run.metadata.run_id}")
    table.add_column("scenario")
    for _, label, _ in COMPARED:
        table.add_column(label, justify="right")
    for sc in compare_runs(baseline, run):
        cells = [
            f"{fmt(f.baseline, 1)}→{fmt(f.run, 1)} {fmt_pct(f.change_pct).replace(' ', '')}" for f in sc.figures
        ]
        table.add_row(sc.name + (" [bold red]CLIENT-BOUND[/]" if sc.client_bound else ""), *cells)
    return table


def costs_table(comparisons: Mapping[str, Comparison]) -> Table:
    """Self-hosted vs managed API per scenario."""
    table = Table(title="Self-hosted vs managed API (per month)")
    for i, header in enumerate(("scenario", "aggregate tok/s", "self-hosted USD", "API USD", "self-hosted / API", "USD per 1M output", "break-even")):
        table.add_column(header, justify="left" if i == 0 else "right")
    for name, c in comparisons.items():
        table.add_row(
            name, fmt(c.inputs.aggregate_tok_s), fmt(c.self_hosted_monthly_usd, 0), fmt(c.api_monthly_usd, 0),
            fmt(c.ratio_self_hosted_to_api), fmt(c.self_hosted_usd_per_m_output),
            f"{c.break_even_utilization:.0%}" + ("" if c.breaks_even else " (never)"),
        )
    return table


def print_run(
    run: RunResult,
    console: Console | None = None,
    *,
    baseline: RunResult | None = None,
    comparisons: Mapping[str, Comparison] | None = None,
) -> None:
    """Print the results table, the comparison and costs when given, then every warning."""
    console = console or Console()
    console.print(results_table(run))
    if baseline is not None:
        console.print(comparison_table(baseline, run))
    if comparisons:
        console.print(costs_table(comparisons))
    for warning in warnings(run):
        console.print(f"[bold red]![/] {warning.replace('**', '')}", highlight=False)


def run_json(
    run: RunResult,
    *,
    baseline: RunResult | None = None,
    comparisons: Mapping[str, Comparison] | None = None,
) -> dict:
    """The same content as print_run, as a JSON-ready dict."""
    out: dict = {
        "run_id": run.metadata.run_id,
        "failed_scenarios": run.failed_scenarios,
        "warnings": [w.replace("**", "") for w in warnings(run)],
        "scenarios": [r.as_dict() for r in scenario_rows(run)],
    }
    if baseline is not None:
        out["baseline_run_id"] = baseline.metadata.run_id
        out["comparison"] = [c.as_dict() for c in compare_runs(baseline, run)]
    if comparisons:
        out["costs"] = {name: c.model_dump(mode="json") | {"breaks_even": c.breaks_even} for name, c in comparisons.items()}
    return out
