"""The reconciler on the twin, with the twin running the deployed control loop (template.yaml's sweep
schedule divided by the time scale, and its status-change rule): every way a flow can die after
ScaleOut ends with the pool's ASG and the service at 0, no lock, the ledger session closed and a
recorded reason, with nobody calling stop. Each test prints the seconds from the fault to the pool
and service at desired 0, and the sweep interval it ran with (pytest -s shows them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from servingctl_twin.twin import Twin

from .conftest import DELAYS, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

ABORT, HEALTH, BENCH, PREP, ROLL, TIMEOUT = "r-abort", "r-health", "r-bench", "r-prep", "r-roll", "r-time"
SWEPT = ("r-s1", "r-s2", "r-s3")
PROFILES = (ABORT, HEALTH, BENCH, PREP, ROLL, TIMEOUT, *SWEPT)
# start_profile times out after this many real seconds on this twin (a start takes ~15).
START_TIMEOUT_S = 45
# A stop's own steps after desired 0 (drain, termination) on this twin's clock, beyond the interval.
STOP_MARGIN_S = 60
# A stop found by a scheduled sweep reaches desired 0 this long after that sweep (its first steps).
STOP_START_S = 15


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin running the sweep on its schedule and delivering status-change events to it."""
    registry = registry_with(tmp_path_factory.mktemp("registry"), PROFILES)
    with Twin(
        registry,
        model_server="sim",
        time_scale=TIME_SCALE,
        delays=DELAYS,
        sweep=True,
        execution_timeouts_s={"start_profile": START_TIMEOUT_S},
    ) as running:
        yield running


def _interval(twin: Twin) -> float:
    assert twin.eventbridge is not None
    return twin.eventbridge.interval_s


def _capacity(probe: Probe, profile: str) -> tuple[int, int]:
    return probe.service(profile)["desiredCount"], probe.group(profile)["DesiredCapacity"]


def _running_start(probe: Probe, profile: str, until: str, **extra: Any) -> str:
    """Start the profile and return the execution once it entered the state named until."""
    arn = probe.twin.start_execution("start_profile", probe.start_input(profile, **extra), name=f"start-{profile}-fault")
    probe.wait_for(f"start of {profile} enters {until}", lambda: until in _entered(probe, arn))
    return arn


def _entered(probe: Probe, arn: str) -> list[str]:
    events = probe.twin.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


def _assert_reconciled(probe: Probe, profile: str, fault_at: float, reason: str, *also: str) -> float:
    """Pool and service at 0 within one sweep interval of the fault (plus a stop's first steps when
    only the schedule can find it); then no instance, STOPPED, no lock, every session closed and the
    reason on the record, the newest session closed when its instance finished terminating. Prints and returns the
    seconds from the fault to desired 0."""
    interval = _interval(probe.twin)
    probe.wait_for(
        f"{profile}: service and ASG at desired 0", lambda: _capacity(probe, profile) == (0, 0), timeout_s=interval + STOP_START_S
    )
    seconds = time.monotonic() - fault_at
    probe.wait_for(f"{profile}: reason recorded", lambda: probe.state(profile).reconcile_reason is not None, timeout_s=10)
    probe.wait_for(
        f"{profile}: STOPPED with no lock",
        lambda: probe.state(profile).phase == "STOPPED" and not probe.locks(profile),
        timeout_s=STOP_MARGIN_S,
    )
    probe.assert_nothing_running(profile)
    sessions = probe.sessions(profile)
    assert all(s.stopped_at is not None for s in sessions)
    ended = probe.terminated_at(profile)
    if sessions and ended is not None:  # an instance ran for a start: billed until AWS finished terminating it (ms kept)
        newest = max(sessions, key=lambda s: s.started_at)
        assert newest.stopped_at is not None and abs(newest.stopped_at - ended) < timedelta(milliseconds=1), (newest, ended)
    recorded = probe.state(profile).reconcile_reason
    assert recorded is not None and recorded.startswith(tuple(r + ": " for r in (reason, *also))), recorded
    print(
        f"\nFIGURE {profile}: {reason}: {seconds:.1f} s from the fault to service and ASG at desired 0 "
        f"(sweep interval {interval:.0f} s real = {interval * TIME_SCALE:.0f} s simulated)"
    )
    return seconds


def test_a_start_aborted_right_after_scale_out_is_stopped(twin: Twin, probe: Probe) -> None:
    arn = _running_start(probe, ABORT, "CheckCapacity")
    assert _capacity(probe, ABORT) == (1, 1)
    twin.client("stepfunctions").stop_execution(executionArn=arn, cause="aborted from the console")
    _assert_reconciled(probe, ABORT, time.monotonic(), "lock-owner-ended")


def test_a_start_aborted_while_waiting_for_health_is_stopped(twin: Twin, probe: Probe) -> None:
    twin.set_faults("never-healthy")
    arn = _running_start(probe, HEALTH, "CheckTargets", deadlines={"capacity_s": 60, "task_s": 60, "health_s": 300})
    probe.wait_for("the task runs", lambda: bool(probe.running_tasks(HEALTH)))
    twin.client("stepfunctions").stop_execution(executionArn=arn, cause="aborted from the console")
    _assert_reconciled(probe, HEALTH, time.monotonic(), "lock-owner-ended")


