"""A run_benchmark execution that dies without recording its end (aborted: StopExecution runs no
Catch; timed out; failed in its own failure path), on a twin running the deployed control loop
(template.yaml's sweep schedule divided by the time scale, and its status-change rule) and every
function under its template.yaml role: the run reads FAILED in the list and the detail, its hold
on the profile is gone, the profile its `--start --stop` started is stopped within one sweep
interval, and the worker measuring when the run ended fails with RunEnded having written nothing.
Each test prints its figures (pytest -s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from servingctl.runs import worker as bench_worker
from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

from .conftest import START_OPTIONS, STOP_OPTIONS, Bench

PROFILE = "nemotron-nano"
TIME_SCALE = 10.0
# run_benchmark's TimeoutSeconds on this twin: past a start (~15 s) and into a long scenario.
RUN_TIMEOUT_S = 75
# A scenario that outlasts the test's patience: the execution ends while it is measured.
LONG = {"input_tokens": [64], "concurrencies": [2], "mode": "sustained", "duration_s": 300, "max_tokens": 64, "max_workers": 1}
# The stop's own steps (drain, termination) after the sweep started it, on this twin's clock.
STOP_MARGIN_S = 60


@pytest.fixture(scope="module")
def twin(cfn: dict) -> Iterator[Twin]:
    """A twin whose sweep runs on its schedule and gets the status-change events, every function
    under its template.yaml role (the sweep's grant to end runs, the worker's condition checks)."""
    with Twin(
        model_server="sim",
        time_scale=TIME_SCALE,
        delays=Delays().scaled(0.1),
        sweep=True,
        api_port=0,
        iam_template=cfn,
        execution_timeouts_s={"run_benchmark": RUN_TIMEOUT_S},
    ) as running:
        yield running


def _interval(twin: Twin) -> float:
    assert twin.eventbridge is not None
    return twin.eventbridge.interval_s


def _measuring(bench: Bench, name: str) -> tuple[str, str]:
    """Start `bench --start --stop` with a long scenario; return (execution, run id) once it measures."""
    document = {
        "profile": PROFILE,
        "start": True,
        "stop": True,
        "start_options": START_OPTIONS,
        "stop_options": STOP_OPTIONS,
        **LONG,
    }
    arn = bench.twin.start_execution("run_benchmark", document, name=f"bench-{name}")
    bench.wait_for(
        "the run measures its scenario",
        lambda: (
            _run_of(bench, arn) is not None
            and _run_of(bench, arn).status.value == "RUNNING"
            and "RunScenario" in _entered(bench, arn)
        ),
        timeout_s=120,
    )
    return arn, _run_of(bench, arn).run_id


def _run_of(bench: Bench, arn: str) -> Any:
    return next((r for r in bench.runs.list_runs(profile=PROFILE) if r.execution == arn), None)


def _entered(bench: Bench, arn: str) -> list[str]:
    events = bench.sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


def _worker_errors(twin: Twin) -> list[str | None]:
    assert twin.router is not None
    return [error for name, error in twin.router.invocations if name == "bench_worker"]


def _assert_ended(bench: Bench, arn: str, run_id: str, status: str, ended_at: float, workers_before: int) -> None:
    """FAILED everywhere with the execution's status, no hold, STOPPED within one sweep interval,
    the in-flight worker ended by RunEnded, nothing of the run written. Prints the figures."""
    twin, interval = bench.twin, _interval(bench.twin)
    bench.wait_for("the run recorded FAILED", lambda: bench.runs.get_run(run_id).status.value == "FAILED", timeout_s=interval)
    recorded = time.monotonic() - ended_at
    run = bench.runs.get_run(run_id)
    assert run.error is not None and run.error.startswith(f"execution {status}") and run.finished_at is not None
    listed = httpx.get(f"{twin.api_url}/benchmarks", params={"profile": PROFILE}, timeout=30, auth=twin.api_auth()).json()
    assert [r["status"] for r in listed if r["run_id"] == run_id] == ["FAILED"]
    detail = httpx.get(f"{twin.api_url}/benchmarks/{run_id}", timeout=30, auth=twin.api_auth()).json()
    assert detail["status"] == "FAILED" and detail["error"] == run.error
    assert bench.profiles.get_profile(PROFILE).held_by is None
    bench.wait_for(
        "the profile STOPPED with nothing running",
        lambda: bench.phase(PROFILE) == "STOPPED" and bench.running(PROFILE) == (0, 0),
        timeout_s=interval + STOP_MARGIN_S,
    )
    stopped = time.monotonic() - ended_at
    bench.wait_for("the worker in flight ended", lambda: len(_worker_errors(twin)) > workers_before, timeout_s=interval)
    assert "RunEnded" in _worker_errors(twin)[workers_before:]
    assert bench.runs.list_scenarios(run_id) == [] and bench.runs.list_comparisons(run_id) == []
    s3 = twin.client("s3")
    assert s3.list_objects_v2(Bucket=twin.bucket_name, Prefix=f"runs/{run_id}/").get("KeyCount") == 0
    print(
        f"\nFIGURE run {status}: recorded FAILED {recorded:.1f} s and profile STOPPED {stopped:.1f} s after the execution "
        f"ended (sweep interval {interval:.0f} s real = {interval * TIME_SCALE:.0f} s simulated)"
    )


@pytest.fixture
def bench(twin: Twin) -> Iterator[Bench]:
    """A Bench of the module's twin; a profile a failed test left running is stopped afterwards."""
    checker = Bench(twin, set())
    yield checker
    if checker.phase(PROFILE) != "STOPPED" or checker.running(PROFILE) != (0, 0):
        checker.stop(PROFILE, f"cleanup-{time.monotonic_ns()}")


