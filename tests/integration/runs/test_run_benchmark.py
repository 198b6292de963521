"""run_benchmark on the twin: the real state machine, the bench_worker handler, the start/stop state
machines it calls (startExecution.sync:2), DynamoDB and S3 as moto emulates them, and the simulator
model server behind the profile's endpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from servingctl.costs import CompareInput, compare, load_catalog
from servingctl.runs import worker as bench_worker

ROOT = Path(__file__).resolve().parents[3]
Bench = Any  # conftest.Bench (conftest modules are not importable under --import-mode=importlib)
# 2 input lengths x 2 concurrencies, short answers; one worker per scenario (on this 2-core machine
# the self-check often says client-bound, and a split is tested on its own below).
MATRIX = {"input_tokens": [64, 256], "concurrencies": [1, 2], "warmup": 1, "rounds": 2, "max_tokens": 24, "max_workers": 1}
READY = "deepseek-v4-flash"  # priced in the catalog: its runs get cost comparisons
OTHER = "nemotron-nano"  # on its own pool, not priced


def _written(bench: Bench, run_id: str) -> list[str]:
    return [s.name for s in bench.runs.list_scenarios(run_id)]


def test_happy_path_stores_every_scenario_its_records_and_comparisons(bench: Bench, ready_profile: str) -> None:
    before = bench.generation_tokens(READY)
    result = bench.run("happy", profile=READY, **MATRIX)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    entered = result.states_entered()
    assert (
        entered[:3] == ["Plan", "BranchOnStart", "Calibrate"] and "StartProfile" not in entered and "StopProfile" not in entered
    )
    assert entered[-3:] == ["RecordSuccess", "BranchOnOutcome", "Done"]

    run_id = result.output["plan"]["run_id"]
    run = bench.runs.get_run(run_id)
    assert run.status.value == "SUCCEEDED" and run.execution == result.arn and run.finished_at is not None
    assert [c.target_tokens for c in run.reproducibility.calibrations] == [64, 256]
    assert run.reproducibility.server_version is not None and run.reproducibility.instance_type == "g7e.12xlarge"

    scenarios = bench.runs.list_scenarios(run_id)
    assert [s.name for s in scenarios] == ["in64-c1", "in64-c2", "in256-c1", "in256-c2"]
    total = 0
    for s in scenarios:
        records = bench.records.get_records(s.records_key)
        # each attempt its own key: $$.State.EnteredTime's digits and the retry count (none here)
        assert s.records_key.startswith(f"runs/{run_id}/{s.name}.t") and s.records_key.endswith("-r0.jsonl.gz")
        assert len(records) == s.records == (1 + 2) * s.summary.concurrency
        assert s.summary.requests == 2 * s.summary.concurrency and s.summary.failed == 0
        # every scenario's own check: the server generated exactly the tokens the client counted
        assert s.summary.server.generation_tokens_equal is True
        assert s.summary.server.generation_tokens_delta == sum(r.completion_tokens for r in records)
        total += sum(r.completion_tokens for r in records)
    assert bench.generation_tokens(READY) - before == total  # nothing else generated anything

    catalog = load_catalog()
    price, api = catalog.instance("us-east-1", "g7e.12xlarge"), catalog.managed_api()
    comparisons = {c.scenario: c for c in bench.runs.list_comparisons(run_id)}
    assert sorted(comparisons) == sorted(s.name for s in scenarios)
    for s in scenarios:
        expected = compare(
            CompareInput(
                output_tok_s=s.summary.output_tok_s,
                input_tokens=s.summary.input_tokens,
                output_tokens=24,
                api_input_usd_per_m=api.input_usd_per_m,
                api_output_usd_per_m=api.output_usd_per_m,
                hourly_usd=price.hourly_usd,
            )
        )
        assert comparisons[s.name].comparison == expected
    assert bench.phase(READY) == "READY"  # not asked to stop: still serving


def test_a_worker_failing_mid_matrix_keeps_the_scenarios_already_written(
    bench: Bench, ready_profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real = bench_worker.measure_scenario

    async def crashing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionResetError("the worker lost the model server")
        return await real(*args, **kwargs)

    monkeypatch.setattr(bench_worker, "measure_scenario", crashing)
    assert bench.twin.router is not None
    with bench.twin.router.in_process():  # so the handlers see the patch
        result = bench.run("crash", profile=READY, **MATRIX)
    assert result.status == "FAILED" and result.error == "ConnectionResetError"
    assert json.loads(result.cause)["errorMessage"] == "the worker lost the model server"
    entered = result.states_entered()
    assert "RecordFailure" in entered and "Compare" not in entered and "StopAfterFailure" not in entered

    run_id = next(r.run_id for r in bench.runs.list_runs(profile=READY) if r.execution == result.arn)
    run = bench.runs.get_run(run_id)
    assert run.status.value == "FAILED" and run.error == "ConnectionResetError: the worker lost the model server"
    assert _written(bench, run_id) == ["in64-c1"]  # the first scenario survived the second's failure
    [first] = bench.runs.list_scenarios(run_id)
    assert len(bench.records.get_records(first.records_key)) == first.records == 3
    assert [c.scenario for c in bench.runs.list_comparisons(run_id)] == ["in64-c1"]
    assert bench.phase(READY) == "READY"  # stop was not asked


def test_a_client_bound_scenario_is_split_and_the_merge_matches_the_servers_counters(bench: Bench, ready_profile: str) -> None:
    # A CPU limit of 0 makes every worker's self-check say "client-bound": the scenario is measured
    # again by as many workers as allowed, started together.
    result = bench.run(
        "split",
        profile=READY,
        input_tokens=[64],
        concurrencies=[4],
        warmup=1,
        rounds=3,
        max_tokens=48,
        client_cpu_limit=0.0,
        max_workers=3,
    )
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    entered = result.states_entered()
    assert entered.count("RunShard") == 3 and "MergeShards" in entered

    run_id = result.output["plan"]["run_id"]
    [scenario] = bench.runs.list_scenarios(run_id)
    assert scenario.split is not None and scenario.split.shards == 3
    assert any("client CPU" in reason for reason in scenario.split.reasons)  # why one worker was not enough
    listed = bench.twin.client("s3").list_objects_v2(Bucket=bench.twin.bucket_name, Prefix=f"runs/{run_id}/shards/in64-c4/")
    keys = sorted(o["Key"] for o in listed["Contents"])  # <shard>.<attempt>.jsonl.gz, one attempt each
    assert [k.rsplit("/", 1)[1].split(".")[0] for k in keys] == ["0", "1", "2"]
    shards = [bench.records.get_records(k) for k in keys]
    assert [len(s) for s in shards] == [(1 + 3) * c for c in (2, 1, 1)]  # each shard its share of the 4
    merged = bench.records.get_records(scenario.records_key)
    assert scenario.records_key.startswith(f"runs/{run_id}/in64-c4.merged-t")  # beside the single-worker result it replaced
    assert len(merged) == scenario.records == sum(len(s) for s in shards) == (1 + 3) * 4
    assert len({r.index for r in merged}) == len(merged)  # request indexes (and so cache salts) unique
    summary = scenario.summary
    assert (summary.concurrency, summary.requests, summary.failed) == (4, 12, 0)
    # the merged token total is exactly what the server's counters say it generated
    assert summary.server.generation_tokens_equal is True
    assert (
        summary.server.generation_tokens_delta
        == sum(r.completion_tokens for r in merged)
        == summary.server.client_completion_tokens
    )
    assert summary.server.prefix_cache_ok is True  # salts stayed unique across the workers
    assert len(scenario.rounds) == 1 + 3 and all(r.ok == 4 for r in scenario.rounds)  # rounds over every shard


def test_a_profile_that_is_not_ready_is_refused_without_start(bench: Bench) -> None:
    assert bench.phase(OTHER) == "STOPPED"
    result = bench.run("refused", profile=OTHER, **MATRIX)
    assert result.status == "FAILED" and result.error == "ProfileNotReady"
    assert 'pass "start": true to start it first' in json.loads(result.cause)["errorMessage"]
    assert result.states_entered() == ["Plan", "FailRun"]
    assert bench.runs.list_runs(profile=OTHER) == [] and bench.running(OTHER) == (0, 0)


def test_a_profile_that_is_not_ready_is_started_and_stopped_when_asked(bench: Bench) -> None:
    result = bench.run("startstop", profile=OTHER, start=True, stop=True, **MATRIX)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    entered = result.states_entered()
    assert entered.index("StartProfile") < entered.index("Calibrate") < entered.index("StopProfile") < entered.index("Done")
    started, stopped = result.output["started"], result.output["stopped"]
    assert started["status"] == stopped["status"] == "SUCCEEDED"
    assert started["execution_arn"].split(":")[-1].startswith(f"start-{OTHER}-")
    run_id = result.output["plan"]["run_id"]
    assert _written(bench, run_id) == ["in64-c1", "in64-c2", "in256-c1", "in256-c2"]
    compared = result.output["compare"]["compared"]  # priced at g7e.2xlarge's catalog price
    assert [c["scenario"] for c in compared] == _written(bench, run_id)
    assert all(c["ratio_self_hosted_to_api"] > 0 for c in compared)
    # stopped for real: recorded STOPPED, nothing running, the ledger session closed
    assert bench.phase(OTHER) == "STOPPED" and bench.running(OTHER)[0] == 0
    bench.wait_for("the pool's instance terminated", lambda: bench.running(OTHER) == (0, 0))
    [session] = [s for s in bench.profiles.list_sessions(OTHER) if s.start_execution == started["execution_arn"]]
    assert session.stop_execution == stopped["execution_arn"] and not session.open


def test_a_failed_run_still_stops_the_profile_when_asked(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("no /version")

    monkeypatch.setattr(bench_worker, "prepare", broken)  # calibration fails after the start
    assert bench.twin.router is not None
    with bench.twin.router.in_process():  # so the handlers see the patch
        result = bench.run("failstop", profile=OTHER, start=True, stop=True, **MATRIX)
    assert result.status == "FAILED" and result.error == "KeyError"
    entered = result.states_entered()
    assert (
        entered.index("StartProfile")
        < entered.index("Calibrate")
        < entered.index("RecordFailure")
        < entered.index("StopAfterFailure")
    )
    assert result.output is None and bench.phase(OTHER) == "STOPPED"
    bench.wait_for("no GPU left running", lambda: bench.running(OTHER) == (0, 0))


class _StreamsRefused(httpx.AsyncBaseTransport):
    """The model server behind an endpoint that answers every streamed request 503 (calibration and
    /metrics reach the real one): every measured request fails."""

    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        if body and json.loads(body).get("stream"):
            return httpx.Response(503, json={"error": "no healthy upstream"})
        return await self.real.handle_async_request(request)


def test_a_run_whose_requests_all_failed_fails_its_execution_after_the_record_and_the_stop(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = bench_worker.measure_scenario

    async def refused(*args: Any, **kwargs: Any) -> Any:
        return await real(*args, **{**kwargs, "transport": _StreamsRefused()})

    monkeypatch.setattr(bench_worker, "measure_scenario", refused)
    assert bench.twin.router is not None
    with bench.twin.router.in_process():  # so the handlers see the patch
        one = {**MATRIX, "input_tokens": [64], "concurrencies": [1]}
        result = bench.run("allfail", profile=OTHER, start=True, stop=True, **one)
    # what `aws stepfunctions describe-execution` says: FAILED, with the record's reason
    assert result.status == "FAILED" and result.error == "RequestsFailed", (result.error, result.cause)
    assert result.cause == (
        "requests failed past max_failure_rate 0: "
        'in64-c1: 2 of 2 failed (100.0%): http_status 2 (e.g. HTTP 503: {"error":"no healthy upstream"})'
    )
    entered = result.states_entered()
    assert entered.index("StopProfile") < entered.index("RecordSuccess") and entered[-2:] == ["BranchOnOutcome", "FailRequests"]
    run = next(r for r in bench.runs.list_runs(profile=OTHER) if r.execution == result.arn)
    assert run.status.value == "FAILED" and run.error == result.cause and run.finished_at is not None
    assert _written(bench, run.run_id) == ["in64-c1"]  # what was measured stays
    assert bench.phase(OTHER) == "STOPPED"
    bench.wait_for("no GPU left running", lambda: bench.running(OTHER) == (0, 0))


def test_bad_input_fails_at_once_naming_the_field(bench: Bench) -> None:
    result = bench.run("bad", profile=OTHER, start=True, concurrencies=[1, 1])
    assert result.status == "FAILED" and result.error == "InvalidInput"
    assert "concurrencies: duplicate values [1, 1]; give each value once" in json.loads(result.cause)["errorMessage"]
    assert result.states_entered() == ["Plan", "FailRun"] and bench.running(OTHER) == (0, 0)


ONE_SCENARIO = {"input_tokens": [64], "concurrencies": [2], "warmup": 1, "rounds": 2, "max_tokens": 24, "max_workers": 1}


def _bench_tasks(bench: Bench) -> list[dict[str, Any]]:
    """Every benchmark task the state machine ran, stopped or not."""
    cluster = bench.twin.bench_ecs["SERVINGCTL_BENCH_ECS_CLUSTER"]
    arns = [
        arn
        for status in ("RUNNING", "STOPPED")
        for arn in bench.ecs.list_tasks(cluster=cluster, family="servingctl-bench", desiredStatus=status)["taskArns"]
    ]
    return bench.ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if arns else []


def test_a_scenario_on_the_ecs_runner_runs_as_a_bench_task_from_start_to_exit(bench: Bench, ready_profile: str) -> None:
    before = {t["taskArn"] for t in _bench_tasks(bench)}
    result = bench.run("ecs-task", profile=READY, runner="ecs", **ONE_SCENARIO)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert "RunScenarioOnEcs" in result.states_entered() and "RunScenario" not in result.states_entered()
    [task] = [t for t in _bench_tasks(bench) if t["taskArn"] not in before]
    [container] = task["containers"]
    assert (task["lastStatus"], task["stoppedReason"], container["exitCode"]) == (
        "STOPPED",
        "Essential container in task exited",
        0,
    )
    assert task["launchType"] == "FARGATE" and task["startedBy"] == "AWS Step Functions"
    # The process had the task definition's environment and the state machine's override (the event).
    [override] = task["overrides"]["containerOverrides"]
    assert override["name"] == "bench" and [v["name"] for v in override["environment"]] == ["SERVINGCTL_BENCH_EVENT"]
    run_id = result.output["plan"]["run_id"]
    [scenario] = bench.runs.list_scenarios(run_id)  # written by the task itself, through the twin's AWS
    assert scenario.name == "in64-c2" and scenario.runner == "ecs" and scenario.records == (1 + 2) * 2
    assert scenario.summary.requests == 4 and scenario.summary.failed == 0
    assert scenario.summary.server.generation_tokens_equal is True
    assert bench.runs.get_run(run_id).status.value == "SUCCEEDED"


def test_a_bench_task_exiting_non_zero_fails_the_run_with_the_ecs_error(bench: Bench, ready_profile: str) -> None:
    bench.twin.set_faults("bench-task-exits")
    try:
        result = bench.run("ecsfail", profile=READY, runner="ecs", **ONE_SCENARIO)
    finally:
        bench.twin.set_faults()
    assert result.status == "FAILED" and result.error == "States.TaskFailed", (result.error, result.cause)
    cause = json.loads(result.cause)
    assert cause["StopCode"] == "EssentialContainerExited" and [c["ExitCode"] for c in cause["Containers"]] == [1]
    run = next(r for r in bench.runs.list_runs(profile=READY) if r.execution == result.arn)
    assert bench.runs.get_run(run.run_id).status.value == "FAILED"


ONE = {"input_tokens": [64], "concurrencies": [1], "warmup": 0, "rounds": 2, "max_tokens": 8, "max_workers": 1}


def test_a_retried_scenario_attempt_writes_its_own_records_and_the_first_objects_stay(
    bench: Bench, ready_profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servingctl.shared.errors import Throttled
    from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore

    real, calls = DynamoBenchmarkStore.put_scenario, {"n": 0}

    def throttled_once(self: Any, scenario: Any, replacing: str | None = None) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # the records are in S3, the summary write is throttled: Step Functions retries
            raise Throttled("DynamoDB: throttled")
        return real(self, scenario, replacing)

    monkeypatch.setattr(DynamoBenchmarkStore, "put_scenario", throttled_once)
    assert bench.twin.router is not None
    with bench.twin.router.in_process():  # so the handlers see the patch
        result = bench.run("retried", profile=READY, **ONE)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    run_id = result.output["plan"]["run_id"]
    [scenario] = bench.runs.list_scenarios(run_id)
    listed = bench.twin.client("s3").list_objects_v2(Bucket=bench.twin.bucket_name, Prefix=f"runs/{run_id}/")
    keys = sorted(o["Key"] for o in listed["Contents"])
    assert len(keys) == 2 and keys[0].endswith("-r0.jsonl.gz") and keys[1].endswith("-r1.jsonl.gz")
    assert scenario.records_key == keys[1]  # the retry's summary points at the retry's own records
    assert len(bench.records.get_records(keys[0])) == len(bench.records.get_records(keys[1])) == scenario.records


def test_a_duplicate_workers_scenario_write_is_refused_and_the_first_result_stays(bench: Bench, ready_profile: str) -> None:
    from datetime import UTC, datetime

    from servingctl.store.benchmarks import ResultExists, RunStatus

    result = bench.run("duplicate", profile=READY, **ONE)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    run_id = result.output["plan"]["run_id"]
    [first] = bench.runs.list_scenarios(run_id)
    # A second worker of the same scenario, finishing while the run is still measuring.
    bench.runs.update_run(run_id, datetime.now(UTC), status=RunStatus.RUNNING)
    second = first.model_copy(update={"records_key": f"runs/{run_id}/in64-c1.t1-r0.jsonl.gz", "written_at": datetime.now(UTC)})
    with pytest.raises(ResultExists, match="scenario in64-c1 is already written"):
        bench.runs.put_scenario(second)
    assert bench.runs.list_scenarios(run_id) == [first]
    bench.runs.update_run(run_id, datetime.now(UTC), status=RunStatus.SUCCEEDED)
