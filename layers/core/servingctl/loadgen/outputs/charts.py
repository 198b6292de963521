"""PNG charts of a run (matplotlib's object API with the Agg canvas: no pyplot, no display):
output tok/s (output_tok_s) vs concurrency per input length, every request's TTFT as a box per scenario, the
server's /metrics over the run's time (requests running and waiting, KV-cache use, generated tok/s,
spec-decode acceptance; one band per scenario) and a side-by-side of two runs with each bar's
bootstrap interval. Builders return the Figure so callers can inspect it."""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from servingctl.loadgen import bootstrap
from servingctl.loadgen.outputs.rows import COMPARED, Compared, ScenarioRow, compare_runs, scenario_rows
from servingctl.schema.results import RunResult, ScenarioResult, ServerSample

OUTPUT_PNG = "output_tok_s.png"
# What the y axis of output_tok_s.png is, by mode.
_THROUGHPUT_OF = {"burst": "median of measured rounds", "sustained": "steady window", "rate": "steady window"}
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


def output_figure(run: RunResult) -> Figure:
    """Output tok/s (the results' output_tok_s) against concurrency, one line per input length."""
    fig = _figure()
    ax = fig.add_subplot()
    # Each row with its throughput (rows without one are not drawn).
    by_input: dict[int, list[tuple[ScenarioRow, float]]] = defaultdict(list)
    for row in scenario_rows(run):
        if row.output_tok_s is not None:
            by_input[row.input_tokens].append((row, row.output_tok_s))
    for input_tokens, rows in sorted(by_input.items()):
        ax.plot([r.concurrency for r, _ in rows], [tok_s for _, tok_s in rows], marker="o", label=f"{input_tokens} input tokens")
    _mark_client_bound(ax, [(r.concurrency, tok_s) for rows in by_input.values() for r, tok_s in rows if r.client_bound])
    ax.set_xscale("log", base=2)
    concurrencies = sorted({r.concurrency for rows in by_input.values() for r, _ in rows})
    ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel(f"output tok/s ({_THROUGHPUT_OF[run.config.mode]})")
    ax.set_title(f"Output tok/s: {run.config.model} ({run.metadata.run_id})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


# A TTFT spread wider than this (slowest / fastest) goes on a log axis, where both ends are readable.
LOG_SPREAD = 20.0


def ttft_figure(run: RunResult) -> Figure:
    """Every request's TTFT, one box per scenario (median, quartiles, whiskers to 1.5 IQR, outliers as
    dots), scenarios by input length then concurrency (a sweep: one box per concurrency it tried);
    a log axis when the TTFTs spread over more than LOG_SPREAD x."""
    fig = _figure()
    ax = fig.add_subplot()
    rows = {r.name: r for r in scenario_rows(run)}
    scenarios = sorted(
        (s for s in run.scenarios if s.summary.name in rows),
        key=lambda s: (s.summary.input_tokens, s.summary.concurrency, s.summary.name),
    )
    data = [(s.summary, [r.ttft_ms for r in s.records if r.ok and not r.warmup and r.ttft_ms is not None]) for s in scenarios]
    data = [(summary, values) for summary, values in data if values]
    one_input = len({summary.input_tokens for summary, _ in data}) == 1
    labels = [
        f"c={summary.concurrency}" if one_input else f"in {summary.input_tokens}\nc={summary.concurrency}" for summary, _ in data
    ]
    if data:
        ax.boxplot([values for _, values in data], tick_labels=labels, showfliers=True, flierprops={"markersize": 3})
        counts = [len(values) for _, values in data]
        for x, n in enumerate(counts, start=1):
            ax.annotate(f"n={n}", (x, 0.0), xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=7)
        everything = [v for _, values in data for v in values]
        if min(everything) > 0 and max(everything) / min(everything) > LOG_SPREAD:
            ax.set_yscale("log")
        _mark_client_bound(
            ax, [(x, statistics.median(values)) for x, (summary, values) in enumerate(data, 1) if summary.client_bound]
        )
    inputs = f" ({data[0][0].input_tokens} input tokens)" if data and one_input else ""
    ax.set_xlabel("concurrency" + inputs if one_input else "scenario")
    ax.set_ylabel("TTFT ms per request" + (" (log)" if ax.get_yscale() == "log" else ""))
    ax.set_title(f"Time to first token: {run.config.model} ({run.metadata.run_id})")
    ax.grid(True, axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


def _error(
    c: Compared, scenario: ScenarioResult, value: float | None, kind: bootstrap.Statistic, name: str
) -> tuple[float, float]:
    """Below and above `value`: its bootstrap confidence interval's reach (0, 0 when too few units)."""
    found = bootstrap.interval(c.units(scenario), seed=bootstrap.seed_for(name, c.metric), kind=kind)
    if found is None or value is None:
        return 0.0, 0.0
    return max(value - found[0], 0.0), max(found[1] - value, 0.0)


def compare_figure(baseline: RunResult, run: RunResult) -> Figure:
    """Grouped bars per scenario for both runs: output tok/s (left) and median TTFT (right), each
    bar with its 95 % bootstrap interval (bench.bootstrap, none under MIN_UNITS units); one legend
    under both panels, where it hides no bar."""
    compared = [c for c in compare_runs(baseline, run) if c.in_baseline and c.in_run]
    fig = _figure(max(7.0, 1.2 * len(compared) + 3), 5.0)
    names = [c.name for c in compared]
    sides = [({s.summary.name: s for s in r.scenarios}, r) for r in (baseline, run)]
    width = 0.4
    for i, metric in enumerate(("output_tok_s", "ttft_median_ms")):
        ax = fig.add_subplot(1, 2, i + 1)
        spec = next(c for c in COMPARED if c.metric == metric)
        figures = [next(f for f in c.figures if f.metric == metric) for c in compared]
        xs = range(len(compared))
        kinds: list[bootstrap.Statistic] = ["mean" if f.unit == "windows" else spec.kind for f in figures]
        for side, ((by_name, result), offset) in enumerate(zip(sides, (-width / 2, width / 2), strict=True)):
            values = [(f.baseline if side == 0 else f.run) for f in figures]
            errors = [_error(spec, by_name[n], v, k, n) for n, v, k in zip(names, values, kinds, strict=True)]
            bars = ax.bar(
                [x + offset for x in xs],
                [v or 0.0 for v in values],
                width,
                yerr=[[e[0] for e in errors], [e[1] for e in errors]],
                capsize=3,
                label=f"{'baseline' if side == 0 else 'this run'} {result.metadata.run_id}",
            )
            if side == 1:
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
        ax.set_ylabel(f"{spec.label} ({'median' if metric == 'ttft_median_ms' else 'median of rounds'}, 95% CI)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.margins(y=0.15)  # room for the change labels above the tallest bar
    handles, labels = fig.axes[0].get_legend_handles_labels() if fig.axes else ([], [])
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8)
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
    figures = [(OUTPUT_PNG, output_figure(run)), (TTFT_PNG, ttft_figure(run))]
    if (server := server_figure(run)) is not None:  # under the latency chart; not for servers without /metrics
        figures.append((SERVER_PNG, server))
    if baseline is not None:
        figures.append((COMPARE_PNG, compare_figure(baseline, run)))
    paths = []
    for name, fig in figures:
        fig.savefig(out / name, dpi=110)
        paths.append(out / name)
    return paths
