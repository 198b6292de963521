"""start_profile steps against a moto world: guard, scale out, wait loops, failures, roll-back."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servingctl.control.deps import Deps
from servingctl.control.steps import run_step
from servingctl.registry import parse_registry
from servingctl.shared.errors import (
    CapacityUnavailable,
    DeadlineExceeded,
    InvalidInput,
    LockHeld,
    PoolBusy,
    ProfileNotFound,
    StopRequested,
    TaskFailed,
    Throttled,
)
from servingctl.store import LockLost, Phase

from .conftest import EXEC_OTHER, EXEC_START, EXEC_STOP, OTHER, PROFILE, FakeClock, World, start_input

INSUFFICIENT = (
    "We currently do not have sufficient g7e.12xlarge capacity in the Availability Zone you requested "
    "(us-east-1a). Our system will be working on provisioning additional capacity."
)


def step(deps: Deps, action: str, state: dict[str, Any], key: str | None, execution: str = EXEC_START) -> dict[str, Any]:
    """Run one step like the state machine: JSON in, JSON out, result under state[key]."""
    result = run_step(json.loads(json.dumps({"action": action, "state": state, "execution": execution})), deps)
    json.dumps(result)  # Step Functions needs JSON-safe output
    if key:
        state[key] = result
    return result


def started(deps: Deps, **extra: Any) -> dict[str, Any]:
    """State after prepare, lock, current, guard and scale-out."""
    state = start_input(**extra)
    step(deps, "prepare_start", state, "config")
    step(deps, "acquire_lock", state, "lock")
    assert step(deps, "check_current", state, "current")["ready"] is False
    step(deps, "guard_pool", state, "pool")
    step(deps, "scale_out", state, "scale")
    return state


def loop_until_ready(
    deps: Deps, clock: FakeClock, action: str, state: dict[str, Any], key: str, move: Any = None, execution: str = EXEC_START
) -> list[int]:
    """Run a wait loop as the ASL does (Check -> Choice -> Wait), letting the world move between rounds."""
    waits = []
    for _ in range(100):
        result = step(deps, action, state, key, execution=execution)
        if result["ready"]:
            return waits
        waits.append(result["wait_s"])
        clock.advance(result["wait_s"])
        if move:
            move(len(waits))
    raise AssertionError("loop never ended")


def test_prepare_merges_registry_defaults_and_names_bad_fields(deps: Deps) -> None:
    config = step(deps, "prepare_start", {"profile": PROFILE}, None)
    assert config["settings"]["deadlines"] == {
        "capacity_s": 900,
        "task_s": 2400,
        "health_s": 2400,
        "derived": [],
    }  # no past start: the registry's
    assert config["settings"]["poll"] == {"interval_s": 15, "max_interval_s": 60, "backoff": 1.5}
    assert config["smoke"]["header_value"] == PROFILE and config["pool"] == "g7e-2gpu"
    with pytest.raises(InvalidInput, match=r"poll\.interval_s: Input should be greater than or equal to 1"):
        step(deps, "prepare_start", {"profile": PROFILE, "poll": {"interval_s": 0}}, None)
    with pytest.raises(InvalidInput, match="deadline: unknown field; allowed fields: allow_shared_pool, deadlines"):
        step(deps, "prepare_start", {"profile": PROFILE, "deadline": {}}, None)
    with pytest.raises(InvalidInput, match="lease_minutes: must be between 5 and 720"):
        step(deps, "prepare_start", {"profile": PROFILE, "lease_minutes": 10000}, None)
    with pytest.raises(ProfileNotFound, match="known profiles: deepseek-v4-flash, nemotron-nano"):
        step(deps, "prepare_start", {"profile": "llama"}, None)
    with pytest.raises(InvalidInput, match="action: unknown 'launch'; allowed: prepare_start"):
        step(deps, "launch", {}, None)


def test_lock_refuses_a_second_execution_and_reacquire_is_idempotent(deps: Deps) -> None:
    state = start_input()
    step(deps, "prepare_start", state, "config")
    step(deps, "acquire_lock", state, "lock")
    assert step(deps, "acquire_lock", state, "lock")["owner"] == EXEC_START  # a Step Functions retry
    with pytest.raises(LockHeld, match=f"profile:{PROFILE} is held by {EXEC_START}"):
        step(deps, "acquire_lock", state, None, execution=EXEC_OTHER)


def test_pool_guard_refuses_another_active_profile_unless_shared(shared_deps: Deps, shared_world: World) -> None:
    other = {"profile": OTHER}
    step(shared_deps, "prepare_start", other, "config")
    shared_deps.store.set_phase(OTHER, Phase.STARTING, shared_deps.clock.now(), EXEC_OTHER)
    shared_deps.store.set_phase(OTHER, Phase.READY, shared_deps.clock.now(), EXEC_OTHER)
    state = start_input()
    step(shared_deps, "prepare_start", state, "config")
    with pytest.raises(PoolBusy, match=r"pool g7e-2gpu is in use by nemotron-nano \(READY.*allow_shared_pool=true"):
        step(shared_deps, "guard_pool", state, "pool")
    shared = start_input(allow_shared_pool=True)
    step(shared_deps, "prepare_start", shared, "config")
    assert step(shared_deps, "guard_pool", shared, "pool")["keep"] is True


def test_pool_guard_sees_a_running_service_the_store_does_not_know(shared_deps: Deps, shared_world: World) -> None:
    spec = shared_world.registry.profiles[OTHER]
    shared_world.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    state = start_input()
    step(shared_deps, "prepare_start", state, "config")
    with pytest.raises(PoolBusy, match="nemotron-nano \\(STOPPED, desired 1"):
        step(shared_deps, "guard_pool", state, "pool")


def test_scale_out_sets_service_and_asg_only_when_at_zero(deps: Deps, world: World) -> None:
    state = started(deps)
    assert state["scale"]["asg_scaled"] is True
    assert world.service()["desiredCount"] == 1 and world.asg()["DesiredCapacity"] == 1
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.phase == Phase.STARTING and recorded.execution == EXEC_START
    session = deps.store.get_session(PROFILE, recorded.session_id)
    assert session.open and session.instance_type == "g7e.12xlarge"
    # A retry (or a pool already at 1) leaves the ASG alone and keeps the same ledger session.
    again = step(deps, "scale_out", state, "scale")
    assert again["asg_scaled"] is False and again["session_id"] == recorded.session_id
    assert len(deps.store.list_sessions(PROFILE)) == 1
    assert world.calls.count("SetDesiredCapacity") == 1


def test_the_capacity_wait_reads_the_warm_pools_lifecycle_states(deps: Deps, world: World) -> None:
    from botocore.awsrequest import AWSResponse

    warm = [
        {"InstanceId": "i-0pending", "LifecycleState": "Warmed:Pending"},
        {"InstanceId": "i-0stopped", "LifecycleState": "Warmed:Stopped"},
    ]
    world.autoscaling.meta.events.register(
        "before-call.auto-scaling.DescribeWarmPool",
        lambda **_: (AWSResponse("https://autoscaling", 200, {}, None), {"Instances": warm}),
    )
    state = started(deps)
    # Only a stopped (takeable) instance counts as the warm start's; one still initialising does not.
    assert state["scale"]["baseline"]["warm_instances"] == ["i-0stopped"]
    # moto launches at once; AWS has nothing in the group yet: the wait says what the warm pool holds.
    world.autoscaling.set_desired_capacity(AutoScalingGroupName=world.registry.pools["g7e-2gpu"].asg_name, DesiredCapacity=0)
    answer = step(deps, "check_capacity", state, "capacity")
    assert answer["ready"] is False
    assert answer["detail"].endswith("; warm pool: i-0pending Warmed:Pending, i-0stopped Warmed:Stopped")


@pytest.mark.parametrize(("price_key", "recorded"), [("g7e.48xlarge", "g7e.48xlarge"), (None, "g7e.12xlarge")])
def test_the_session_is_priced_by_the_pools_price_key_when_it_has_one(deps: Deps, price_key: str | None, recorded: str) -> None:
    document = deps.registry.model_dump(mode="json")
    document["pools"][deps.registry.profiles[PROFILE].pool]["price_key"] = price_key
    deps.registry = parse_registry(document)
    started(deps)
    [session] = deps.store.list_sessions(PROFILE)
    assert (session.instance_type, session.price_key) == ("g7e.12xlarge", recorded)


def test_start_reaches_ready_with_phase_times_and_lease(deps: Deps, world: World, clock: FakeClock) -> None:
    state = started(deps)
    cap_waits = loop_until_ready(
        deps, clock, "check_capacity", state, "capacity", lambda n: n == 3 and world.register_instances()
    )
    assert cap_waits == [15, 22, 34]  # 15 * 1.5^n, rounded
    tasks: list[dict[str, Any]] = []
    loop_until_ready(deps, clock, "check_task", state, "task", lambda n: tasks.append(world.place_task()))
    loop_until_ready(deps, clock, "check_targets", state, "targets", lambda n: n == 2 and world.register_target(tasks[0]))
    clock.advance(2)
    record = step(deps, "record_ready", state, "record")
    seconds = record["phase_seconds"]
    assert seconds["capacity"] == 0 and seconds["boot"] == 71 and seconds["task"] == 15
    assert seconds["health"] == 37 and seconds["smoke"] == 2 and seconds["total"] == 125
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.phase == Phase.READY and recorded.phase_seconds == seconds
    assert (recorded.lease_deadline - recorded.ready_at).total_seconds() == 120 * 60
    assert step(deps, "release_lock", state, "unlock")["released"] == [f"profile:{PROFILE}", "pool:g7e-2gpu"]
    # A second start answers at once.
    again = start_input()
    step(deps, "prepare_start", again, "config")
    step(deps, "acquire_lock", again, "lock", execution=EXEC_OTHER)
    assert step(deps, "check_current", again, "current", execution=EXEC_OTHER) == {"phase": "READY", "ready": True}


def test_failed_launch_fails_fast_with_aws_message(deps: Deps, world: World) -> None:
    state = started(deps)
    world.fail_launches(INSUFFICIENT)
    with pytest.raises(
        CapacityUnavailable,
        match=r"could not launch g7e.12xlarge: insufficient-capacity \(InsufficientInstanceCapacity\): "
        "We currently do not have sufficient",
    ):
        step(deps, "check_capacity", state, "capacity")


def test_a_retry_right_after_a_failed_launch_is_not_failed_by_the_old_activity(deps: Deps, world: World) -> None:
    first = started(deps)
    world.fail_launches(INSUFFICIENT)
    with pytest.raises(CapacityUnavailable):
        step(deps, "check_capacity", first, "capacity")
    step(deps, "roll_back", first | {"error": {"Error": "CapacityUnavailable", "Cause": "{}"}}, None)
    retry = started(deps)  # the same second on the clock: only activity ids tell the two starts apart
    assert step(deps, "check_capacity", retry, "capacity")["ready"] is False


def _no_capacity(itype: str) -> str:
    return (
        "Could not launch On-Demand Instances. InsufficientInstanceCapacity - "
        f"We currently do not have sufficient {itype} capacity"
    )


def test_capacity_falls_back_to_each_alternate_in_order_and_records_why(deps: Deps, world: World) -> None:
    state = started(deps, profile=OTHER)
    pool = world.registry.pools["g7e-1gpu"]

    def template() -> str:
        return world.asg("g7e-1gpu")["LaunchTemplate"]["LaunchTemplateId"]

    assert template() == pool.launch_template_id
    world.fail_launches(_no_capacity("g7e.2xlarge"), pool="g7e-1gpu")
    answer = step(deps, "check_capacity", state, "capacity")
    assert answer["ready"] is False and "moved to g7e.4xlarge (option 2 of 3)" in answer["detail"]
    assert template() == pool.alternates[0].launch_template_id
    recorded = deps.store.get_profile(OTHER)
    assert recorded.instance_type == "g7e.4xlarge"
    assert (
        recorded.capacity_note
        == "g7e.2xlarge: insufficient-capacity (InsufficientInstanceCapacity); moved to g7e.4xlarge (option 2 of 3)"
    )
    session = deps.store.get_session(OTHER, recorded.session_id or "")
    assert session is not None and (session.instance_type, session.price_key) == ("g7e.4xlarge", "g7e.4xlarge")
    # The same activity does not move it twice; the next type's failure moves to the third.
    assert step(deps, "check_capacity", state, "capacity")["ready"] is False
    assert template() == pool.alternates[0].launch_template_id
    world.fail_launches(_no_capacity("g7e.4xlarge"), pool="g7e-1gpu")
    assert "moved to g7e.8xlarge (option 3 of 3)" in step(deps, "check_capacity", state, "capacity")["detail"]
    assert template() == pool.alternates[1].launch_template_id
    # The instance of the third type comes up: READY records the type and the fallbacks (the event's detail).
    world.autoscaling.set_desired_capacity(AutoScalingGroupName=pool.asg_name, DesiredCapacity=1)
    world.register_instances(OTHER)
    assert step(deps, "check_capacity", state, "capacity")["ready"] is True
    state["task"] = state["targets"] = state["capacity"]  # the task and its target ready at once
    ready = step(deps, "record_ready", state, "record")
    assert ready["instance_type"] == "g7e.8xlarge" and ready["warm_start"] is False
    assert [(f["instance_type"], f["class"], f["code"]) for f in ready["capacity_fallbacks"]] == [
        ("g7e.2xlarge", "insufficient-capacity", "InsufficientInstanceCapacity"),
        ("g7e.4xlarge", "insufficient-capacity", "InsufficientInstanceCapacity"),
    ]
    assert deps.store.get_profile(OTHER).instance_type == "g7e.8xlarge"


def test_the_refused_types_retries_listed_before_the_switch_are_not_blamed_on_the_next_type(deps: Deps, world: World) -> None:
    state = started(deps, profile=OTHER)
    # AWS retried g7e.2xlarge twice before the poll saw the first failure.
    world.fail_launches(_no_capacity("g7e.2xlarge"), pool="g7e-1gpu")
    world.fail_launches(_no_capacity("g7e.2xlarge"), pool="g7e-1gpu")
    assert "moved to g7e.4xlarge (option 2 of 3)" in step(deps, "check_capacity", state, "capacity")["detail"]
    again = step(deps, "check_capacity", state, "capacity")
    assert again["ready"] is False and "moved to" not in again["detail"]
    assert (
        world.asg("g7e-1gpu")["LaunchTemplate"]["LaunchTemplateId"]
        == world.registry.pools["g7e-1gpu"].alternates[0].launch_template_id
    )
    assert [f["instance_type"] for f in again["progress"]["marks"]["fallbacks"]] == ["g7e.2xlarge"]


def test_every_option_without_capacity_fails_with_capacity_unavailable_naming_them_and_rolls_back(
    deps: Deps, world: World
) -> None:
    state = started(deps, profile=OTHER)
    for n, itype in enumerate(("g7e.2xlarge", "g7e.4xlarge")):
        world.fail_launches(_no_capacity(itype), pool="g7e-1gpu")
        assert f"option {n + 2} of 3" in step(deps, "check_capacity", state, "capacity")["detail"]
    world.fail_launches(_no_capacity("g7e.8xlarge"), pool="g7e-1gpu")
    with pytest.raises(
        CapacityUnavailable, match=r"could not launch g7e.8xlarge: .*alternates tried before: g7e.2xlarge: .*; g7e.4xlarge: "
    ):
        step(deps, "check_capacity", state, "capacity")
    step(deps, "roll_back", state | {"error": {"Error": "CapacityUnavailable", "Cause": "{}"}}, None)
    assert world.asg("g7e-1gpu")["DesiredCapacity"] == 0 and world.service(OTHER)["desiredCount"] == 0
    assert deps.store.get_profile(OTHER).phase == Phase.FAILED
    # The next start goes back to the primary type's template.
    started(deps, profile=OTHER)
    assert world.asg("g7e-1gpu")["LaunchTemplate"]["LaunchTemplateId"] == world.registry.pools["g7e-1gpu"].launch_template_id


def test_a_launch_configuration_failure_does_not_fall_back(deps: Deps, world: World) -> None:
    state = started(deps, profile=OTHER)
    world.fail_launches("The requested configuration is currently not supported. Launching EC2 instance failed.", pool="g7e-1gpu")
    with pytest.raises(CapacityUnavailable, match=r"could not launch g7e.2xlarge: launch-config: The requested configuration"):
        step(deps, "check_capacity", state, "capacity")
    assert world.asg("g7e-1gpu")["LaunchTemplate"]["LaunchTemplateId"] == world.registry.pools["g7e-1gpu"].launch_template_id


def test_a_type_not_offered_in_the_zone_moves_to_the_next_alternate(deps: Deps, world: World) -> None:
    state = started(deps, profile=OTHER)
    world.fail_launches(
        "Could not launch On-Demand Instances. Unsupported - Your requested instance type (g7e.2xlarge) is not "
        "supported in your requested Availability Zone (us-east-1a). Please retry your request by not specifying "
        "an Availability Zone or choosing us-east-1b. Launching EC2 instance failed.",
        pool="g7e-1gpu",
    )
    answer = step(deps, "check_capacity", state, "capacity")
    assert "g7e.2xlarge: unsupported (Unsupported); moved to g7e.4xlarge (option 2 of 3)" in answer["detail"]
    assert (
        world.asg("g7e-1gpu")["LaunchTemplate"]["LaunchTemplateId"]
        == world.registry.pools["g7e-1gpu"].alternates[0].launch_template_id
    )


def test_a_spent_vcpu_quota_names_it_and_passes_over_the_alternates_of_its_bucket(deps: Deps, world: World) -> None:
    state = started(deps, profile=OTHER)
    world.fail_launches(
        "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU capacity than "
        "your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. "
        "Launching EC2 instance failed.",
        pool="g7e-1gpu",
    )
    with pytest.raises(
        CapacityUnavailable,
        match=(
            r'could not launch g7e.2xlarge: quota: VcpuLimitExceeded, Service Quotas L-DB2E81BA "Running On-Demand G and VT '
            r'instances", limit 0 vCPUs: .*; not tried: g7e.4xlarge, g7e.8xlarge \(the same quota\)$'
        ),
    ):
        step(deps, "check_capacity", state, "capacity")
    # Nothing was switched: the group stays on the primary type's template for the roll-back.
    assert world.asg("g7e-1gpu")["LaunchTemplate"]["LaunchTemplateId"] == world.registry.pools["g7e-1gpu"].launch_template_id


def test_tasks_stopped_before_the_start_are_not_counted(deps: Deps, world: World) -> None:
    earlier = started(deps)
    world.register_instances()
    for n in range(3):
        world.crash_task(world.place_task(), f"an earlier start's crash ({n})")
    step(deps, "roll_back", earlier | {"error": {"Error": "TaskFailed", "Cause": "{}"}}, None)
    state = started(deps)
    world.register_instances()
    step(deps, "check_capacity", state, "capacity")
    assert "stopped since start: 0" in step(deps, "check_task", state, "task")["detail"]


def test_stopping_tasks_are_counted_until_task_failed(deps: Deps, world: World, clock: FakeClock) -> None:
    state = started(deps)
    world.register_instances()
    step(deps, "check_capacity", state, "capacity")
    for n in range(2):
        world.crash_task(world.place_task(), f"Essential container in task exited (crash {n})")
    assert "stopped since start: 2" in step(deps, "check_task", state, "task")["detail"]
    world.crash_task(world.place_task(), "Essential container in task exited (crash 2)")
    with pytest.raises(
        TaskFailed,
        match=r"3 task\(s\) .* stopped since the start \(limit 3\); last: Essential container in task exited \(crash 2\)",
    ):
        step(deps, "check_task", state, "task")


def test_a_task_crashing_during_health_checks_counts_too(deps: Deps, world: World) -> None:
    state = started(deps)
    world.register_instances()
    step(deps, "check_capacity", state, "capacity")
    for n in range(3):
        world.crash_task(world.place_task(), f"OutOfMemoryError: container killed ({n})")
    with pytest.raises(TaskFailed, match="OutOfMemoryError"):
        step(deps, "check_targets", state, "targets")


def test_deadline_exceeded_names_what_was_missing(deps: Deps, clock: FakeClock) -> None:
    state = started(deps, deadlines={"capacity_s": 100})
    waits = []
    with pytest.raises(
        DeadlineExceeded, match=r"capacity .* not reached within 100 s: 1 instance\(s\) InService .* 0 of 1 registered"
    ):
        for _ in range(10):
            waits.append(step(deps, "check_capacity", state, "capacity")["wait_s"])
            clock.advance(waits[-1])
    assert waits == [15, 22, 34, 29]  # the last wait is clipped to the deadline


def test_target_health_is_watched_inside_the_invocation(deps: Deps, world: World, clock: FakeClock) -> None:
    deps.watch_budget_s = 120
    state = started(deps)
    world.register_instances()
    step(deps, "check_capacity", state, "capacity")
    task = world.place_task()
    step(deps, "check_task", state, "task")
    for _ in range(3):  # health takes a while: each invocation watches its whole wait, so wait_s is 0
        result = step(deps, "check_targets", state, "targets")
        assert not result["ready"] and result["wait_s"] == 0
    assert clock.slept == [15, 15, 7, 15, 15, 4]  # capacity 15; then waits 15, 22, 34 probed every <= 15 s
    clock.on_sleep = lambda s: world.register_target(task)
    result = step(deps, "check_targets", state, "targets")
    assert result["ready"] and result["wait_s"] == 0
    assert len(clock.slept) == 7  # healthy seen at the next poll: within one interval
    deps.watch_budget_s = 0  # no time left in the invocation: the ASL's Wait does the waiting
    world.deregister_all()
    state.pop("targets")
    assert step(deps, "check_targets", state, "targets")["wait_s"] == 15


def test_stop_request_ends_the_start_checks(deps: Deps) -> None:
    state = started(deps)
    stop = {"profile": PROFILE}
    step(deps, "prepare_stop", stop, "config", execution=EXEC_STOP)
    step(deps, "request_stop", stop, "request", execution=EXEC_STOP)
    with pytest.raises(StopRequested, match=f"requested by {EXEC_STOP}"):
        step(deps, "check_capacity", state, "capacity")


def test_throttling_becomes_throttled(deps: Deps, world: World) -> None:
    state = start_input()
    step(deps, "prepare_start", state, "config")
    step(deps, "acquire_lock", state, "lock")

    def throttle(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DescribeServices")

    world.ecs.meta.events.register("before-call.ecs.DescribeServices", throttle)
    with pytest.raises(Throttled, match="DescribeServices: ThrottlingException: Rate exceeded"):
        step(deps, "check_current", state, "current")


def _fail(state: dict[str, Any], error: str, message: str) -> None:
    state["error"] = {"Error": error, "Cause": json.dumps({"errorMessage": message, "errorType": error})}


def test_roll_back_scales_everything_to_zero_and_records_failed(deps: Deps, world: World) -> None:
    state = started(deps)
    world.register_instances()
    _fail(state, "CapacityUnavailable", "no capacity")
    result = step(deps, "roll_back", state, "rollback")
    assert result["acted"] is True
    assert world.service()["desiredCount"] == 0
    asg = world.asg()
    assert asg["DesiredCapacity"] == 0 and asg["MinSize"] == 0
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.phase == Phase.FAILED and recorded.last_error == "CapacityUnavailable: no capacity"
    assert all(not s.open for s in deps.store.list_sessions(PROFILE))
    assert deps.store.get_lock(f"profile:{PROFILE}") is None and deps.store.get_lock("pool:g7e-2gpu") is None
    assert step(deps, "roll_back", state, "rollback")["acted"] is True  # a retried roll-back is harmless


def test_roll_back_keeps_the_pool_for_another_active_profile(shared_deps: Deps, shared_world: World) -> None:
    shared_deps.store.set_phase(OTHER, Phase.STARTING, shared_deps.clock.now(), EXEC_OTHER)
    shared_deps.store.set_phase(OTHER, Phase.READY, shared_deps.clock.now(), EXEC_OTHER)
    state = started(shared_deps, allow_shared_pool=True)
    _fail(state, "TaskFailed", "crashed")
    result = step(shared_deps, "roll_back", state, "rollback")
    assert "pool g7e-2gpu kept for nemotron-nano" in result["detail"]
    assert shared_world.service()["desiredCount"] == 0 and shared_world.asg()["DesiredCapacity"] == 1


def test_roll_back_of_a_refused_start_leaves_the_holder_alone(deps: Deps, world: World) -> None:
    state = started(deps)
    refused = start_input()
    step(deps, "prepare_start", refused, "config", execution=EXEC_OTHER)
    with pytest.raises(LockHeld):
        step(deps, "acquire_lock", refused, "lock", execution=EXEC_OTHER)
    _fail(refused, "LockHeld", "held")
    assert step(deps, "roll_back", refused, "rollback", execution=EXEC_OTHER)["acted"] is False
    assert world.service()["desiredCount"] == 1 and deps.store.get_profile(PROFILE).phase == Phase.STARTING
    assert deps.store.get_lock(f"profile:{PROFILE}").owner == EXEC_START
    assert state["scale"]["asg_scaled"]


def test_roll_back_without_config_does_nothing(deps: Deps) -> None:
    assert step(deps, "roll_back", {"profile": PROFILE}, None)["acted"] is False


def test_a_start_whose_owner_is_aborted_takes_the_lock_at_once(deps: Deps, clock: FakeClock) -> None:
    state = started(deps)
    # Aborted from the console right after ScaleOut: the lock's lease is still live.
    deps.stepfunctions.stop_execution(executionArn=EXEC_START, cause="aborted from the console")
    clock.advance(1)
    assert deps.store.get_lock(f"profile:{PROFILE}").live(clock.now())
    takeover = start_input()
    step(deps, "prepare_start", takeover, "config", execution=EXEC_OTHER)
    lock = step(deps, "acquire_lock", takeover, "lock", execution=EXEC_OTHER)
    assert lock["taken_over_from"] == [EXEC_START]
    assert deps.store.get_lock(f"pool:{world_pool(deps)}").owner == EXEC_OTHER
    step(deps, "scale_out", takeover, "scale", execution=EXEC_OTHER)
    recorded = deps.store.get_profile(PROFILE)
    # The instance the dead start launched still runs: its session goes on, billed once.
    assert recorded.execution == EXEC_OTHER and recorded.session_id == state["scale"]["session_id"]


def test_a_running_owner_keeps_its_lock_and_renews_it_at_every_probe(deps: Deps, clock: FakeClock) -> None:
    state = started(deps, deadlines={"capacity_s": 7200})
    lease = state["config"]["settings"]["lock_lease_s"]
    # A short lease: a few of the slowest polls plus one step, not the sum of the deadlines.
    assert lease == 3 * 60 + 300
    for _ in range(5):  # far longer than one lease, probing as the ASL does
        clock.advance(lease - 1)
        assert step(deps, "check_capacity", state, "capacity")["ready"] is False
    assert deps.store.get_lock(f"profile:{PROFILE}").expires_at == clock.now() + timedelta(seconds=lease)
    refused = start_input()
    step(deps, "prepare_start", refused, "config", execution=EXEC_OTHER)
    with pytest.raises(LockHeld, match=f"held by {EXEC_START}"):
        step(deps, "acquire_lock", refused, "lock", execution=EXEC_OTHER)


def test_an_owner_whose_lock_was_taken_over_stops_at_its_next_probe(deps: Deps, clock: FakeClock) -> None:
    state = started(deps)
    clock.advance(state["config"]["settings"]["lock_lease_s"])  # stuck past its lease: the lock lapsed
    takeover = start_input()
    step(deps, "prepare_start", takeover, "config", execution=EXEC_OTHER)
    step(deps, "acquire_lock", takeover, "lock", execution=EXEC_OTHER)
    with pytest.raises(LockLost, match=f"lost its lock, held by {EXEC_OTHER}"):
        step(deps, "check_capacity", state, "capacity")
    _fail(state, "LockLost", "lost")
    # Its roll back undoes nothing of the new owner's.
    assert step(deps, "roll_back", state, "rollback")["acted"] is False
    assert deps.store.get_lock(f"profile:{PROFILE}").owner == EXEC_OTHER


def world_pool(deps: Deps) -> str:
    return deps.registry.profiles[PROFILE].pool


def test_expired_lock_of_a_dead_start_is_taken_over(deps: Deps, clock: FakeClock) -> None:
    state = started(deps, deadlines={"capacity_s": 60, "task_s": 60, "health_s": 60})
    clock.advance(state["config"]["settings"]["lock_lease_s"])
    takeover = start_input()
    step(deps, "prepare_start", takeover, "config", execution=EXEC_OTHER)
    step(deps, "acquire_lock", takeover, "lock", execution=EXEC_OTHER)
    step(deps, "scale_out", takeover, "scale", execution=EXEC_OTHER)
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.execution == EXEC_OTHER and recorded.session_id == state["scale"]["session_id"]


def test_roll_back_of_a_start_that_died_before_opening_its_session(deps: Deps, clock: FakeClock) -> None:
    state = start_input()
    step(deps, "prepare_start", state, "config")
    step(deps, "acquire_lock", state, "lock")
    # ScaleOut recorded STARTING with the session id, then died before open_session.
    deps.store.set_phase(PROFILE, Phase.STARTING, clock.now(), EXEC_START, session_id=f"{clock.now().isoformat()}#start-1")
    _fail(state, "Lambda.Unknown", "the Lambda died")
    result = step(deps, "roll_back", state, "rollback")
    assert result["acted"] is True and "released profile:deepseek-v4-flash, pool:g7e-2gpu" in result["detail"]
    recorded = deps.store.get_profile(PROFILE)
    assert recorded.phase == Phase.FAILED and recorded.session_id is None
    assert deps.store.get_lock(f"profile:{PROFILE}") is None and deps.store.list_sessions(PROFILE) == []


@pytest.mark.parametrize(("capacity_s", "accepted"), [(7200, True), (7201, False)])
def test_the_flow_refuses_deadlines_past_the_registry_limit(deps: Deps, capacity_s: int, accepted: bool) -> None:
    state = start_input(deadlines={"capacity_s": capacity_s})
    if accepted:
        assert step(deps, "prepare_start", state, "config")["settings"]["deadlines"]["capacity_s"] == 7200
        return
    with pytest.raises(
        InvalidInput,
        match=(
            r"deadlines.capacity_s: must be between 1 and 7200 seconds "
            r"\(the limits.max_start_deadline_s of deepseek-v4-flash\); got 7201"
        ),
    ):
        step(deps, "prepare_start", state, "config")
