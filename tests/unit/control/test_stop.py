"""stop_profile steps against a moto world: drain, pool guard, protection, termination, ledger, failure."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servingctl.control.deps import Deps
from servingctl.shared.errors import DeadlineExceeded, StopRequested
from servingctl.store import Phase

from .conftest import EXEC_OTHER, EXEC_START, EXEC_STOP, EXEC_STOP_2, OTHER, PROFILE, FakeClock, World
from .test_start import loop_until_ready, started, step


def ready_profile(deps: Deps, world: World, clock: FakeClock, **extra: Any) -> dict[str, Any]:
    """Drive a start to READY, the world playing AWS; returns the start state."""
    state = started(deps, **extra)
    world.register_instances()
    step(deps, "check_capacity", state, "capacity")
    task = world.place_task()
    step(deps, "check_task", state, "task")
    world.register_target(task)
    step(deps, "check_targets", state, "targets")
    step(deps, "record_ready", state, "record")
    step(deps, "release_lock", state, "unlock")
    return {"start": state, "task": task}


def stopping(deps: Deps) -> dict[str, Any]:
    state = {"profile": PROFILE, "poll": {"interval_s": 15, "max_interval_s": 60, "backoff": 1.5}}
    step(deps, "prepare_stop", state, "config", execution=EXEC_STOP)
    return state


def test_stop_releases_everything_and_closes_the_session(deps: Deps, world: World, clock: FakeClock) -> None:
    started_state = ready_profile(deps, world, clock)
    instance = world.instances("g7e-2gpu")[0]["InstanceId"]
    world.autoscaling.set_instance_protection(
        AutoScalingGroupName=world.registry.pools["g7e-2gpu"].asg_name, InstanceIds=[instance], ProtectedFromScaleIn=True
    )
    clock.advance(3600)
    state = stopping(deps)
    assert state["config"]["already_stopped"] is False
    step(deps, "request_stop", state, "request", execution=EXEC_STOP)
    assert step(deps, "await_lock", state, "lock", execution=EXEC_STOP)["ready"] is True
    step(deps, "scale_in_service", state, "scale_in", execution=EXEC_STOP)
    assert world.service()["desiredCount"] == 0
    assert deps.store.get_profile(PROFILE).phase == Phase.STOPPING
    assert deps.store.get_profile(PROFILE).stop_requested_by is None

    def ecs_drains(_: int) -> None:
        world.crash_task(started_state["task"], "Scaling activity initiated by deployment")
        world.deregister_all()

    assert not step(deps, "check_drained", state, "drain", execution=EXEC_STOP)["ready"]
    ecs_drains(0)
    assert step(deps, "check_drained", state, "drain", execution=EXEC_STOP)["ready"]
    assert step(deps, "guard_pool", state, "pool", execution=EXEC_STOP) == {"others": [], "keep": False}
    world.calls.clear()
    released = step(deps, "release_capacity", state, "release", execution=EXEC_STOP)
    assert released == {"instances": [instance], "protection_cleared": [instance]}
    # Protection first: a protected instance would survive desired 0.
    assert world.calls.index("SetInstanceProtection") < world.calls.index("UpdateAutoScalingGroup")
    asg = world.asg()
    assert asg["DesiredCapacity"] == 0 and asg["MinSize"] == 0
    loop_until_ready(deps, clock, "check_terminated", state, "termination", execution=EXEC_STOP)
    assert world.asg()["Instances"] == []
    closed = step(deps, "close_session", state, "session", execution=EXEC_STOP)
    # moto lists no termination activity: the session ends when the stop first saw the instance gone.
    assert closed["session"]["stopped_at"] == state["termination"]["progress"]["marks"]["ready_at"]
    assert closed["phase"] == "STOPPED" and closed["session"]["uptime_s"] == pytest.approx(3600, abs=0.01)
    assert closed["session"]["stop_execution"] == EXEC_STOP
    assert step(deps, "release_lock", state, "unlock", execution=EXEC_STOP)["released"] == [f"profile:{PROFILE}", "pool:g7e-2gpu"]
    # Stopping a stopped profile answers at once.
    assert stopping(deps)["config"]["already_stopped"] is True


def test_stop_keeps_the_pool_for_another_active_profile(shared_deps: Deps, shared_world: World, clock: FakeClock) -> None:
    ready_profile(shared_deps, shared_world, clock)
    spec = shared_world.registry.profiles[OTHER]
    shared_world.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    shared_deps.store.set_phase(OTHER, Phase.STARTING, clock.now(), EXEC_OTHER)
    shared_deps.store.set_phase(OTHER, Phase.READY, clock.now(), EXEC_OTHER)
    state = stopping(shared_deps)
    step(shared_deps, "await_lock", state, "lock", execution=EXEC_STOP)
    step(shared_deps, "scale_in_service", state, "scale_in", execution=EXEC_STOP)
    pool = step(shared_deps, "guard_pool", state, "pool", execution=EXEC_STOP)
    assert pool["keep"] is True and pool["others"][0].startswith("nemotron-nano (READY")
    step(shared_deps, "close_session", state, "session", execution=EXEC_STOP)
    assert shared_world.asg()["DesiredCapacity"] == 1  # the ASL skips ReleaseCapacity when keep is true


def test_stop_waits_for_a_running_start_which_rolls_back(deps: Deps, world: World, clock: FakeClock) -> None:
    start = started(deps)
    state = stopping(deps)
    step(deps, "request_stop", state, "request", execution=EXEC_STOP)
    waiting = step(deps, "await_lock", state, "lock", execution=EXEC_STOP)
    assert not waiting["ready"] and f"held by {EXEC_START}" in waiting["detail"]
    # The start's next check sees the flag, and its Catch rolls back and frees the locks.
    with pytest.raises(StopRequested) as err:
        step(deps, "check_capacity", start, "capacity")
    start["error"] = {"Error": "StopRequested", "Cause": json.dumps({"errorMessage": str(err.value)})}
    step(deps, "roll_back", start, "rollback")
    assert deps.store.get_profile(PROFILE).last_error.startswith("StopRequested: stop of deepseek-v4-flash requested")
    clock.advance(waiting["wait_s"])
    assert step(deps, "await_lock", state, "lock", execution=EXEC_STOP)["ready"] is True


def test_lock_wait_has_a_deadline(deps: Deps, clock: FakeClock) -> None:
    started(deps)
    state = {"profile": PROFILE, "deadlines": {"lock_s": 30}}
    step(deps, "prepare_stop", state, "config", execution=EXEC_STOP)
    with pytest.raises(DeadlineExceeded, match="locks not reached within 30 s: waiting"):
        for _ in range(5):
            clock.advance(step(deps, "await_lock", state, "lock", execution=EXEC_STOP)["wait_s"])


def test_force_release_scales_to_zero_even_without_the_lock(deps: Deps, world: World, clock: FakeClock) -> None:
    ready_profile(deps, world, clock)
    instance = world.instances("g7e-2gpu")[0]["InstanceId"]
    clock.advance(1800)
    state = stopping(deps)
    state["error"] = {"Error": "DeadlineExceeded", "Cause": json.dumps({"errorMessage": "drain took too long"})}
    # The group terminates the instance right away; AWS lists when it finished.
    world.record_termination(instance, clock.now() - timedelta(seconds=5), clock.now() - timedelta(seconds=2))
    opened = deps.store.get_profile(PROFILE).session_id
    result = step(deps, "force_release", state, "rollback", execution=EXEC_STOP)
    assert result["acted"] is True
    assert world.service()["desiredCount"] == 0 and world.asg()["DesiredCapacity"] == 0
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.phase == Phase.FAILED and recorded.last_error == "stop failed: DeadlineExceeded: drain took too long"
    # The ledger closes at the instance's real termination time, not at the force release.
    session = deps.store.get_session(PROFILE, opened)
    assert session.stopped_at == clock.now() - timedelta(seconds=2) and session.close_reason == "stop failed"
    assert recorded.session_id is None


def test_prepare_stop_failures_go_through_force_release(deps: Deps, world: World, clock: FakeClock) -> None:
    ready_profile(deps, world, clock)
    # PrepareStop failed (its Catch keeps the input and the error): the profile comes from the input.
    state = {"profile": PROFILE, "error": {"Error": "Throttled", "Cause": json.dumps({"errorMessage": "ECS: Throttling"})}}
    assert step(deps, "force_release", state, "rollback", execution=EXEC_STOP)["acted"] is True
    assert world.service()["desiredCount"] == 0 and world.asg()["DesiredCapacity"] == 0
    assert deps.store.get_profile(PROFILE).last_error == "stop failed: Throttled: ECS: Throttling"
    unknown = {"profile": "llama", "error": {"Error": "ProfileNotFound", "Cause": "unknown profile 'llama'"}}
    assert step(deps, "force_release", unknown, "rollback", execution=EXEC_STOP) == {
        "acted": False,
        "detail": "nothing was stopped: ProfileNotFound: unknown profile 'llama'",
    }


def test_hours_between_a_failed_stop_and_the_next_stop_are_billed_once(deps: Deps, world: World, clock: FakeClock) -> None:
    task = ready_profile(deps, world, clock)["task"]
    instance = world.instances("g7e-2gpu")[0]["InstanceId"]
    began = deps.store.get_session(PROFILE, deps.store.get_profile(PROFILE).session_id).started_at
    clock.advance(3600)
    state = stopping(deps)
    step(deps, "request_stop", state, "request", execution=EXEC_STOP)
    step(deps, "await_lock", state, "lock", execution=EXEC_STOP)
    step(deps, "scale_in_service", state, "scale_in", execution=EXEC_STOP)

    def denied(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "UpdateAutoScalingGroup")

    # The pool cannot be released: the stop and its force release fail, the GPU keeps running.
    world.autoscaling.meta.events.register("before-call.auto-scaling.UpdateAutoScalingGroup", denied)
    with pytest.raises(ClientError):
        step(deps, "release_capacity", state, "release", execution=EXEC_STOP)
    with pytest.raises(ClientError):
        step(deps, "force_release", state | {"error": {"Error": "ClientError"}}, "rollback", execution=EXEC_STOP)
    deps.stepfunctions.stop_execution(executionArn=EXEC_STOP, cause="failed")
    world.autoscaling.meta.events.unregister("before-call.auto-scaling.UpdateAutoScalingGroup", denied)
    # The next stop (the reconciler's) takes the dead stop's lock at once, though its lease is live.
    clock.advance(60)
    again = stopping(deps)
    step(deps, "request_stop", again, "request", execution=EXEC_STOP_2)
    assert step(deps, "await_lock", again, "lock", execution=EXEC_STOP_2)["progress"]["marks"]["taken_over_from"] == [EXEC_STOP]
    clock.advance(3 * 3600)  # and it took three hours to get there
    step(deps, "scale_in_service", again, "scale_in", execution=EXEC_STOP_2)
    world.crash_task(task, "Scaling activity initiated by deployment")
    world.deregister_all()
    loop_until_ready(deps, clock, "check_drained", again, "drain", execution=EXEC_STOP_2)
    step(deps, "guard_pool", again, "pool", execution=EXEC_STOP_2)
    step(deps, "release_capacity", again, "release", execution=EXEC_STOP_2)
    ended = clock.now() + timedelta(seconds=75)
    world.record_termination(instance, clock.now(), ended)
    loop_until_ready(deps, clock, "check_terminated", again, "termination", execution=EXEC_STOP_2)
    step(deps, "close_session", again, "session", execution=EXEC_STOP_2)
    sessions = deps.store.list_sessions(PROFILE)
    assert len(sessions) == 1 and sessions[0].stopped_at == ended
    assert sessions[0].uptime_s == pytest.approx((ended - began).total_seconds())
    assert sessions[0].uptime_s > 4 * 3600
