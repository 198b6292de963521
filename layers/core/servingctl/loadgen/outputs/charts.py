"""PNG charts of a run (matplotlib's object API with the Agg canvas: no pyplot, no display):
output tok/s (output_tok_s) vs concurrency (mode rate: vs the offered rate) per input length, every request's TTFT
as a box per scenario, the saturation sweep's search (each step's SLO'd figures and goodput with its
verdict and order, the limits, the answer), the server's /metrics over the run's time (requests
running and waiting, KV-cache use, generated tok/s, spec-decode acceptance; one band per scenario)
and a side-by-side of two runs with each bar's bootstrap interval. Builders return the Figure so
callers can inspect it."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from servingctl.loadgen import bootstrap
from servingctl.loadgen.outputs.capacity import verdict
from servingctl.loadgen.outputs.rows import COMPARED, Compared, ScenarioRow, compare_runs, scenario_rows
from servingctl.loadgen.slo import request_value
from servingctl.loadgen.stats import percentile
from servingctl.schema.results import RunResult, ScenarioResult, ScenarioSummary, ServerSample, Slo

OUTPUT_PNG = "output_tok_s.png"
# What the y axis of output_tok_s.png is, by mode.
_THROUGHPUT_OF = {"burst": "median of measured rounds", "sustained": "steady window", "rate": "steady window"}
TTFT_PNG = "ttft.png"
SWEEP_PNG = "sweep.png"
COMPARE_PNG = "compare.png"
SERVER_PNG = "server_metrics.png"
# A sweep step's verdict (capacity.verdict) -> its marker and colour.
VERDICT_STYLE = {
    "met": {"marker": "o", "color": "tab:green"},
    "missed": {"marker": "X", "color": "tab:red"},
    "saturated": {"marker": "^", "color": "tab:orange"},
    "stalled": {"marker": "s", "color": "tab:purple"},
}
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
    """Output tok/s (the results' output_tok_s) against concurrency, one line per input length (mode rate: against the offered
    rate, one line per input length and cap on requests in flight)."""
    fig = _figure()
    ax = fig.add_subplot()
    by_rate = run.config.mode == "rate"
    rates = {s.summary.name: s.summary.rate or 0.0 for s in run.scenarios}
    caps = len({s.summary.concurrency for s in run.scenarios}) > 1

    def x_of(row: ScenarioRow) -> float:
        return rates[row.name] if by_rate else row.concurrency

    # Each row with its throughput (rows without one are not drawn), a line per input length (and cap).
    lines: dict[tuple[int, int], list[tuple[ScenarioRow, float]]] = defaultdict(list)
    for row in sorted(scenario_rows(run), key=x_of):
        if row.output_tok_s is not None:
            lines[(row.input_tokens, row.concurrency if by_rate and caps else 0)].append((row, row.output_tok_s))
    for (input_tokens, cap), rows in sorted(lines.items()):
        label = f"{input_tokens} input tokens" + (f", at most {cap} in flight" if cap else "")
        ax.plot([x_of(r) for r, _ in rows], [tok_s for _, tok_s in rows], marker="o", label=label)
    _mark_client_bound(ax, [(x_of(r), tok_s) for rows in lines.values() for r, tok_s in rows if r.client_bound])
    ax.set_xscale("log", base=2)
    xs = sorted({x_of(r) for rows in lines.values() for r, _ in rows})
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xlabel("offered rate (requests/s)" if by_rate else "concurrency (requests in flight)")
    ax.set_ylabel(f"output tok/s ({_THROUGHPUT_OF[run.config.mode]})")
    ax.set_title(f"Output tok/s: {run.config.model}\n{run.metadata.run_id}", fontsize=10)
    ax.grid(True, alpha=0.3)
    if lines:
        ax.legend()
    else:  # every request failed: say so where the lines would be
        ax.text(0.5, 0.5, "no scenario has an output tok/s (see the failures)", ha="center", transform=ax.transAxes)
    return fig


# A TTFT spread wider than this (slowest / fastest) goes on a log axis, where both ends are readable.
LOG_SPREAD = 20.0


def _box_label(summary: ScenarioSummary, one_input: bool, one_cap: bool) -> str:
    """A TTFT box's name: its input length (when several), concurrency (mode rate: when several caps) and rate."""
    parts = [] if one_input else [f"in {summary.input_tokens}"]
    if summary.rate is None or not one_cap:
        parts.append(f"c={summary.concurrency}")
    if summary.rate is not None:
        parts.append(f"{summary.rate:g}/s")
    return "\n".join(parts)


