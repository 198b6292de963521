"""Faults on the twin: every failed start ends with nothing running, FAILED with a readable reason, no lock."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servingctl.local.twin import ExecutionResult, Twin

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
    assert session.stopped_at is not None  # the ledger session of the failed start is closed


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


def test_an_unexpected_handler_error_is_caught_and_rolled_back(
    twin: Twin, probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = "t-bug"
    from servingctl.control import aws

    def broken(task: dict[str, Any]) -> str:
        raise KeyError("attachments")  # e.g. an API answer without the expected field

    monkeypatch.setattr(aws, "task_ip", broken)  # the handlers run in this process
    result = probe.start(profile, "bug")
    _assert_rolled_back(probe, result, "KeyError", "attachments", profile)


def test_lock_expiry_recovers_from_a_dead_execution(twin: Twin, probe: Probe) -> None:
    profile = "t-dead"
    sfn = twin.client("stepfunctions")
    dead = twin.start_execution("start_profile", probe.start_input(profile), name=f"start-{profile}-dead")
    probe.wait_for("the start holds its locks", lambda: len(probe.locks(profile)) == 2)
    sfn.stop_execution(executionArn=dead, cause="simulated crash of the execution")
    assert twin.wait_execution(dead).status == "ABORTED"
    assert {lock.owner for lock in probe.locks(profile)} == {dead}

    refused = probe.start(profile, "blocked")
    assert refused.status == "FAILED" and refused.error == "LockHeld"
    assert {lock.owner for lock in probe.locks(profile)} == {dead}  # the refusal did not steal or drop it

    # Time passes beyond the dead execution's lease.
    for lock in probe.locks(profile):
        probe.table.update_item(
            Key={"pk": "lock", "sk": lock.name},
            UpdateExpression="SET expires_epoch = :past, expires_at = :at",
            ExpressionAttributeValues={":past": 1, ":at": "1970-01-01T00:00:01.000Z"},
        )
    recovered = probe.start(profile, "recovered")
    assert recovered.status == "SUCCEEDED", (recovered.error, recovered.cause)
    assert probe.state(profile).phase == "READY" and probe.locks(profile) == []
    assert len(probe.group(profile)["Instances"]) == 1
    stopped = probe.stop(profile, "recovered")
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    probe.assert_nothing_running(profile)
    assert json.dumps(stopped.output)  # JSON-safe output (moto breaks on datetimes)
