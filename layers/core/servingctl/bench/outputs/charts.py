"""PNG charts of a run (matplotlib's object API with the Agg canvas: no pyplot, no display):
aggregate tok/s vs concurrency per input length, TTFT (median, p90 whisker) vs input length per
concurrency, the server's /metrics over the run's time (requests running and waiting, KV-cache use,
generated tok/s, spec-decode acceptance; one band per scenario) and a side-by-side of two runs.
Builders return the Figure so callers can inspect it."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from servingctl.bench.outputs.rows import ScenarioRow, compare_runs, scenario_rows
from servingctl.schema.results import RunResult, ServerSample

AGGREGATE_PNG = "aggregate_tok_s.png"
TTFT_PNG = "ttft.png"
COMPARE_PNG = "compare.png"
SERVER_PNG = "server_metrics.png"
CLIENT_BOUND_LABEL = "client-bound (client's limit, not the server's)"


def _figure(width: float = 7.0, height: float = 4.5) -> Figure:
    """A figure on an Agg canvas (safe in threads and without a display)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _mark_client_bound(ax: Axes, points: list[tuple[float, float]]) -> None:
    """Overlay a red cross on figures the client limited, so nobody reads them as the server's."""
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, linestyle="none", marker="x", color="red", markersize=12, label=CLIENT_BOUND_LABEL)


