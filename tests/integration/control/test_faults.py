"""Faults on the twin: every failed start ends with nothing running, FAILED with a readable reason, no lock."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from servingctl_twin.twin import ExecutionResult, Twin, function_name

Probe = Any  # conftest.Probe (conftest modules are not importable under --import-mode=importlib)


def _assert_rolled_back(probe: Probe, result: ExecutionResult, error: str, reason: str, profile: str) -> None:
    assert result.status == "FAILED"
    assert result.error == error, (result.error, result.cause)
    assert reason in result.cause
    assert "RollBack" in result.states_entered()
    probe.assert_nothing_running(profile)
    state = probe.state(profile)
    assert state.phase == "FAILED" and state.execution == result.arn
    assert reason in (state.last_error or "")
    assert probe.locks(profile) == []
    [session] = [s for s in probe.sessions(profile) if s.start_execution == result.arn]
    if session.stopped_at is None:
        # The instance was still terminating: the record keeps the session for the next stop (the
        # reconciler's), which closes it at the termination time AWS lists, not at its own time.
        assert state.session_id == session.session_id
        stopped = probe.stop(profile, "after-roll-back")
        assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
        [session] = [s for s in probe.sessions(profile) if s.start_execution == result.arn]
        assert session.close_reason == "stopped"
    ended = probe.terminated_at(profile)
    if ended is not None:  # an instance ran (the store keeps milliseconds)
        assert abs(session.stopped_at - ended) < timedelta(milliseconds=1), (session.stopped_at, ended)
    assert session.stopped_at is not None and probe.state(profile).session_id is None


def test_capacity_unavailable_fails_fast_with_aws_message(twin: Twin, probe: Probe) -> None:
    profile = "t-cap"
    twin.set_faults("capacity-unavailable")
    result = probe.start(profile, "cap")
    _assert_rolled_back(probe, result, "CapacityUnavailable", "InsufficientInstanceCapacity", profile)
    assert "We currently do not have sufficient g7e.2xlarge capacity" in result.cause
    assert [e for e in twin.world.events_of("launch") if profile in e.detail] == []


def test_task_crash_fails_with_the_stopped_reason_after_repeated_failures(twin: Twin, probe: Probe) -> None:
    profile = "t-crash"
    twin.set_faults("task-crash")
    result = probe.start(profile, "crash")
    _assert_rolled_back(probe, result, "TaskFailed", "Essential container in task exited", profile)
    crashed = [t for t in probe.stopped_tasks(profile) if t["stoppedReason"] == "Essential container in task exited"]
    assert len(crashed) >= 3  # the registry's max_task_failures


def test_never_healthy_times_out_on_target_health(twin: Twin, probe: Probe) -> None:
    profile = "t-sick"
    twin.set_faults("never-healthy")
    body = probe.start_input(profile, deadlines={"capacity_s": 60, "task_s": 60, "health_s": 8})
    result = twin.run("start_profile", body, name=f"start-{profile}-1")
    _assert_rolled_back(probe, result, "DeadlineExceeded", "healthy", profile)
    assert [e for e in twin.world.events_of("target-healthy") if e.detail.startswith(f"{profile}:")] == []


def test_protected_instance_is_unprotected_and_terminated_by_stop(twin: Twin, probe: Probe) -> None:
    profile = "t-prot"
    twin.set_faults("protected-instance")
    started = probe.start(profile, "prot")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    [instance] = probe.group(profile)["Instances"]
    assert instance["ProtectedFromScaleIn"] is True
    stopped = probe.stop(profile, "prot")
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    assert stopped.output["release"]["protection_cleared"] == [instance["InstanceId"]]
    probe.assert_nothing_running(profile)
    assert probe.state(profile).phase == "STOPPED" and probe.locks(profile) == []


def test_protected_instance_is_released_by_a_roll_back_too(twin: Twin, probe: Probe) -> None:
    profile = "t-protfail"
    twin.set_faults("protected-instance", "never-healthy")
    body = probe.start_input(profile, deadlines={"capacity_s": 60, "task_s": 60, "health_s": 6})
    result = twin.run("start_profile", body, name=f"start-{profile}-1")
    _assert_rolled_back(probe, result, "DeadlineExceeded", "healthy", profile)


def test_throttle_once_is_absorbed_by_retries(twin: Twin, probe: Probe) -> None:
    profile = "t-thr"
    twin.set_faults("throttle-once")
    started = probe.start(profile, "thr")
    stopped = probe.stop(profile, "thr")
    throttled = {e.detail for e in twin.world.events_of("throttled")}
    assert {"lambda:Invoke", "ecs:UpdateService", "elasticloadbalancing:DescribeTargetHealth"} <= throttled
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    retried = [e["taskFailedEventDetails"]["error"] for e in started.history if "taskFailedEventDetails" in e]
    assert retried == ["Lambda.TooManyRequestsException"]
    probe.assert_nothing_running(profile)


def test_an_unexpected_handler_error_is_caught_and_rolled_back(twin: Twin, probe: Probe, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = "t-bug"
    from servingctl.control import aws

    def broken(task: dict[str, Any]) -> str:
        raise KeyError("attachments")  # e.g. an API answer without the expected field

    monkeypatch.setattr(aws, "task_ip", broken)
    assert twin.router is not None
    with twin.router.in_process():  # so the handlers see the patch
        result = probe.start(profile, "bug")
    _assert_rolled_back(probe, result, "KeyError", "attachments", profile)


def test_a_start_right_after_a_dead_owner_takes_its_lock_at_once(twin: Twin, probe: Probe) -> None:
    profile = "t-dead"
    sfn = twin.client("stepfunctions")
    dead = twin.start_execution("start_profile", probe.start_input(profile), name=f"start-{profile}-dead")
    probe.wait_for("the start holds its locks", lambda: len(probe.locks(profile)) == 2)
    sfn.stop_execution(executionArn=dead, cause="simulated crash of the execution")
    assert twin.wait_execution(dead).status == "ABORTED"
    assert {lock.owner for lock in probe.locks(profile)} == {dead}
    assert all(lock.live(datetime.now(UTC)) for lock in probe.locks(profile))  # its lease has not run out

    # Not blocked for the lease, let alone the deadlines: the lock is taken over from the dead owner.
    aborted_at = sfn.describe_execution(executionArn=dead)["stopDate"]
    recovered = probe.start(profile, "recovered")
    assert recovered.status == "SUCCEEDED", (recovered.error, recovered.cause)
    locked = next(e for e in recovered.history if e.get("stateExitedEventDetails", {}).get("name") == "AcquireLock")
    assert json.loads(locked["stateExitedEventDetails"]["output"])["lock"]["taken_over_from"] == [dead]
    waited = (locked["timestamp"] - aborted_at).total_seconds()
    print(
        f"\nFIGURE restart after a dead owner: lock taken {waited:.2f} s after the abort "
        f"(lease {recovered.output['config']['settings']['lock_lease_s']} s)"
    )
    assert waited < recovered.output["config"]["settings"]["lock_lease_s"]
    assert probe.state(profile).phase == "READY" and probe.locks(profile) == []
    assert len(probe.group(profile)["Instances"]) == 1
    stopped = probe.stop(profile, "recovered")
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    probe.assert_nothing_running(profile)
    assert json.dumps(stopped.output)  # JSON-safe output (moto breaks on datetimes)


@contextlib.contextmanager
def _smoke_timeout(twin: Twin, timeout_s: int) -> Iterator[None]:
    """The smoke test deployed with another Timeout (template.yaml's 30 s would make the test slow)."""
    lam, name = twin.client("lambda"), function_name("smoke_test")
    deployed = lam.get_function_configuration(FunctionName=name)["Timeout"]
    lam.update_function_configuration(FunctionName=name, Timeout=timeout_s)
    try:
        yield
    finally:
        lam.update_function_configuration(FunctionName=name, Timeout=deployed)


def _smoke_in_flight(twin: Twin) -> list[Any]:
    assert twin.router is not None
    return [w for w in twin.router.workers("smoke_test") if w.busy]


def test_a_smoke_test_past_its_timeout_is_killed_and_rolled_back(twin: Twin, probe: Probe) -> None:
    profile = "t-hang"
    twin.set_faults("smoke-test-hangs")
    with _smoke_timeout(twin, 2):
        result = probe.start(profile, "hang")
    _assert_rolled_back(probe, result, "Sandbox.Timedout", "Task timed out after 2.00 seconds", profile)
    failed = [e["taskFailedEventDetails"] for e in result.history if "taskFailedEventDetails" in e]
    assert [f["error"] for f in failed] == ["Sandbox.Timedout"]  # not retried: a hang would hang again
    assert _smoke_in_flight(twin) == []  # the hung handler was killed, not left running


def test_an_abort_during_a_hung_smoke_test_leaves_nothing_running_after_a_stop(twin: Twin, probe: Probe) -> None:
    profile = "t-abort"
    sfn = twin.client("stepfunctions")
    twin.set_faults("smoke-test-hangs")
    with _smoke_timeout(twin, 5):
        arn = twin.start_execution("start_profile", probe.start_input(profile), name=f"start-{profile}-1")
        probe.wait_for("the smoke test is in flight", lambda: _smoke_in_flight(twin))
        [hung] = _smoke_in_flight(twin)
        sfn.stop_execution(executionArn=arn, cause="aborted from the console")
        assert twin.wait_execution(arn, timeout_s=1).status == "ABORTED"  # at once, not after the Lambda
        assert hung.process.is_alive()  # Lambda does not cancel an invocation whose caller went away
        probe.wait_for("Lambda's timeout ended the invocation", lambda: not hung.process.is_alive(), timeout_s=30)
    twin.set_faults()
    stopped = probe.stop(profile, "after-abort")
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    probe.assert_nothing_running(profile)
    assert probe.state(profile).phase == "STOPPED" and probe.locks(profile) == []


def test_a_worker_killed_mid_invocation_fails_the_step_with_runtime_exit_error(twin: Twin, probe: Probe) -> None:
    profile = "t-kill"
    twin.set_faults("smoke-test-hangs")  # holds the invocation (30 s timeout) until the kill
    arn = twin.start_execution("start_profile", probe.start_input(profile), name=f"start-{profile}-1")
    probe.wait_for("the smoke test is in flight", lambda: _smoke_in_flight(twin))
    [worker] = _smoke_in_flight(twin)
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)  # the execution environment dies (out of memory, say)
    result = twin.wait_execution(arn)
    _assert_rolled_back(probe, result, "Runtime.ExitError", "Runtime exited with error: signal: killed", profile)