def test_an_aborted_bench_start_stop_is_failed_released_and_stopped(
    bench: Bench, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from servingctl_cli.main import main

    before = len(_worker_errors(bench.twin))
    arn, run_id = _measuring(bench, "aborted")
    bench.sfn.stop_execution(executionArn=arn, cause="aborted from the console")
    ended_at = time.monotonic()
    _assert_ended(bench, arn, run_id, "ABORTED", ended_at, before)
    # The reason Step Functions gives for the stop is the run's error, and what `servingctl runs` shows.
    assert bench.runs.get_run(run_id).error == "execution ABORTED: aborted from the console"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["runs", "--profile", PROFILE, "--api-url", bench.twin.api_url]) == 0
    assert "error: execution ABORTED: aborted from the console" in capsys.readouterr().out


def test_a_timed_out_bench_start_stop_is_failed_released_and_stopped(bench: Bench) -> None:
    before = len(_worker_errors(bench.twin))
    arn, run_id = _measuring(bench, "timeout")
    bench.wait_for(
        "the execution times out",
        lambda: bench.sfn.describe_execution(executionArn=arn)["status"] == "TIMED_OUT",
        timeout_s=RUN_TIMEOUT_S + 30,
    )
    _assert_ended(bench, arn, run_id, "TIMED_OUT", time.monotonic(), before)


