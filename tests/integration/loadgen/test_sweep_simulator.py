"""The saturation sweep and goodput through `servingctl bench` against the simulator over real HTTP:
the search, its stop, and the same answer in results.json, the vLLM export, report.md and the table."""

from __future__ import annotations

import json

import pytest

from servingctl.loadgen.outputs import read_results
from servingctl_cli.main import main
from servingctl_twin.simserver import SimConfig, running

MODEL = SimConfig().model


@pytest.fixture(scope="module")
def sim():
    # 4 sequences at once: beyond that requests queue, so TTFT climbs while throughput flattens.
    with running(SimConfig(speed=20, max_num_seqs=4)) as url:
        yield url


def sweep(url: str, out, *extra: str) -> int:
    return main(
        [
            "bench",
            "--endpoint",
            url,
            "--model",
            MODEL,
            "--input-tokens",
            "256",
            "--warmup",
            "1",
            "--rounds",
            "2",
            "--max-tokens",
            "24",
            "--timeout",
            "30",
            "--sweep",
            "--output",
            str(out),
            *extra,
        ]
    )


def test_a_loose_slo_stops_once_the_server_is_over_saturated(sim, tmp_path, capsys):
    code = sweep(sim, tmp_path, "--slo", "ttft_ms=10000,e2e_s=30", "--sweep-max-concurrency", "64")
    out = capsys.readouterr().out
    run = read_results(tmp_path)
    assert code == 0 and run.sweep is not None
    steps = run.sweep.steps
    assert [s.concurrency for s in steps] == [2**i for i in range(len(steps))]  # doubling from 1
    assert all(s.met for s in steps)  # nothing missed a 10 s TTFT: only queueing stops it (4 in flight, then a queue)
    assert run.sweep.stop == "over-saturated" and steps[-1].saturated and steps[-1].concurrency <= 64
    assert run.sweep.found == max(s.concurrency for s in steps if not s.saturated)  # the knee, not past it
    last, before = steps[-1], steps[-2]
    assert last.ttft_median_ms > before.ttft_median_ms  # queueing: TTFT rose ...
    assert last.goodput_rps < before.goodput_rps * 0.9 or last.output_tok_s < before.output_tok_s * 1.1  # ... for little
    found = next(s.summary for s in run.scenarios if s.summary.name == run.sweep.scenario)
    assert found.slo.good_share == 1.0 and found.slo.goodput_rps == pytest.approx(found.slo.throughput_rps)
    exported = json.loads((tmp_path / "vllm" / f"{found.name}.json").read_text())
    assert exported["request_goodput"] == pytest.approx(found.slo.goodput_rps)
    assert exported["request_goodput"] == pytest.approx(exported["request_throughput"])
    report = (tmp_path / "report.md").read_text()
    assert "## Goodput at the SLO" in report and f"highest concurrency meeting the SLOs = {run.sweep.found}" in report
    assert f"highest concurrency meeting the SLOs = {run.sweep.found}" in " ".join(out.split())


def test_an_slo_no_request_can_meet_stops_at_concurrency_one(sim, tmp_path, capsys):
    # The simulator's lone TTFT at 256 tokens is about 6 ms at speed 20: 1 ms is out of reach.
    code = sweep(sim, tmp_path, "--slo", "ttft_ms=1")
    out = " ".join(capsys.readouterr().out.split())
    run = read_results(tmp_path)
    assert code == 0 and [s.concurrency for s in run.sweep.steps] == [1]
    assert run.sweep.found is None and run.sweep.stop == "failed-at-1"
    summary = run.scenarios[0].summary
    assert summary.slo.good_requests == 0 and summary.slo.goodput_rps == 0.0 and not summary.slo.met
    assert "no concurrency met the SLOs" in out and "missed ttft_ms=1" in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--slo", "ttft=5"], "argument --slo: 'ttft=5': metric must be one of ttft_ms, itl_ms or e2e_s"),
        (["--slo", "ttft_ms:p80=5"], "argument --slo: 'ttft_ms:p80=5': percentile must be one of p50, p90, p95 or p99"),
        (["--slo", "ttft_ms=1", "--slo-share", "0"], "argument --slo-share: '0': expected a number above 0 and at most 1"),
        ([], "--slo: the sweep searches the highest concurrency meeting an SLO"),
    ],
)
def test_bad_slo_input_names_the_flag_and_the_allowed_values(tmp_path, capsys, args, says):
    with pytest.raises(SystemExit) as exc:
        sweep("http://127.0.0.1:9", tmp_path, *args)
    assert exc.value.code == 2 and says in capsys.readouterr().err


