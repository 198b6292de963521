"""stop_profile steps against a moto world: drain, pool guard, protection, termination, ledger, failure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servingctl.control.deps import Deps
from servingctl.shared.errors import DeadlineExceeded, StopRequested
from servingctl.store import Phase

from .conftest import EXEC_OTHER, EXEC_START, EXEC_STOP, OTHER, PROFILE, FakeClock, World
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
    loop_until_ready(deps, clock, "check_terminated", state, "termination")
    assert world.asg()["Instances"] == []
    closed = step(deps, "close_session", state, "session", execution=EXEC_STOP)
    assert closed["phase"] == "STOPPED" and closed["session"]["uptime_s"] >= 3600
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
    state = stopping(deps)
    state["error"] = {"Error": "DeadlineExceeded", "Cause": json.dumps({"errorMessage": "drain took too long"})}
    result = step(deps, "force_release", state, "rollback", execution=EXEC_STOP)
    assert result["acted"] is True
    assert world.service()["desiredCount"] == 0 and world.asg()["DesiredCapacity"] == 0
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.phase == Phase.FAILED and recorded.last_error == "stop failed: DeadlineExceeded: drain took too long"
    # The instance may still run: the ledger session stays open for the next stop to close.
    assert deps.store.get_session(PROFILE, recorded.session_id).open
