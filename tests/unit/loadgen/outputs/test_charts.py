"""Charts: the plotted series are the run's figures, and the files are real PNGs."""

from datetime import timedelta

import matplotlib.image
import pytest

from servingctl.loadgen.outputs.charts import (
    CLIENT_BOUND_LABEL,
    compare_figure,
    output_figure,
    server_figure,
    ttft_figure,
    write_charts,
)
from servingctl.schema.results import ServerSample


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
