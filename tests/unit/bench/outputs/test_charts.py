"""Charts: the plotted series are the run's figures, and the files are real PNGs."""

from datetime import timedelta

import matplotlib.image
import pytest

from servingctl.bench.outputs.charts import (
    CLIENT_BOUND_LABEL,
    aggregate_figure,
    compare_figure,
    server_figure,
    ttft_figure,
    write_charts,
)
from servingctl.schema.results import ServerSample


def _summaries(run):
    return {s.summary.name: s.summary for s in run.scenarios}


def test_aggregate_chart_has_one_line_per_input_length(run):
    s = _summaries(run)
    ax = aggregate_figure(run).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"254 input tokens", "2046 input tokens", CLIENT_BOUND_LABEL}
    assert list(lines["254 input tokens"].get_xdata()) == [1, 2]
    assert list(lines["254 input tokens"].get_ydata()) == [s["in256-c1"].aggregate_tok_s, s["in256-c2"].aggregate_tok_s]
    assert list(lines["2046 input tokens"].get_ydata()) == [s["in2048-c1"].aggregate_tok_s, s["in2048-c2"].aggregate_tok_s]
    # The client-bound point is crossed out where it is plotted.
    assert list(lines[CLIENT_BOUND_LABEL].get_xydata()[0]) == [2, s["in2048-c2"].aggregate_tok_s]
    assert ax.get_xlabel().startswith("concurrency")


def test_ttft_chart_plots_medians_with_p90_whiskers(run):
    s = _summaries(run)
    ax = ttft_figure(run).axes[0]
    containers = {c.get_label(): c for c in ax.containers}
    assert set(containers) == {"concurrency 1", "concurrency 2"}
    data_line, _caps, (bars,) = containers["concurrency 2"].lines
    assert list(data_line.get_xdata()) == [254, 2046]
    assert list(data_line.get_ydata()) == [s["in256-c2"].ttft_ms.median, s["in2048-c2"].ttft_ms.median]
    # Whisker of in256-c2 runs from the median (150) to p90 (158).
    segments = bars.get_segments()
    assert segments[0][0][1] == pytest.approx(s["in256-c2"].ttft_ms.median)
    assert segments[0][1][1] == pytest.approx(s["in256-c2"].ttft_ms.p90)


def test_compare_chart_bars_are_both_runs(run, baseline):
    fig = compare_figure(baseline, run)
    agg_ax = fig.axes[0]
    base_bars, run_bars = agg_ax.containers
    b, r = _summaries(baseline), _summaries(run)
    common = ["in256-c1", "in256-c2", "in2048-c1"]  # in2048-c2 is not in the baseline
    assert [bar.get_height() for bar in base_bars] == pytest.approx([b[n].aggregate_tok_s for n in common])
    assert [bar.get_height() for bar in run_bars] == pytest.approx([r[n].aggregate_tok_s for n in common])
    assert [t.get_text() for t in agg_ax.get_xticklabels()] == common
    change = (r["in256-c1"].aggregate_tok_s - b["in256-c1"].aggregate_tok_s) / b["in256-c1"].aggregate_tok_s * 100
    assert agg_ax.texts[0].get_text() == f"{change:+.0f}%"


def test_charts_are_written_as_png(run, baseline, tmp_path):
    paths = write_charts(run, tmp_path, baseline=baseline)
    assert [p.name for p in paths] == ["aggregate_tok_s.png", "ttft.png", "compare.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 300 and image.shape[1] > 500
    assert [p.name for p in write_charts(run, tmp_path / "solo")] == ["aggregate_tok_s.png", "ttft.png"]


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
    assert names == ["aggregate_tok_s.png", "ttft.png", "server_metrics.png"]
    assert matplotlib.image.imread(tmp_path / "server_metrics.png").shape[0] > 300
