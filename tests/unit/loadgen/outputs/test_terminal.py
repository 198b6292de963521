"""The terminal table of a run, as a person reads it at 80 columns: input order, percentiles only
where the samples resolve them, asked and measured input, the priced API named, the same text in
every mode (bench --endpoint, bench --profile and report all print through print_run)."""

from __future__ import annotations

import io

import pytest

from servingctl.costs import cost_comparisons, priced_api
from servingctl.loadgen.outputs.terminal import print_run
from servingctl.schema.results import ClientHost
from servingctl_cli import bench as bench_cli


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def _printed(capsys: pytest.CaptureFixture[str], **kwargs: object) -> str:
    print_run(**kwargs)  # type: ignore[arg-type]
    return capsys.readouterr().out


def test_scenarios_in_input_order_percentiles_only_when_resolved_and_everything_within_80_columns(runs_of, capsys) -> None:
    run = runs_of(
        "r",
        {
            (128, 1): {"ttft_ms": 100.0, "gap_ms": 10.0},
            (64, 1): {"ttft_ms": 90.0, "gap_ms": 10.0},
            (64, 2): {"ttft_ms": 95.0, "gap_ms": 10.0, "rounds": 5, "client_bound": True},
        },
    )
    costs = cost_comparisons(run, api_input_usd_per_m=0.22, api_output_usd_per_m=0.66, hourly_usd=12.17)
    out = _printed(capsys, run=run, comparisons=costs, api=priced_api(costs))
    assert max(len(line) for line in out.splitlines()) <= 80, out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [("64", "(62)", "1"), ("64", "(62)", "2"), ("128", "(126)", "1")]
    assert rows[0][6:8] == ["–", "n=2"]  # 2 samples: neither p90 nor p99 is printed as if it meant something
    p90 = next(line for line in out.splitlines() if line.split()[:3] == ["64", "(62)", "2"])
    assert "/ – n=10" in p90 and "n=10 /" not in p90  # 10 samples resolve p90, not p99
    assert "percentiles need p90 >= 10 samples, p95 >= 20, p99 >= 100; – n=N: too few" in " ".join(out.split())
    assert out.index("^ CLIENT-BOUND") > out.index(p90)  # right under its row
    assert "priced against fireworks/deepseek-v4-flash (0.22 / 0.66 USD per 1M" in out
    cost_rows = [line.split()[0] for line in out.splitlines() if line.startswith("in")]
    assert cost_rows[-3:] == ["in64-c1", "in64-c2", "in128-c1"]


def test_a_comparison_says_which_side_lacks_a_scenario_and_when_too_few_to_compare(run, baseline, capsys) -> None:
    out = _printed(capsys, run=run, baseline=baseline)
    assert "spec-decode acceptance: in256-c1 66.0%, in256-c2 66.0%" in out  # the MTP run says how much of the draft was kept
    only = next(line for line in out[out.index("(this run)") :].splitlines() if line.startswith("in2048-c2"))
    assert only.startswith("in2048-c2 (client-bound)") and only.endswith("only in this run") and "→" not in out
    # two rounds of one request a side: the change is said, no verdict is called
    ttft = next(line for line in out.splitlines() if line.strip().startswith("TTFT ms"))
    assert ttft.split()[2:] == ["90.0", "100.0", "too", "few", "to", "compare", "+11.1", "%,", "2", "vs", "2", "requests"]
    table = out[out.index("(this run)") : out.index("medians (")].splitlines()
    figures = [line for line in table if line.startswith("  ") and not line.startswith("   ")]
    assert len(figures) == 3 * 5 and all("too few to compare" in line for line in figures)


