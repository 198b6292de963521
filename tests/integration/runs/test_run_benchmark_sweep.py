"""The saturation sweep in the in-VPC run on the twin: run_benchmark's SweepNext step decides each
next concurrency from the scenarios written so far, RunSweepScenario measures it on the simulator,
and the stop (with the concurrency found) is stored with the run."""

from __future__ import annotations

from typing import Any

import pytest

Bench = Any  # conftest.Bench (conftest modules are not importable under --import-mode=importlib)
READY = "deepseek-v4-flash"
SWEEP = {"input_tokens": [64], "warmup": 1, "rounds": 2, "max_tokens": 24, "max_workers": 1, "sweep": True}


def test_the_sweep_runs_step_by_step_up_to_its_bound(bench: Bench, ready_profile: str) -> None:
    result = bench.run(
        "sweep", profile=READY, **SWEEP, slos=[{"metric": "ttft_ms", "limit": 60000}], sweep_max_concurrency=2, sweep_max_steps=6
    )
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    entered = result.states_entered()
    # the matrix is empty; each step is SweepNext -> BranchOnSweepDone -> RunSweepScenario, the last SweepNext stops
    assert entered.count("RunSweepScenario") == 2 and entered.count("SweepNext") == 3
    assert entered[-6:] == ["BranchOnSweepDone", "Compare", "BranchOnStop", "RecordSuccess", "BranchOnOutcome", "Done"]
    run_id = result.output["plan"]["run_id"]
    run = bench.runs.get_run(run_id)
    scenarios = sorted(bench.runs.list_scenarios(run_id), key=lambda s: s.position)
    assert [s.name for s in scenarios] == run.scenarios == ["in64-c1", "in64-c2"]
    assert all(s.summary.slo is not None and s.summary.slo.met for s in scenarios)  # a minute of TTFT: always met
    assert run.sweep is not None and [s.concurrency for s in run.sweep.steps] == [1, 2]
    if run.sweep.stop == "max-concurrency":
        assert run.sweep.found == 2 and run.sweep.scenario == "in64-c2"
    else:  # timings of a busy machine may look like queueing at 2: then it says so, and 1 is the answer
        assert run.sweep.stop == "over-saturated" and run.sweep.steps[-1].saturated and run.sweep.found == 1
    assert result.output["sweep"]["next"] is None and result.output["sweep"]["found"] == run.sweep.found
    assert {c.scenario for c in bench.runs.list_comparisons(run_id)} == {s.name for s in scenarios}
    # the cost at the SLO: from the goodput at the concurrency found, the day from the ledger and the start history
    cost, found = run.slo_cost, scenarios[run.sweep.found - 1].summary.slo
    assert cost is not None and (cost.scenario, cost.concurrency) == (run.sweep.scenario, run.sweep.found)
    assert (cost.goodput_rps, cost.goodput_tok_s) == (found.goodput_rps, found.goodput_tok_s)
    assert cost.hourly_usd == bench.runs.list_comparisons(run_id)[0].hourly_usd
    assert cost.day.cold_start_s > 0 and "(mean of 1 start)" in cost.day.source  # the module's own start of the profile
    assert cost.day.idle_minutes == bench.registry.profiles[READY].idle.window_minutes
    assert cost.self_hosted_usd_per_m_output == pytest.approx(
        cost.daily_usd / (cost.goodput_tok_s * cost.day.serving_hours * 3600 / 1e6), rel=1e-12
    )  # float order


def test_an_slo_missed_at_one_stops_after_one_step(bench: Bench, ready_profile: str) -> None:
    result = bench.run("sweep-miss", profile=READY, **SWEEP, slos=[{"metric": "ttft_ms", "limit": 0.001}])
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    run = bench.runs.get_run(result.output["plan"]["run_id"])
    assert run.sweep.found is None and run.sweep.stop == "failed-at-1" and run.scenarios == ["in64-c1"]
    assert result.states_entered().count("RunSweepScenario") == 1


def test_a_sweep_without_an_slo_fails_at_once_naming_the_field(bench: Bench) -> None:
    result = bench.run("sweep-bad", profile=READY, **SWEEP)
    assert result.status == "FAILED" and "slos: the sweep searches the highest concurrency meeting an SLO" in result.cause
    assert "SweepNext" not in result.states_entered()