def aggregate_figure(run: RunResult) -> Figure:
    """Aggregate tok/s against concurrency, one line per input length."""
    fig = _figure()
    ax = fig.add_subplot()
    # Each row with its throughput (rows without one are not drawn).
    by_input: dict[int, list[tuple[ScenarioRow, float]]] = defaultdict(list)
    for row in scenario_rows(run):
        if row.aggregate_tok_s is not None:
            by_input[row.input_tokens].append((row, row.aggregate_tok_s))
    for input_tokens, rows in sorted(by_input.items()):
        ax.plot([r.concurrency for r, _ in rows], [tok_s for _, tok_s in rows], marker="o", label=f"{input_tokens} input tokens")
    _mark_client_bound(ax, [(r.concurrency, tok_s) for rows in by_input.values() for r, tok_s in rows if r.client_bound])
    ax.set_xscale("log", base=2)
    concurrencies = sorted({r.concurrency for rows in by_input.values() for r, _ in rows})
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
    # Each row with its median TTFT (rows without one are not drawn).
    by_conc: dict[int, list[tuple[ScenarioRow, float]]] = defaultdict(list)
    for row in scenario_rows(run):
        if row.ttft_median_ms is not None:
            by_conc[row.concurrency].append((row, row.ttft_median_ms))
    for concurrency, rows in sorted(by_conc.items()):
        medians = [median for _, median in rows]
        upper = [max((r.ttft_p90_ms if r.ttft_p90_ms is not None else median) - median, 0.0) for r, median in rows]
        ax.errorbar(
            [r.input_tokens for r, _ in rows],
            medians,
            yerr=[[0.0] * len(rows), upper],
            marker="o",
            capsize=4,
            label=f"concurrency {concurrency}",
        )
    _mark_client_bound(ax, [(r.input_tokens, median) for rows in by_conc.values() for r, median in rows if r.client_bound])
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
        ax.bar(
            [x - width / 2 for x in xs], [f.baseline or 0.0 for f in figures], width, label=f"baseline {baseline.metadata.run_id}"
        )
        bars = ax.bar(
            [x + width / 2 for x in xs], [f.run or 0.0 for f in figures], width, label=f"this run {run.metadata.run_id}"
        )
        for bar, f in zip(bars, figures, strict=True):
            if f.change_pct is not None:
                ax.annotate(
                    f"{f.change_pct:+.0f}%",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
        ax.set_xticks(list(xs), names, rotation=45, ha="right")
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{baseline.metadata.run_id} vs {run.metadata.run_id}")
    return fig


def _rates(times: list[float], totals: list[float | None]) -> tuple[list[float], list[float]]:
    """Per-second rates of a counter between consecutive samples (at the later sample's time)."""
    xs, ys = [], []
    for (t0, a), (t1, b) in pairwise(zip(times, totals, strict=True)):
        if a is not None and b is not None and t1 > t0:
            xs.append(t1)
            ys.append((b - a) / (t1 - t0))
    return xs, ys


def _acceptance(times: list[float], samples: list[ServerSample]) -> tuple[list[float], list[float]]:
    """Accepted / draft tokens between consecutive samples that drafted anything."""
    xs, ys = [], []
    for t, (a, b) in zip(times[1:], pairwise(samples), strict=True):
        a_drafted, b_drafted, a_accepted, b_accepted = (
            a.spec_draft_tokens,
            b.spec_draft_tokens,
            a.spec_accepted_tokens,
            b.spec_accepted_tokens,
        )
        if a_drafted is None or b_drafted is None or a_accepted is None or b_accepted is None:
            continue
        drafted = b_drafted - a_drafted
        if drafted > 0:
            xs.append(t)
            ys.append((b_accepted - a_accepted) / drafted)
    return xs, ys


def server_figure(run: RunResult) -> Figure | None:
    """The server's metrics over the run, stacked panels sharing the time axis (seconds since the
    first scenario started), each scenario a shaded band named at its top; None without samples."""
    scenarios = [s for s in run.scenarios if s.server_timeline]
    if not scenarios:
        return None
    origin = min(s.t0_wall for s in scenarios)
    series = []  # per scenario: (name, start s, end s, times s, samples)
    for s in scenarios:
        offset = (s.t0_wall - origin).total_seconds()
        times = [offset + p.t_ns / 1e9 for p in s.server_timeline]
        series.append((s.summary.name, offset, times[-1], times, s.server_timeline))
    spec = any(p.spec_draft_tokens is not None for *_, samples in series for p in samples)
    kv = any(p.kv_cache_usage is not None for *_, samples in series for p in samples)
    panels = ["requests", *(["kv"] if kv else []), "tokens", *(["spec"] if spec else [])]
    fig = _figure(8.0, 1.9 * len(panels) + 1.0)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, panel in zip(axes, panels, strict=True):
        for i, (name, start, end, times, samples) in enumerate(series):
            ax.axvspan(start, max(end, start + 0.5), color="grey", alpha=0.08 if i % 2 else 0.16, linewidth=0)
            first = i == 0
            if panel == "requests":
                ax.step(times, [p.running for p in samples], where="post", color="C0", label="running" if first else None)
                ax.step(times, [p.waiting for p in samples], where="post", color="C3", label="waiting" if first else None)
                ax.annotate(name, (start, 1.0), xycoords=("data", "axes fraction"), fontsize=7, va="bottom", rotation=20)
            elif panel == "kv":
                ax.plot(times, [None if p.kv_cache_usage is None else 100 * p.kv_cache_usage for p in samples], color="C2")
            elif panel == "tokens":
                ax.plot(*_rates(times, [p.generation_tokens for p in samples]), color="C1", marker=".")
            else:
                ax.plot(*_acceptance(times, samples), color="C4", marker=".")
        ax.set_ylabel(
            {"requests": "requests", "kv": "KV cache %", "tokens": "generated tok/s", "spec": "draft acceptance"}[panel],
            fontsize=8,
        )
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("seconds since the first scenario started (server /metrics about once a second)")
    fig.suptitle(f"Server metrics over time: {run.config.model} ({run.metadata.run_id})")
    return fig


def write_charts(run: RunResult, directory: Path | str, *, baseline: RunResult | None = None) -> list[Path]:
    """Save the charts of a run (and the comparison when a baseline is given) as PNGs in DIR."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    figures = [(AGGREGATE_PNG, aggregate_figure(run)), (TTFT_PNG, ttft_figure(run))]
    if (server := server_figure(run)) is not None:  # under the latency chart; not for servers without /metrics
        figures.append((SERVER_PNG, server))
    if baseline is not None:
        figures.append((COMPARE_PNG, compare_figure(baseline, run)))
    paths = []
    for name, fig in figures:
        fig.savefig(out / name, dpi=110)
        paths.append(out / name)
    return paths
