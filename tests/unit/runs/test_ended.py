"""The sweep's part in ending benchmark runs whose execution died: recorded FAILED with the
execution's status, hold released, the profile stopped when the run asked for it, and nothing done
to a run whose execution still runs or that recorded its own end."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from servingctl.runs.ended import EndDeps, end_dead_runs
from servingctl.schema.results import RunConfig
from servingctl.store import MemoryStore, Phase
from servingctl.store.benchmarks import BenchmarkRun, Reproducibility, RunStatus
from servingctl.store.benchmarks_memory import MemoryBenchmarkStore

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
BENCH = "arn:aws:states:us-east-1:123456789012:execution:servingctl-run-benchmark:"
STOP_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:servingctl-stop-profile"
PROFILE = "nemotron-nano"


class FixedClock:
    """A clock that stands still."""

    def now(self) -> datetime:
        return T0 + timedelta(minutes=5)

    def sleep(self, seconds: float) -> None:
        """Never called."""


class FakeSfn:
    """DescribeExecution, ListExecutions (RUNNING stops) and StartExecution as Step Functions answers them."""

    class exceptions:
        class ExecutionDoesNotExist(Exception):
            """Step Functions does not know the execution."""

    def __init__(self, executions: dict[str, dict[str, Any]], running_stops: list[str] = ()) -> None:
        self.executions = executions
        self.running_stops = list(running_stops)
        self.started: list[dict[str, Any]] = []

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        if executionArn not in self.executions:
            raise self.exceptions.ExecutionDoesNotExist(executionArn)
        return {"executionArn": executionArn, **self.executions[executionArn]}

    def get_paginator(self, name: str) -> Any:
        names = self.running_stops

        class Pages:
            def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
                return [{"executions": [{"executionArn": f"{STOP_MACHINE}:{n}", "name": n} for n in names]}]

        return Pages()

    def start_execution(self, stateMachineArn: str, name: str, input: str) -> dict[str, Any]:  # noqa: A002 (boto3's name)
        self.started.append({"machine": stateMachineArn, "name": name, "input": json.loads(input)})
        return {"executionArn": f"{stateMachineArn}:{name}"}


def _run(runs: MemoryBenchmarkStore, name: str, status: RunStatus, stop: bool) -> BenchmarkRun:
    run = BenchmarkRun(
        run_id=f"20261202T100000Z-{name}",
        profile=PROFILE,
        execution=BENCH + name,
        created_at=T0,
        updated_at=T0,
        request={"profile": PROFILE, "stop": stop, "stop_options": {"deadlines": {"drain_s": 60}}},
        config=RunConfig(
            endpoint="http://alb", model="m", input_tokens=[64], concurrencies=[1], rounds=1, warmup=0, max_tokens=8
        ),
        reproducibility=Reproducibility(
            profile=PROFILE,
            model="m",
            model_id="x",
            revision=None,
            vllm_version=None,
            image="i",
            serving={},
            pool="p",
            instance_type="g7e.2xlarge",
            gpu_count=1,
            region="us-east-1",
            engine_version="0",
            results_schema_version=1,
            seed=1,
            salt_mode="cache-salt",
        ),
    )
    runs.create_run(run)
    return runs.update_run(run.run_id, T0, status=status)


@pytest.fixture
def stores() -> tuple[MemoryBenchmarkStore, MemoryStore]:
    profiles = MemoryStore()
    profiles.set_phase(PROFILE, Phase.STARTING, T0, "arn:start")
    profiles.set_phase(PROFILE, Phase.READY, T0, "arn:start")
    return MemoryBenchmarkStore(), profiles


def _deps(stores: tuple[MemoryBenchmarkStore, MemoryStore], sfn: FakeSfn) -> EndDeps:
    runs, profiles = stores
    return EndDeps(runs=runs, profiles=profiles, sfn=sfn, stop_machine_arn=STOP_MACHINE, clock=FixedClock(), identity="arn:sweep")


def test_an_aborted_run_is_failed_its_hold_released_and_its_profile_stopped(stores) -> None:
    runs, profiles = stores
    run = _run(runs, "aborted", RunStatus.RUNNING, stop=True)
    profiles.update_profile(PROFILE, T0, held_by=run.run_id, held_until=T0 + timedelta(hours=1))
    sfn = FakeSfn({BENCH + "aborted": {"status": "ABORTED", "cause": "aborted from the console"}})
    [ended] = end_dead_runs(_deps(stores, sfn))
    stored = runs.get_run(run.run_id)
    assert stored.status == RunStatus.FAILED and stored.error == "execution ABORTED: aborted from the console"
    assert stored.finished_at == T0 + timedelta(minutes=5)
    assert profiles.get_profile(PROFILE).held_by is None
    [stop] = sfn.started
    assert stop["machine"] == STOP_MACHINE and stop["name"].startswith(f"stop-{PROFILE}-")
    assert stop["input"] == {"profile": PROFILE, "deadlines": {"drain_s": 60}, "requested_by": "arn:sweep"}
    assert ended.action == "recorded" and ended.stop_execution == f"{STOP_MACHINE}:{stop['name']}"
    assert end_dead_runs(_deps(stores, sfn)) == [] and len(sfn.started) == 1  # the next sweep has nothing to do


@pytest.mark.parametrize("status", ["TIMED_OUT", "FAILED"])
def test_a_timed_out_or_failed_run_that_asked_no_stop_keeps_its_profile(stores, status: str) -> None:
    runs, profiles = stores
    run = _run(runs, "dead", RunStatus.PLANNED, stop=False)
    error = "States.Timeout" if status == "TIMED_OUT" else "KeyError"
    sfn = FakeSfn({BENCH + "dead": {"status": status, "error": error}})
    [ended] = end_dead_runs(_deps(stores, sfn))
    assert ended.stop_execution is None and sfn.started == []
    assert runs.get_run(run.run_id).error == ended.detail == f"execution {status}: {error}"
    assert profiles.get_profile(PROFILE).phase == Phase.READY


def test_live_and_finished_runs_are_left_alone_and_a_running_stop_is_joined(stores) -> None:
    runs, _ = stores
    live = _run(runs, "live", RunStatus.RUNNING, stop=True)
    done = _run(runs, "done", RunStatus.SUCCEEDED, stop=True)
    gone = _run(runs, "gone", RunStatus.RUNNING, stop=True)
    sfn = FakeSfn(
        {BENCH + "live": {"status": "RUNNING"}, BENCH + "done": {"status": "SUCCEEDED"}},
        running_stops=[f"stop-{PROFILE}-0123456789"],
    )
    [ended] = end_dead_runs(_deps(stores, sfn))  # "gone": Step Functions no longer knows its execution
    assert ended.run_id == gone.run_id and ended.execution_status == "MISSING"
    assert ended.stop_execution == f"{STOP_MACHINE}:stop-{PROFILE}-0123456789" and sfn.started == []
    assert runs.get_run(live.run_id).status == RunStatus.RUNNING and runs.get_run(done.run_id).status == RunStatus.SUCCEEDED


def test_a_status_change_ends_only_the_run_of_its_execution(stores) -> None:
    runs, _ = stores
    one, other = _run(runs, "one", RunStatus.RUNNING, stop=False), _run(runs, "other", RunStatus.RUNNING, stop=False)
    sfn = FakeSfn({BENCH + "one": {"status": "ABORTED"}, BENCH + "other": {"status": "ABORTED"}})
    assert [e.run_id for e in end_dead_runs(_deps(stores, sfn), execution_arn=BENCH + "one")] == [one.run_id]
    assert runs.get_run(other.run_id).status == RunStatus.RUNNING


def test_a_profile_left_starting_by_the_runs_aborted_start_is_left_to_the_reconciler(stores) -> None:
    runs, profiles = stores
    profiles.set_phase(PROFILE, Phase.STOPPING, T0, "arn:stop")
    profiles.set_phase(PROFILE, Phase.STOPPED, T0, "arn:stop")
    profiles.set_phase(PROFILE, Phase.STARTING, T0, BENCH + "child-start")
    run = _run(runs, "in-start", RunStatus.PLANNED, stop=True)
    sfn = FakeSfn({BENCH + "in-start": {"status": "ABORTED"}})
    [ended] = end_dead_runs(_deps(stores, sfn))
    assert ended.action == "recorded" and ended.stop_execution is None and sfn.started == []
    assert runs.get_run(run.run_id).status == RunStatus.FAILED
