"""Charts: the plotted series are the run's figures, and the files are real PNGs."""

from datetime import timedelta

import matplotlib.image
import pytest

from servingctl.loadgen.outputs.charts import (
    CLIENT_BOUND_LABEL,
    SWEEP_PNG,
    VERDICT_STYLE,
    compare_figure,
    output_figure,
    server_figure,
    sweep_figure,
    ttft_figure,
    write_charts,
)
from servingctl.schema.results import ServerSample, Slo, SweepResult, SweepStep


def _summaries(run):
    return {s.summary.name: s.summary for s in run.scenarios}


def test_output_chart_has_one_line_per_input_length(run):
    s = _summaries(run)
    ax = output_figure(run).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"254 input tokens", "2046 input tokens", CLIENT_BOUND_LABEL}
    assert list(lines["254 input tokens"].get_xdata()) == [1, 2]
    assert list(lines["254 input tokens"].get_ydata()) == [s["in256-c1"].output_tok_s, s["in256-c2"].output_tok_s]
    assert list(lines["2046 input tokens"].get_ydata()) == [s["in2048-c1"].output_tok_s, s["in2048-c2"].output_tok_s]
    # The client-bound point is crossed out where it is plotted.
    assert list(lines[CLIENT_BOUND_LABEL].get_xydata()[0]) == [2, s["in2048-c2"].output_tok_s]
    assert ax.get_xlabel().startswith("concurrency")


def test_ttft_chart_shows_every_request_as_a_box_per_scenario(run):
    ax = ttft_figure(run).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["in 254\nc=1", "in 254\nc=2", "in 2046\nc=1", "in 2046\nc=2"]
    by_name = {s.summary.name: s for s in run.scenarios}
    ttfts = sorted(r.ttft_ms for r in by_name["in256-c2"].records if r.ok and not r.warmup)
    # The second box is in256-c2's requests: its lines reach from the fastest to the slowest.
    ys = [y for line in ax.lines if all(1.5 < x < 2.5 for x in line.get_xdata()) for y in line.get_ydata()]
    assert min(ys) == pytest.approx(ttfts[0]) and max(ys) == pytest.approx(ttfts[-1])
    ordered = sorted(run.scenarios, key=lambda s: (s.summary.input_tokens, s.summary.concurrency))
    assert [t.get_text() for t in ax.texts] == [f"n={s.summary.ttft_ms.count}" for s in ordered]
    assert ax.get_yscale() == "linear"  # 150 to 400 ms: no need for a log axis


def test_ttft_chart_of_a_sweep_is_one_box_per_concurrency_on_a_log_axis_when_spread(runs_of):
    sweep = runs_of("s", {(256, 1): {"ttft_ms": 10.0, "gap_ms": 5.0}, (256, 4): {"ttft_ms": 500.0, "gap_ms": 5.0}})
    ax = ttft_figure(sweep).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["c=1", "c=4"]
    assert ax.get_xlabel() == "concurrency (254 input tokens)"
    assert ax.get_yscale() == "log"  # 10 ms and 500 ms on one chart: both readable


def test_compare_chart_bars_carry_their_bootstrap_intervals_and_the_legend_is_outside(runs_of):
    from servingctl.loadgen import bootstrap
    from servingctl.loadgen.outputs.rows import COMPARED

    base = runs_of("base", {(256, 8): {"ttft_ms": 100.0, "gap_ms": 10.0, "rounds": 6}})
    slower = runs_of("slower", {(256, 8): {"ttft_ms": 130.0, "gap_ms": 10.0, "rounds": 6}})
    fig = compare_figure(base, slower)
    ttft_ax = fig.axes[1]
    spec = next(c for c in COMPARED if c.metric == "ttft_median_ms")
    [scenario] = slower.scenarios
    low, high = bootstrap.interval(spec.units(scenario), seed=bootstrap.seed_for("in256-c8", spec.metric))
    from matplotlib.container import ErrorbarContainer

    _base_error, run_error = [c for c in ttft_ax.containers if isinstance(c, ErrorbarContainer)]
    _line, _caps, (whiskers,) = run_error.lines
    [[(_, bottom), (_, top)]] = whiskers.get_segments()
    assert (bottom, top) == pytest.approx((low, high)) and low < top and bottom < high
    [legend] = fig.legends  # one legend for the figure, below the panels: never over a bar
    assert not any(ax.get_legend() for ax in fig.axes)
    assert [t.get_text() for t in legend.get_texts()] == ["baseline base", "this run slower"]