def _cells(out: str, scenario: str) -> dict[str, list[str]]:
    """figure label -> its cells, for the figures under one scenario's heading line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [scenario])
    cells = {}
    for line in lines[start + 1 :]:
        if not line.startswith("  ") or line.startswith("   "):
            break
        label = next(lb for lb in ("output tok/s", "TTFT ms", "ITL ms", "E2E ms", "decode tok/s") if line.strip().startswith(lb))
        cells[label] = line.strip()[len(label) :].split()
    return cells


def test_a_shift_is_called_and_an_equal_run_is_not_within_80_columns(runs_of, capsys) -> None:
    # 8 requests x 6 rounds a side; TTFT 30 % later, the same decode
    base = runs_of("base", {(256, 8): {"ttft_ms": 100.0, "gap_ms": 10.0, "rounds": 6}})
    slower = runs_of("slower", {(256, 8): {"ttft_ms": 130.0, "gap_ms": 10.0, "rounds": 6}})
    same = runs_of("same", {(256, 8): {"ttft_ms": 100.0, "gap_ms": 10.0, "rounds": 6}})
    out = _printed(capsys, run=slower, baseline=base)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    cells = _cells(out, "in256-c8")
    assert cells["TTFT ms"][:3] == ["135.0", "165.0", "slower"]  # medians of 100 + 10 j, j = 0..7
    low, high = (float(x.strip("[],")) for x in cells["TTFT ms"][-2:])
    assert 0 < low <= 22.2 <= high  # the interval excludes 0 and holds the change
    assert cells["decode tok/s"][2:5] == ["no", "change", "detected"]
    out = _printed(capsys, run=same, baseline=base)
    assert all(cells[2:5] == ["no", "change", "detected"] for cells in _cells(out, "in256-c8").values())


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_fingerprints_side_by_side_mark_what_differs(runs_of, capsys) -> None:
    base = runs_of("base", {(256, 1): {"ttft_ms": 100.0, "gap_ms": 10.0}})
    run = runs_of("run", {(256, 1): {"ttft_ms": 100.0, "gap_ms": 10.0}})
    base.metadata.client_host = ClientHost(
        cpu_model="AMD EPYC 9R14", cpus=2, load_average_start=(0.2, 0.1, 0.1), load_average_end=(0.9, 0.3, 0.1)
    )
    run.metadata.client_host = base.metadata.client_host.model_copy(update={"load_average_start": (3.5, 2.0, 1.0)})
    run.metadata.server_version = {"version": "0.33.0"}
    out = _printed(capsys, run=run, baseline=base)
    prints = out[out.index("fingerprints") :].splitlines()
    assert all(len(line) <= 80 for line in prints)
    assert "  * vLLM version" in out and "baseline: 0.32.0" in out and "this run: 0.33.0" in out
    assert "  * client load (1 min)" in out and "this run: 3.50 -> 0.90" in out
    assert any(line.startswith("    client CPU") and line.endswith("AMD EPYC 9R14 (2 CPUs)") for line in prints)
    # on a terminal the differing fields are coloured, the equal ones not
    terminal = _Terminal()
    print_run(run, baseline=base, file=terminal)
    coloured = [line for line in terminal.getvalue().splitlines() if "\x1b[" in line]
    assert coloured and all(
        "vLLM version" in line or "load" in line or "baseline:" in line or "this run:" in line for line in coloured
    )
    assert not any("client CPU" in line for line in coloured)
    assert "\x1b[" not in out  # piped: plain text


def test_bench_prints_the_same_text_as_report(run, capsys) -> None:
    bench_cli._print_results(run, as_json=False)
    assert capsys.readouterr().out == _printed(capsys, run=run)


def test_costs_priced_at_prices_no_api_has_say_the_prices_alone(runs_of, capsys) -> None:
    run = runs_of("r", {(64, 1): {"ttft_ms": 90.0, "gap_ms": 10.0}})
    costs = cost_comparisons(run, api_input_usd_per_m=0.3, api_output_usd_per_m=0.9, hourly_usd=12.17)
    assert priced_api(costs) is None
    out = _printed(capsys, run=run, comparisons=costs, api=priced_api(costs))
    assert "priced against a managed API at 0.3 / 0.9 USD per 1M input / output tokens" in out


def test_the_output_throughput_says_which_figure_it_is(runs_of, capsys) -> None:
    run = runs_of("r", {(64, 1): {"ttft_ms": 90.0, "gap_ms": 10.0}})
    out = " ".join(_printed(capsys, run=run).split())
    assert "output tok/s: the median of the measured rounds, each round's output tokens / its wall time" in out


def test_the_terminal_says_why_requests_failed(run, capsys) -> None:
    out = " ".join(_printed(capsys, run=run).split())
    assert (
        "! REQUESTS FAILED: in256-c2: 1 of 4 failed (25.0%): stream_cut 1 (e.g. RemoteProtocolError: peer closed connection)"
        in out
    )