def test_a_run_benchmark_aborted_in_start_profile_aborts_its_start_and_is_stopped(twin: Twin, probe: Probe) -> None:
    sfn = twin.client("stepfunctions")
    document = {
        "profile": BENCH,
        "start": True,
        "stop": True,
        "input_tokens": [64],
        "concurrencies": [1],
        "warmup": 1,
        "rounds": 1,
        "max_tokens": 8,
        "max_workers": 1,
        "start_options": {"poll": probe.start_input(BENCH)["poll"], "deadlines": probe.start_input(BENCH)["deadlines"]},
        "stop_options": {k: v for k, v in probe.stop_input(BENCH).items() if k != "profile"},
    }
    run = twin.start_execution("run_benchmark", document, name="bench-aborted")
    probe.wait_for("the run's start scaled out", lambda: _capacity(probe, BENCH) == (1, 1), timeout_s=60)
    [child] = sfn.list_executions(stateMachineArn=twin.state_machines["start_profile"], statusFilter="RUNNING")["executions"]
    sfn.stop_execution(executionArn=run, cause="aborted from the console")
    fault_at = time.monotonic()
    probe.wait_for(
        "the child start is aborted with its parent",
        lambda: sfn.describe_execution(executionArn=child["executionArn"])["status"] == "ABORTED",
        timeout_s=10,
    )
    _assert_reconciled(probe, BENCH, fault_at, "lock-owner-ended")


def test_a_stop_that_fails_in_prepare_stop_is_driven_again(twin: Twin, probe: Probe) -> None:
    started = probe.start(PREP, "ok")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    twin.set_faults("prepare-stop-fails-once")
    failed = probe.stop(PREP, "fails")
    assert (failed.status, failed.error) == ("FAILED", "ClientError"), failed.cause
    assert "InternalServerError" in failed.cause
    # ForceRelease already scaled to zero and left the session open while the instance terminates:
    # the reconciler finds the failed stop or, once the record says FAILED, the open session.
    _assert_reconciled(probe, PREP, time.monotonic(), "stop-failed", "session-open")


def test_a_roll_back_that_fails_is_stopped(twin: Twin, probe: Probe) -> None:
    twin.set_faults("never-healthy", "roll-back-fails")
    body = probe.start_input(ROLL, deadlines={"capacity_s": 60, "task_s": 60, "health_s": 4})
    result = twin.run("start_profile", body, name=f"start-{ROLL}-rollfail")
    fault_at = time.monotonic()
    assert result.status == "FAILED" and result.states_entered()[-2:] == ["RollBack", "FailStart"], result.states_entered()
    failures = [e["taskFailedEventDetails"]["error"] for e in result.history if "taskFailedEventDetails" in e]
    # The health deadline sent it to RollBack, which failed every one of its attempts.
    assert failures[0] == "DeadlineExceeded" and len(failures) > 2 and set(failures[1:]) == {"ClientError"}, failures
    twin.set_faults()
    _assert_reconciled(probe, ROLL, fault_at, "lock-owner-ended")


def test_a_start_that_times_out_is_stopped(twin: Twin, probe: Probe) -> None:
    twin.set_faults("never-healthy")
    body = probe.start_input(TIMEOUT, deadlines={"capacity_s": 60, "task_s": 60, "health_s": 600})
    result = twin.run("start_profile", body, name=f"start-{TIMEOUT}-slow", timeout_s=START_TIMEOUT_S + 30)
    fault_at = time.monotonic()
    assert result.status == "TIMED_OUT"
    twin.set_faults()
    _assert_reconciled(probe, TIMEOUT, fault_at, "lock-owner-ended")


def test_a_sweep_where_the_first_profile_raises_still_stops_the_other_two(
    twin: Twin, probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servingctl.control import aws

    first = probe.registry.profiles[SWEPT[0]]
    original = aws.service_counts

    def broken(ecs: Any, cluster: str, service: str) -> Any:
        if service == first.service:
            raise RuntimeError("ECS answered garbage")
        return original(ecs, cluster, service)

    monkeypatch.setattr(aws, "service_counts", broken)
    assert twin.router is not None
    with twin.router.in_process():  # so the handlers see the patch
        assert twin.eventbridge is not None
        with twin.eventbridge.held():  # no sweep sees one profile changed and not the next
            for profile in SWEPT:  # capacity nobody recorded (a start from outside servingctl, say)
                spec = probe.registry.profiles[profile]
                probe.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
            fault_at = time.monotonic()

        def first_sweep_after_the_fault() -> Any:
            # Invoked after the fault, whenever it was queued (one delivery at a time: the first is done first).
            after = [d for d in twin.eventbridge.deliveries_of("schedule") if d.started is not None and d.started >= fault_at]
            return after[0] if after and after[0].done else None

        probe.wait_for("a scheduled sweep ran", lambda: first_sweep_after_the_fault() is not None, timeout_s=_interval(twin) + 30)
        sweep = first_sweep_after_the_fault()
        assert sweep.error is None, sweep.answer
        repairs = {r["profile"]: r for r in sweep.answer["repairs"] if r["profile"] in SWEPT}
        assert repairs[SWEPT[0]]["action"] == "error" and repairs[SWEPT[0]]["detail"] == "RuntimeError: ECS answered garbage"
        for profile in SWEPT[1:]:
            assert (repairs[profile]["reason"], repairs[profile]["action"]) == ("capacity-unexplained", "stop-started")
            _assert_reconciled(probe, profile, fault_at, "capacity-unexplained")
        monkeypatch.undo()
    assert _capacity(probe, SWEPT[0])[0] == 1  # the one that raised was left for the next sweep
    _assert_reconciled(probe, SWEPT[0], time.monotonic(), "capacity-unexplained")