def test_charts_are_written_as_png(run, baseline, tmp_path):
    paths = write_charts(run, tmp_path, baseline=baseline)
    assert [p.name for p in paths] == ["output_tok_s.png", "ttft.png", "compare.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 300 and image.shape[1] > 500
    assert [p.name for p in write_charts(run, tmp_path / "solo")] == ["output_tok_s.png", "ttft.png"]


def _with_timelines(run, *, spec: bool):
    """Each scenario 3 s after the previous one, sampled each second: 2 running, 10 tokens/s,
    2 of every 3 drafted tokens accepted (when spec)."""
    for i, scenario in enumerate(run.scenarios):
        scenario.t0_wall = scenario.t0_wall + timedelta(seconds=3 * i)
        scenario.server_timeline = [
            ServerSample(
                t_ns=int(k * 1e9),
                running=2,
                waiting=0,
                kv_cache_usage=0.5 if spec else None,
                generation_tokens=100 * i + 10 * k,
                spec_draft_tokens=30 * k if spec else None,
                spec_accepted_tokens=20 * k if spec else None,
            )
            for k in range(3)
        ]
    return run


def test_server_chart_plots_the_metrics_over_the_run_time(run):
    fig = server_figure(_with_timelines(run, spec=True))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["requests", "KV cache %", "generated tok/s", "draft acceptance"]
    running = next(line for line in fig.axes[0].get_lines() if line.get_label() == "running")
    assert list(running.get_xdata()) == [0.0, 1.0, 2.0]  # the first scenario; the next ones start at 3 s
    xs = sorted(x for line in fig.axes[2].get_lines() for x in line.get_xdata())
    assert xs == [1.0, 2.0, 4.0, 5.0, 7.0, 8.0, 10.0, 11.0]  # a rate per interval, never across scenarios
    assert {y for line in fig.axes[2].get_lines() for y in line.get_ydata()} == {10.0}
    assert [y for line in fig.axes[3].get_lines() for y in line.get_ydata()] == pytest.approx([2 / 3] * 8)
    assert [t.get_text() for t in fig.axes[0].texts] == [s.summary.name for s in run.scenarios]


def test_server_chart_leaves_out_what_the_server_does_not_expose(run, tmp_path):
    assert server_figure(run) is None  # no /metrics: no chart, no file
    fig = server_figure(_with_timelines(run, spec=False))
    assert [ax.get_ylabel() for ax in fig.axes] == ["requests", "generated tok/s"]
    names = [p.name for p in write_charts(run, tmp_path)]
    assert names == ["output_tok_s.png", "ttft.png", "server_metrics.png"]
    assert matplotlib.image.imread(tmp_path / "server_metrics.png").shape[0] > 300


def _rate_sweep(runs_of):
    """A rate sweep at most 64 in flight: 2 req/s met, 4 saturated (completing 3.1), then 3 missed
    (its TTFTs past the 500 ms limit): the answer is 2 req/s."""
    run = runs_of("rs", {(256, 1): {"ttft_ms": 100.0, "gap_ms": 10.0}, (256, 2): {"ttft_ms": 300.0, "gap_ms": 10.0},
                         (256, 4): {"ttft_ms": 900.0, "gap_ms": 10.0}})  # fmt: skip
    rates = {1: 2.0, 2: 4.0, 4: 3.0}  # run order: 2, 4, 3
    for scenario in run.scenarios:
        summary = scenario.summary
        summary.mode, summary.rate, summary.concurrency = "rate", rates[summary.concurrency], 64
    slo = Slo(metric="ttft_ms", limit=500.0)
    run.config = run.config.model_copy(
        update={"mode": "rate", "sweep": True, "slos": [slo], "concurrencies": [64], "duration_s": 5.0}
    )
    by_rate = {s.summary.rate: s.summary.name for s in run.scenarios}
    steps = [
        SweepStep(concurrency=64, scenario=by_rate[2.0], met=True, goodput_rps=2.0, goodput_tok_s=20.0, output_tok_s=40.0,
                  ttft_median_ms=105.0, rate=2.0, scheduled_rate_rps=2.0, achieved_rate_rps=2.0),
        SweepStep(concurrency=64, scenario=by_rate[4.0], met=True, goodput_rps=3.1, goodput_tok_s=31.0, output_tok_s=62.0,
                  ttft_median_ms=310.0, rate=4.0, scheduled_rate_rps=4.0, achieved_rate_rps=3.1, saturated=True,
                  why="saturated: completed 3.10 req/s of 4.00 arriving (-22%)"),
        SweepStep(concurrency=64, scenario=by_rate[3.0], met=False, goodput_rps=0.0, goodput_tok_s=0.0, output_tok_s=50.0,
                  ttft_median_ms=915.0, rate=3.0, scheduled_rate_rps=3.0, achieved_rate_rps=2.9),
    ]  # fmt: skip
    run.sweep = SweepResult(
        axis="rate", steps=steps, found_rate=2.0, scenario=by_rate[2.0], stop="converged", reason="met at 2 req/s, missed at 3"
    )
    return run


def test_the_sweep_chart_shows_each_step_by_verdict_and_order_against_the_limit(runs_of):
    run = _rate_sweep(runs_of)
    fig = sweep_figure(run)
    slo_ax, rate_ax = fig.axes
    # The limit is a line; each step is marked where it ran, numbered in run order.
    assert [(line.get_label(), list(line.get_ydata())) for line in slo_ax.lines if line.get_label().startswith("limit")] == [
        ("limit ttft_ms=500", [500.0, 500.0])
    ]
    assert [(t.get_text(), t.xy[0]) for t in slo_ax.texts] == [("1", 2.0), ("2", 4.0), ("3", 3.0)]
    # Every request must meet it (share 1): each step is plotted at its slowest TTFT.
    by_name = {s.summary.name: s for s in run.scenarios}
    slowest = {s.x(): max(r.ttft_ms for r in by_name[s.scenario].records if r.ok and not r.warmup) for s in run.sweep.steps}
    marked = {x: y for t in slo_ax.texts for x, y in [t.xy]}
    assert marked == pytest.approx(slowest)
    assert slowest[3.0] > 500 > slowest[2.0]
    # The verdicts, each with its own marker, named once in the legend; the offered and completed rates.
    legend = [t.get_text() for t in rate_ax.get_legend().get_texts()]
    assert {"met", "saturated", "missed", "completed req/s", "offered req/s", "goodput req/s"} <= set(legend)
    points = [line for line in rate_ax.lines if len(line.get_xdata()) == 1]
    markers = {line.get_marker(): (line.get_xdata()[0], line.get_ydata()[0]) for line in points}
    assert markers[VERDICT_STYLE["saturated"]["marker"]] == (4.0, 3.1)
    assert markers[VERDICT_STYLE["missed"]["marker"]] == (3.0, 0.0)
    # The answer is shaded on every panel and said in the title.
    for ax in fig.axes:
        assert any(list(line.get_xdata()) == [2.0, 2.0] for line in ax.lines)
    assert "answer 2 req/s" in fig.get_suptitle()
    assert rate_ax.get_xlabel() == "offered rate, requests/s (at most 64 in flight)"


def test_a_sweep_writes_its_search_chart_instead_of_the_aggregate_and_report_html_embeds_it(runs_of, tmp_path):
    import base64
    import re

    from servingctl.loadgen.outputs import write_all

    run = _rate_sweep(runs_of)
    written = write_all(run, tmp_path)
    assert [p.name for p in written if p.suffix == ".png"] == [SWEEP_PNG, "ttft.png"]
    image = matplotlib.image.imread(tmp_path / SWEEP_PNG)
    assert image.shape[0] > 500 and image.shape[1] > 700
    html = (tmp_path / "report.html").read_text()
    [embedded] = re.findall(r'<img alt="sweep" src="data:image/png;base64,([^"]+)">', html)
    assert base64.b64decode(embedded) == (tmp_path / SWEEP_PNG).read_bytes()
    assert "![the saturation sweep's search](sweep.png)" in (tmp_path / "report.md").read_text()
    assert sweep_figure(runs_of("plain", {(256, 1): {"ttft_ms": 100.0, "gap_ms": 10.0}})) is None  # no sweep, no chart


def test_the_ttft_chart_of_a_rate_sweep_is_a_box_per_rate_in_rate_order_with_the_limit(runs_of):
    ax = ttft_figure(_rate_sweep(runs_of)).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2/s", "3/s", "4/s"]
    assert ax.get_xlabel() == "offered rate, requests/s (254 input tokens)"
    assert [line.get_label() for line in ax.lines if line.get_label().startswith("SLO")] == ["SLO ttft_ms=500"]


def test_the_aggregate_chart_of_a_rate_grid_is_against_the_offered_rate(runs_of):
    run = _rate_sweep(runs_of)
    run.sweep = None
    ax = output_figure(run).axes[0]
    [line] = [line for line in ax.get_lines() if line.get_label() == "254 input tokens"]
    assert list(line.get_xdata()) == [2.0, 3.0, 4.0]
    assert ax.get_xlabel() == "offered rate (requests/s)"