def test_a_run_whose_failure_record_failed_is_recorded_failed_by_the_sweep(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("no /version")

    def unwritable(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("DynamoDB unreachable")

    monkeypatch.setattr(bench_worker, "prepare", broken)  # calibration fails after the start...
    monkeypatch.setitem(bench_worker.ACTIONS, "finish", unwritable)  # ...and so does recording it
    assert bench.twin.router is not None
    with bench.twin.router.in_process():  # so the handlers see the patches
        result = bench.run("unrecorded", profile=PROFILE, start=True, stop=True, **LONG)
    assert result.status == "FAILED" and result.error == "KeyError"
    run = _run_of(bench, result.arn)
    # the sweep records the run, then releases its hold (two writes): wait for both
    bench.wait_for(
        "the sweep records the run FAILED and releases its hold",
        lambda: bench.runs.get_run(run.run_id).status.value == "FAILED" and bench.profiles.get_profile(PROFILE).held_by is None,
        timeout_s=_interval(bench.twin),
    )
    ended = bench.runs.get_run(run.run_id)
    assert ended.error is not None and ended.error.startswith("execution FAILED: KeyError")
    assert bench.phase(PROFILE) == "STOPPED"


def test_a_cancelled_run_is_cancelled_released_and_its_stop_started(bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    """`servingctl runs cancel RUN_ID` through the API (its function under its template.yaml role):
    the run CANCELLED everywhere (the sweep leaves it so), its execution ABORTED, the worker in flight
    ended by RunEnded with nothing written, the hold released and the profile it started STOPPED."""
    from servingctl_cli.main import main

    twin = bench.twin
    before = len(_worker_errors(twin))
    arn, run_id = _measuring(bench, "cancelled")
    cancelled_at = time.monotonic()
    assert main(["runs", "cancel", run_id, "--api-url", twin.api_url, "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["status"] == "CANCELLED" and answer["execution_arn"] == arn and answer["stop_execution"]
    described = bench.sfn.describe_execution(executionArn=arn)
    run = bench.runs.get_run(run_id)
    assert run.status.value == "CANCELLED" and run.error is not None and run.error.startswith("cancelled by arn:aws:")
    # The execution says why it was stopped, as the cancel told Step Functions.
    assert (described["status"], described["error"], described["cause"]) == ("ABORTED", "Cancelled", run.error)
    assert bench.profiles.get_profile(PROFILE).held_by is None
    bench.wait_for(
        "the profile STOPPED with nothing running",
        lambda: bench.phase(PROFILE) == "STOPPED" and bench.running(PROFILE) == (0, 0),
        timeout_s=STOP_MARGIN_S,
    )
    stopped = time.monotonic() - cancelled_at
    bench.wait_for("the worker in flight ended", lambda: len(_worker_errors(twin)) > before, timeout_s=_interval(twin))
    assert "RunEnded" in _worker_errors(twin)[before:]
    assert bench.runs.list_scenarios(run_id) == []
    time.sleep(_interval(twin) + 1)  # a sweep has passed: it does not record the cancelled run FAILED
    listed = httpx.get(f"{twin.api_url}/benchmarks", params={"profile": PROFILE}, timeout=30, auth=twin.api_auth()).json()
    assert [r["status"] for r in listed if r["run_id"] == run_id] == ["CANCELLED"]
    detail = httpx.get(f"{twin.api_url}/benchmarks/{run_id}", timeout=30, auth=twin.api_auth()).json()
    assert detail["status"] == "CANCELLED"  # (its execution here is named by the test, not bench-RUN_ID)
    # Once ended, a cancel is refused by name (exit 1); an unknown run is a 404; a body field is refused.
    assert main(["runs", "cancel", run_id, "--api-url", twin.api_url]) == 1
    assert f"run {run_id} already ended (CANCELLED); nothing to cancel" in capsys.readouterr().err
    assert main(["runs", "cancel", "20261203T090000Z-nosuch", "--api-url", twin.api_url]) == 1
    assert "no benchmark run '20261203T090000Z-nosuch'" in capsys.readouterr().err
    refused = httpx.post(f"{twin.api_url}/benchmarks/{run_id}/cancel", json={"force": True}, timeout=30, auth=twin.api_auth())
    assert refused.status_code == 400
    print(f"\nFIGURE run cancelled: profile STOPPED {stopped:.1f} s after the cancel")


def _bench_task(bench: Bench, run_id: str) -> dict[str, Any] | None:
    """The benchmark task of the run (its event names the run), RUNNING or STOPPED; None before RunTask."""
    cluster = bench.twin.bench_ecs["SERVINGCTL_BENCH_ECS_CLUSTER"]
    arns = [
        arn
        for status in ("RUNNING", "STOPPED")
        for arn in bench.ecs.list_tasks(cluster=cluster, family="servingctl-bench", desiredStatus=status)["taskArns"]
    ]
    tasks = bench.ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if arns else []
    return next((t for t in tasks if run_id in json.dumps(t["overrides"])), None)


def test_a_cancelled_run_on_the_ecs_runner_stops_its_benchmark_task(bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    """`servingctl runs cancel RUN_ID` of a run whose scenario runs as the benchmark task (runTask.sync):
    stopping the execution stops the task (SIGTERM, stop code UserInitiated), its process ends, the run
    is CANCELLED with nothing written and the profile it started is STOPPED with nothing running."""
    from servingctl_cli.main import main

    twin = bench.twin
    document = {
        "profile": PROFILE,
        "start": True,
        "stop": True,
        "runner": "ecs",
        "start_options": START_OPTIONS,
        "stop_options": STOP_OPTIONS,
        **LONG,
    }
    arn = twin.start_execution("run_benchmark", document, name="bench-ecs-cancelled")
    bench.wait_for(
        "the run's scenario runs as the benchmark task", lambda: "RunScenarioOnEcs" in _entered(bench, arn), timeout_s=120
    )
    run_id = _run_of(bench, arn).run_id
    bench.wait_for(
        "the benchmark task RUNNING", lambda: (_bench_task(bench, run_id) or {}).get("lastStatus") == "RUNNING", timeout_s=60
    )
    cancelled_at = time.monotonic()
    assert main(["runs", "cancel", run_id, "--api-url", twin.api_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "CANCELLED"
    bench.wait_for(
        "the benchmark task STOPPED", lambda: (_bench_task(bench, run_id) or {}).get("lastStatus") == "STOPPED", timeout_s=60
    )
    task_stopped = time.monotonic() - cancelled_at
    task = _bench_task(bench, run_id)
    assert task is not None and task["stopCode"] == "UserInitiated" and arn in task["stoppedReason"]
    assert [c["exitCode"] for c in task["containers"]] == [143]  # ended by SIGTERM, as docker reports it
    assert twin.tasks is not None and twin.tasks.exit_codes[task["taskArn"]] == 143  # its process is gone
    described = bench.sfn.describe_execution(executionArn=arn)
    assert (described["status"], described["error"]) == ("ABORTED", "Cancelled")
    run = bench.runs.get_run(run_id)
    assert run.status.value == "CANCELLED" and bench.runs.list_scenarios(run_id) == []
    assert twin.client("s3").list_objects_v2(Bucket=twin.bucket_name, Prefix=f"runs/{run_id}/").get("KeyCount") == 0
    bench.wait_for(
        "the profile STOPPED with nothing running",
        lambda: bench.phase(PROFILE) == "STOPPED" and bench.running(PROFILE) == (0, 0),
        timeout_s=STOP_MARGIN_S,
    )
    print(f"\nFIGURE ecs run cancelled: benchmark task STOPPED {task_stopped:.1f} s after the cancel")
