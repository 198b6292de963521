"""The terminal table of a run, as a person reads it at 80 columns: input order, percentiles only
where the samples resolve them, asked and measured input, the priced API named, the same text in
every mode (bench --endpoint, bench --profile and report all print through print_run)."""

from __future__ import annotations

import pytest

from servingctl.bench.outputs.terminal import print_run
from servingctl.cli import bench as bench_cli
from servingctl.costs import cost_comparisons, priced_api


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def _printed(capsys: pytest.CaptureFixture[str], **kwargs: object) -> str:
    print_run(**kwargs)  # type: ignore[arg-type]
    return capsys.readouterr().out


def test_scenarios_in_input_order_percentiles_only_when_resolved_and_everything_within_80_columns(runs_of, capsys) -> None:
    run = runs_of("r", {(128, 1): {"ttft_ms": 100.0, "gap_ms": 10.0}, (64, 1): {"ttft_ms": 90.0, "gap_ms": 10.0},
                         (64, 2): {"ttft_ms": 95.0, "gap_ms": 10.0, "rounds": 5, "client_bound": True}})
    costs = cost_comparisons(run, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, hourly_usd=12.17)
    out = _printed(capsys, run=run, comparisons=costs, api=priced_api(costs))
    assert max(len(line) for line in out.splitlines()) <= 80, out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [("64", "(62)", "1"), ("64", "(62)", "2"), ("128", "(126)", "1")]
    assert rows[0][6] == "n=2"  # 2 samples: neither p90 nor p99 is printed as if it meant something
    p90 = next(line for line in out.splitlines() if line.split()[:3] == ["64", "(62)", "2"])
    assert "/ n=10" in p90 and "n=10 /" not in p90  # 10 samples resolve p90, not p99
    assert out.index("^ CLIENT-BOUND") > out.index(p90)  # right under its row
    assert "priced against fireworks/deepseek-v4-flash (0.22 / 0.66 USD per 1M" in out
    cost_rows = [line.split()[0] for line in out.splitlines() if line.startswith("in")]
    assert cost_rows[-3:] == ["in64-c1", "in64-c2", "in128-c1"]


def test_a_comparison_says_which_side_lacks_a_scenario(run, baseline, capsys) -> None:
    out = _printed(capsys, run=run, baseline=baseline)
    assert "in2048-c2 (client-bound)  only in this run" in out and "->- -" not in out and "→" not in out
    assert "p99 TTFT ms" in out and "n=2" in out


def test_bench_prints_the_same_text_as_report(run, capsys) -> None:
    bench_cli._print_results(run, as_json=False)
    assert capsys.readouterr().out == _printed(capsys, run=run)


def test_costs_priced_at_prices_no_api_has_say_the_prices_alone(runs_of, capsys) -> None:
    run = runs_of("r", {(64, 1): {"ttft_ms": 90.0, "gap_ms": 10.0}})
    costs = cost_comparisons(run, api_input_usd_per_m=0.3, api_output_usd_per_m=0.9, hourly_usd=12.17)
    assert priced_api(costs) is None
    out = _printed(capsys, run=run, comparisons=costs, api=priced_api(costs))
    assert "priced against a managed API at 0.3 / 0.9 USD per 1M input / output tokens" in out