@pytest.fixture(scope="module")
def slow_sim():
    # 4 sequences at once and a tenth of the speed: the server completes about 15 requests a second at
    # 256 + 24 tokens; past that arrivals queue. A rate sweep reaches it in a few doublings.
    with running(SimConfig(speed=2, max_num_seqs=4)) as url:
        yield url


def rate_sweep(url: str, out, *extra: str) -> int:
    return main(
        [
            "bench",
            "--endpoint",
            url,
            "--model",
            MODEL,
            "--input-tokens",
            "256",
            "--warmup",
            "0",
            "--max-tokens",
            "24",
            "--timeout",
            "30",
            "--sweep",
            "--mode",
            "rate",
            "--arrivals",
            "constant",  # exact offered rates: the schedule is the rate asked
            "--duration",
            "2",
            "--concurrency",
            "32",
            "--sweep-start-rate",
            "2",
            "--output",
            str(out),
            *extra,
        ]
    )


def test_a_rate_sweep_finds_the_highest_rate_the_server_keeps_up_with_and_records_its_steps(slow_sim, tmp_path, capsys):
    code = rate_sweep(slow_sim, tmp_path, "--slo", "e2e_s=30")  # only the server's capacity binds
    out = " ".join(capsys.readouterr().out.split())
    run = read_results(tmp_path)
    sweep = run.sweep
    assert code == 0 and sweep is not None and sweep.axis == "rate" and sweep.found is None
    rates = [s.rate for s in sweep.steps]
    held = [s.rate for s in sweep.steps if s.met and not s.saturated]
    # Doubling from the start rate until a rate is not held, then bisection inside the bracket so far.
    first_miss = next(i for i, s in enumerate(sweep.steps) if not (s.met and not s.saturated))
    assert rates[: first_miss + 1] == [2.0 * 2**i for i in range(first_miss + 1)]
    for i in range(first_miss + 1, len(rates)):
        before = sweep.steps[:i]
        low = max(s.rate for s in before if s.met and not s.saturated)
        high = min(s.rate for s in before if s.rate > low and not (s.met and not s.saturated))
        assert low < rates[i] < high
    # The answer: the highest rate held, with the next rate up missed or saturated within the 10 % resolution.
    assert sweep.stop == "converged" and sweep.found_rate == max(held)
    above = min(s.rate for s in sweep.steps if s.rate > sweep.found_rate)
    assert above <= sweep.found_rate * 1.1
    # Each step records what was offered and completed, at the one cap; the server's limit is what saturates it.
    assert all(s.concurrency == 32 and s.scheduled_rate_rps == pytest.approx(s.rate) for s in sweep.steps)
    assert any(s.saturated and s.achieved_rate_rps < 0.9 * s.rate for s in sweep.steps)
    capacity = max(s.achieved_rate_rps for s in sweep.steps)
    assert capacity * 0.5 <= sweep.found_rate <= capacity * 1.15
    found = next(s for s in sweep.steps if s.rate == sweep.found_rate)
    assert found.achieved_rate_rps >= 0.9 * found.rate and run.sweep.scenario == f"in256-c32-rate{sweep.found_rate:g}"
    # The same answer, in req/s, in the terminal and report.md; the search chart in report.html.
    said = f"highest arrival rate meeting the SLOs = {sweep.found_rate:g} req/s"
    assert said in out and said in " ".join((tmp_path / "report.md").read_text().split())
    assert (tmp_path / "sweep.png").is_file() and 'alt="sweep"' in (tmp_path / "report.html").read_text()


def test_a_rate_sweep_stops_at_its_bound_and_one_missed_at_the_start_finds_nothing(slow_sim, tmp_path, capsys):
    # Well under the server's capacity: both rates held, and the bound is the answer.
    assert rate_sweep(slow_sim, tmp_path / "bound", "--slo", "e2e_s=30", "--sweep-max-rate", "4") == 0
    sweep = read_results(tmp_path / "bound").sweep
    assert [s.rate for s in sweep.steps] == [2.0, 4.0] and (sweep.found_rate, sweep.stop) == (4.0, "max-rate")
    # The simulator's lone TTFT at 256 tokens is tens of ms at speed 2: 1 ms is out of reach at the start.
    assert rate_sweep(slow_sim, tmp_path / "none", "--slo", "ttft_ms=1") == 0
    sweep = read_results(tmp_path / "none").sweep
    assert [s.rate for s in sweep.steps] == [2.0] and (sweep.found_rate, sweep.stop) == (None, "failed-at-start")
    out = " ".join(capsys.readouterr().out.split())
    assert "no arrival rate met the SLOs (not met at the start rate 2 req/s (missed ttft_ms=1); lower sweep_start_rate)" in out
