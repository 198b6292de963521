"""PNG charts of a run (matplotlib's object API with the Agg canvas: no pyplot, no display):
aggregate tok/s vs concurrency per input length, TTFT (median, p90 whisker) vs input length per
concurrency, and a side-by-side of two runs. Builders return the Figure so callers can inspect it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from servingctl.schema.results import RunResult
from servingctl.bench.outputs.rows import ScenarioRow, compare_runs, scenario_rows

AGGREGATE_PNG = "aggregate_tok_s.png"
TTFT_PNG = "ttft.png"
COMPARE_PNG = "compare.png"
CLIENT_BOUND_LABEL = "client-bound (client's limit, not the server's)"


def _figure(width: float = 7.0, height: float = 4.5) -> Figure:
    """A figure on an Agg canvas (safe in threads and without a display)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _mark_client_bound(ax: Axes, points: list[tuple[float, float]]) -> None:
    """Overlay a red cross on figures the client limited, so nobody reads them as the server's."""
    if points:
        xs, ys = zip(*points)
        ax.plot(xs, ys, linestyle="none", marker="x", color="red", markersize=12, label=CLIENT_BOUND_LABEL)


def aggregate_figure(run: RunResult) -> Figure:
    """Aggregate tok/s against concurrency, one line per input length."""
    fig = _figure()
    ax = fig.add_subplot()
    by_input: dict[int, list[ScenarioRow]] = defaultdict(list)
    for row in scenario_rows(run):
        if row.aggregate_tok_s is not None:
            by_input[row.input_tokens].append(row)
    for input_tokens, rows in sorted(by_input.items()):
        ax.plot([r.concurrency for r in rows], [r.aggregate_tok_s for r in rows], marker="o", label=f"{input_tokens} input tokens")
    _mark_client_bound(ax, [(r.concurrency, r.aggregate_tok_s) for rows in by_input.values() for r in rows if r.client_bound])
    ax.set_xscale("log", base=2)
    concurrencies = sorted({r.concurrency for rows in by_input.values() for r in rows})
    ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("aggregate output tok/s")
    ax.set_title(f"Aggregate throughput: {run.config.model} ({run.metadata.run_id})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def ttft_figure(run: RunResult) -> Figure:
    """Median TTFT against input length, one line per concurrency, whiskers up to p90."""
    fig = _figure()
    ax = fig.add_subplot()
    by_conc: dict[int, list[ScenarioRow]] = defaultdict(list)
    for row in scenario_rows(run):
        if row.ttft_median_ms is not None:
            by_conc[row.concurrency].append(row)
    for concurrency, rows in sorted(by_conc.items()):
        medians = [r.ttft_median_ms for r in rows]
        upper = [max((r.ttft_p90_ms if r.ttft_p90_ms is not None else r.ttft_median_ms) - r.ttft_median_ms, 0.0) for r in rows]
        ax.errorbar(
            [r.input_tokens for r in rows], medians, yerr=[[0.0] * len(rows), upper],
            marker="o", capsize=4, label=f"concurrency {concurrency}",
        )
    _mark_client_bound(ax, [(r.input_tokens, r.ttft_median_ms) for rows in by_conc.values() for r in rows if r.client_bound])
    ax.set_xlabel("input tokens")
    ax.set_ylabel("TTFT ms (median, whisker to p90)")
    ax.set_title(f"Time to first token: {run.config.model} ({run.metadata.run_id})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def compare_figure(baseline: RunResult, run: RunResult) -> Figure:
    """Grouped bars per scenario for both runs: aggregate tok/s (left) and median TTFT (right)."""
    compared = [c for c in compare_runs(baseline, run) if c.in_baseline and c.in_run]
    fig = _figure(max(7.0, 1.2 * len(compared) + 3), 4.5)
    names = [c.name for c in compared]
    width = 0.4
    for i, (metric, ylabel) in enumerate((("aggregate_tok_s", "aggregate output tok/s"), ("ttft_median_ms", "median TTFT ms"))):
        ax = fig.add_subplot(1, 2, i + 1)
        figures = [next(f for f in c.figures if f.metric == metric) for c in compared]
        xs = range(len(compared))
        ax.bar([x - width / 2 for x in xs], [f.baseline or 0.0 for f in figures], width, label=f"baseline {baseline.metadata.run_id}")
        bars = ax.bar([x + width / 2 for x in xs], [f.run or 0.0 for f in figures], width, label=f"this run {run.metadata.run_id}")
        for bar, f in zip(bars, figures):
            if f.change_pct is not None:
                ax.annotate(f"{f.change_pct:+.0f}%", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), names, rotation=45, ha="right")
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{baseline.metadata.run_id} vs {run.metadata.run_id}")
    return fig


def write_charts(run: RunResult, directory: Path | str, *, baseline: RunResult | None = None) -> list[Path]:
    """Save the charts of a run (and the comparison when a baseline is given) as PNGs in DIR."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    figures = [(AGGREGATE_PNG, aggregate_figure(run)), (TTFT_PNG, ttft_figure(run))]
    if baseline is not None:
        figures.append((COMPARE_PNG, compare_figure(baseline, run)))
    paths = []
    for name, fig in figures:
        fig.savefig(out / name, dpi=110)
        paths.append(out / name)
    return paths