def ttft_figure(run: RunResult) -> Figure:
    """Every request's TTFT, one box per scenario (median, quartiles, whiskers to 1.5 IQR, outliers as
    dots), scenarios by input length then concurrency then rate (a sweep: one box per concurrency or
    rate it tried), each TTFT SLO's limit as a line; a log axis when the TTFTs spread over more than
    LOG_SPREAD x."""
    fig = _figure()
    ax = fig.add_subplot()
    rows = {r.name: r for r in scenario_rows(run)}
    scenarios = sorted(
        (s for s in run.scenarios if s.summary.name in rows),
        key=lambda s: (s.summary.input_tokens, s.summary.concurrency, s.summary.rate or 0.0, s.summary.name),
    )
    data = [(s.summary, [r.ttft_ms for r in s.records if r.ok and not r.warmup and r.ttft_ms is not None]) for s in scenarios]
    data = [(summary, values) for summary, values in data if values]
    one_input = len({summary.input_tokens for summary, _ in data}) == 1
    one_cap = len({summary.concurrency for summary, _ in data}) == 1
    labels = [_box_label(summary, one_input, one_cap) for summary, _ in data]
    by_rate = bool(data) and all(summary.rate is not None for summary, _ in data)
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
        for slo in (slo for slo in run.config.slos if slo.metric == "ttft_ms"):
            ax.axhline(slo.limit, color="tab:red", linestyle="--", linewidth=1, label=f"SLO {slo.label()}")
    inputs = f" ({data[0][0].input_tokens} input tokens)" if data and one_input else ""
    across = "offered rate, requests/s" if by_rate and one_cap else "concurrency"
    ax.set_xlabel(across + inputs if one_input else "scenario")
    ax.set_ylabel("TTFT ms per request" + (" (log)" if ax.get_yscale() == "log" else ""))
    ax.set_title(f"Time to first token: {run.config.model}\n{run.metadata.run_id}", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


def _judged(scenario: ScenarioResult, slo: Slo, share: float) -> float | None:
    """The figure an SLO is judged on: its percentile, or (per request) the value `share` of the
    measured requests stay at or under (share 1: the slowest); a failed request counts as missed."""
    measured = [r for r in scenario.records if not r.warmup]
    values = sorted(v for r in measured if r.ok and (v := request_value(r, slo.metric)) is not None)
    if not values:
        return None
    if slo.percentile is not None:
        return percentile(values, 0.5 if slo.percentile == "p50" else int(slo.percentile[1:]) / 100)
    needed = math.ceil(share * len(measured))  # the requests that must meet it
    return values[needed - 1] if needed <= len(values) else math.inf


def _slo_words(slo: Slo, share: float) -> str:
    """What an SLO panel plots, in a few words."""
    if slo.percentile is not None:
        return f"{slo.metric} {slo.percentile}"
    return f"{slo.metric}, slowest of the {share:.0%}" if share < 1 else f"{slo.metric}, slowest request"


def sweep_figure(run: RunResult) -> Figure | None:
    """The saturation sweep's search (None without a sweep): x = each step's concurrency or offered
    rate (log 2); a panel per SLO with the figure it is judged on and the limit as a line, then goodput
    and all successful requests per second (a rate sweep: the completions against the rate offered);
    every step marked by its verdict (met, missed, saturated, stalled) and numbered in run order; the
    answer highlighted."""
    sweep = run.sweep
    if sweep is None or not sweep.steps:
        return None
    by_rate = sweep.axis == "rate"
    share = run.config.slo_share
    found = sweep.found_rate if by_rate else sweep.found
    scenarios = {s.summary.name: s for s in run.scenarios}
    steps = [(i, step, scenarios.get(step.scenario)) for i, step in enumerate(sweep.steps, 1)]
    slos = run.config.slos
    fig = _figure(8.0, 2.2 * (len(slos) + 1) + 1.2)
    axes = fig.subplots(len(slos) + 1, 1, sharex=True, squeeze=False)[:, 0]
    ordered = sorted(steps, key=lambda t: t[1].x())
    for ax, slo in zip(axes, slos, strict=False):
        points = [(step, _judged(sc, slo, share)) for _, step, sc in ordered if sc is not None]
        shown = [(step.x(), v) for step, v in points if v is not None and math.isfinite(v)]
        if shown:
            ax.plot(*zip(*shown, strict=True), color="grey", linewidth=1, zorder=1)
        top = max((v for _, v in shown), default=slo.limit)
        for number, step, sc in steps:
            value = _judged(sc, slo, share) if sc is not None else None
            if value is None:
                continue
            y = value if math.isfinite(value) else max(top, slo.limit) * 1.1  # every request failed: drawn at the top
            _mark_step(ax, number, step.x(), y, verdict(step))
        ax.axhline(slo.limit, color="tab:red", linestyle="--", linewidth=1, label=f"limit {slo.label()}")
        low = min((v for _, v in shown), default=0.0)
        if low > 0 and max(top, slo.limit) / low > LOG_SPREAD:  # a loose limit far above the figures: both readable
            ax.set_yscale("log")
        ax.set_ylabel(_slo_words(slo, share), fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    ax = axes[-1]
    good = [(step.x(), step.goodput_rps) for _, step, _ in ordered]
    ax.plot(*zip(*good, strict=True), color="tab:green", linewidth=1, label="goodput req/s", zorder=1)
    if by_rate:
        done = [(step.x(), step.achieved_rate_rps) for _, step, _ in ordered if step.achieved_rate_rps is not None]
        if done:
            ax.plot(*zip(*done, strict=True), color="tab:blue", linewidth=1, marker=".", label="completed req/s", zorder=1)
        xs = [step.x() for _, step, _ in ordered]
        ax.plot(xs, xs, color="grey", linestyle=":", linewidth=1, label="offered req/s")
    else:
        done = [(step.x(), sc.summary.slo.throughput_rps) for _, step, sc in ordered if sc is not None and sc.summary.slo]
        if done:
            ax.plot(*zip(*done, strict=True), color="tab:blue", linewidth=1, marker=".", label="all successful req/s", zorder=1)
    for number, step, _ in steps:
        _mark_step(ax, number, step.x(), step.goodput_rps, verdict(step))
    ax.set_ylabel("requests/s", fontsize=8)
    for kind, style in VERDICT_STYLE.items():  # the verdicts once in the legend, as markers
        if any(verdict(step) == kind for _, step, _ in steps):
            ax.plot([], [], linestyle="none", markersize=7, label=kind, **style)
    ax.legend(fontsize=7, loc="upper left", ncols=2)
    for a in axes:
        a.grid(True, alpha=0.3)
        a.margins(y=0.2)  # room for the order numbers
        if found is not None:
            a.axvline(found, color="tab:green", linewidth=6, alpha=0.2, zorder=0)
    ax.set_xscale("log", base=2)
    xs = sorted({step.x() for _, step, _ in steps})
    ax.set_xticks(xs, [f"{x:g}" for x in xs], rotation=45 if len(xs) > 6 else 0, fontsize=8)
    ax.minorticks_off()
    cap = run.config.concurrencies[0]
    ax.set_xlabel(f"offered rate, requests/s (at most {cap} in flight)" if by_rate else "concurrency (requests in flight)")
    unit = " req/s" if by_rate else ""
    answer = f"answer {found:g}{unit} (shaded)" if found is not None else "no answer: not met at the first step"
    fig.suptitle(
        f"Saturation sweep: {run.config.model} ({run.metadata.run_id})\n{answer}; stopped: {sweep.stop}; "
        "numbers: the order the steps ran",
        fontsize=9,
    )
    return fig


def _mark_step(ax: Axes, number: int, x: float, y: float, kind: str) -> None:
    """One sweep step: its verdict's marker and its order number beside it."""
    ax.plot([x], [y], linestyle="none", markersize=8, zorder=3, **VERDICT_STYLE[kind])  # type: ignore[arg-type]
    ax.annotate(str(number), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7)


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
                for bar, f, (_, above) in zip(bars, figures, errors, strict=True):
                    if f.change_pct is not None:  # above the interval's whisker, not through it
                        ax.annotate(
                            f"{f.change_pct:+.0f}%",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height() + above),
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
    # A sweep's throughput per step is in its search chart, beside the figures it decided on.
    sweep = sweep_figure(run)
    figures = [(SWEEP_PNG, sweep) if sweep is not None else (OUTPUT_PNG, output_figure(run)), (TTFT_PNG, ttft_figure(run))]
    if (server := server_figure(run)) is not None:  # under the latency chart; not for servers without /metrics
        figures.append((SERVER_PNG, server))
    if baseline is not None:
        figures.append((COMPARE_PNG, compare_figure(baseline, run)))
    paths = []
    for name, fig in figures:
        fig.savefig(out / name, dpi=110)
        paths.append(out / name)
    return paths
