"""The reconciler's decisions over the in-memory store and moto (ECS, Auto Scaling, Step Functions):
each rule on the state a dead flow leaves, the state a live one leaves alone, idempotent stop names,
a closed name never reused, the reason recorded, one profile's failure isolated."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import boto3
import pytest

from servingctl.control.deps import Deps
from servingctl.control.executions import attempt_names
from servingctl.control.reconcile import Evidence, ReconcileDeps, decide, on_status_change, reconcile
from servingctl.store import MemoryStore
from servingctl.store.models import Phase, ProfileState, Session

from .conftest import OTHER, PROFILE, REGION, FakeClock, World

WAIT = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 100000, "End": True}}})
ROLE = "arn:aws:iam::123456789012:role/x"
SWEEP = "arn:aws:sts::123456789012:assumed-role/servingctl-sweep/x"


@pytest.fixture
def rdeps(world: World, clock: FakeClock) -> ReconcileDeps:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    machines = {
        a: sfn.create_state_machine(name=f"servingctl-{a}-profile", definition=WAIT, roleArn=ROLE)["stateMachineArn"]
        for a in ("start", "stop")
    }
    steps = Deps(
        ecs=world.ecs,
        autoscaling=world.autoscaling,
        elbv2=world.elbv2,
        ec2=world.ec2,
        stepfunctions=sfn,
        store=MemoryStore(),
        registry=world.registry,
        clock=clock,
    )
    return ReconcileDeps(
        steps=steps, sfn=sfn, events=boto3.client("events", region_name=REGION), machines=machines, identity=SWEEP
    )


def _execution(deps: ReconcileDeps, action: str, name: str, *, status: str = "RUNNING", profile: str = PROFILE) -> str:
    arn = deps.sfn.start_execution(
        stateMachineArn=deps.machines[action], name=f"{action}-{profile}-{name}", input=json.dumps({"profile": profile})
    )["executionArn"]
    if status == "ABORTED":
        deps.sfn.stop_execution(executionArn=arn, cause="aborted from the console")
    return arn


def _scaled_out(deps: ReconcileDeps, owner: str, profile: str = PROFILE) -> None:
    """What a start leaves right after ScaleOut: STARTING, its locks, a session, service and ASG at 1."""
    steps, now = deps.steps, deps.steps.clock.now()
    spec, pool = steps.profile(profile), steps.registry.pool_of(profile)
    steps.store.acquire_locks([f"profile:{profile}", f"pool:{spec.pool}"], owner, now, 7200)
    steps.store.set_phase(profile, Phase.STARTING, now, owner, session_id="s1")
    steps.store.open_session(
        Session(profile=profile, session_id="s1", pool=spec.pool, instance_type=pool.instance_type, started_at=now)
    )
    steps.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    steps.autoscaling.set_desired_capacity(AutoScalingGroupName=pool.asg_name, DesiredCapacity=1)


def _ready(deps: ReconcileDeps, at: Any) -> None:
    deps.steps.store.set_phase(PROFILE, Phase.STARTING, at, "start-x")
    deps.steps.store.set_phase(PROFILE, Phase.READY, at, "start-x")


def _stops(deps: ReconcileDeps) -> list[dict[str, Any]]:
    return deps.sfn.list_executions(stateMachineArn=deps.machines["stop"])["executions"]


class _Bus:
    """EventBridge as the reconciler sees it, keeping what was put on the bus."""

    def __init__(self, client: Any) -> None:
        self.client, self.entries = client, []

    def put_events(self, Entries: list[dict[str, Any]]) -> Any:
        self.entries += Entries
        return self.client.put_events(Entries=Entries)


def test_a_start_aborted_after_scale_out_is_stopped_and_its_dead_locks_released(rdeps: ReconcileDeps) -> None:
    dead = _execution(rdeps, "start", "dead", status="ABORTED")
    _scaled_out(rdeps, dead)
    rdeps.events = bus = _Bus(rdeps.events)
    [repair, other] = reconcile(rdeps, [PROFILE, OTHER])
    assert (repair.reason, repair.action, repair.stop) == ("lock-owner-ended", "stop-started", True)
    assert "start-deepseek-v4-flash-dead, which is ABORTED" in repair.detail
    assert (other.reason, other.action) == ("consistent", "none")
    [stop] = _stops(rdeps)
    assert stop["executionArn"] == repair.execution_arn
    assert json.loads(rdeps.sfn.describe_execution(executionArn=stop["executionArn"])["input"]) == {
        "profile": PROFILE,
        "requested_by": SWEEP,
    }
    # The dead owner's locks are gone (the stop does not wait for their lease); the reason is on the record.
    assert rdeps.steps.store.get_lock(f"profile:{PROFILE}") is None and rdeps.steps.store.get_lock("pool:g7e-2gpu") is None
    state = rdeps.steps.store.get_profile(PROFILE)
    assert state.reconcile_reason.startswith("lock-owner-ended: lock held by start-deepseek-v4-flash-dead")
    assert state.reconciled_at == rdeps.steps.clock.now()
    # One "Profile reconciled" event, for the repaired profile only, saying why and by whom.
    [event] = bus.entries
    assert (event["Source"], event["DetailType"]) == ("servingctl", "Profile reconciled")
    detail = json.loads(event["Detail"])
    assert (detail["profile"], detail["reason"], detail["execution_arn"], detail["requested_by"]) == (
        PROFILE,
        "lock-owner-ended",
        repair.execution_arn,
        SWEEP,
    )


def test_a_running_start_is_left_alone_and_a_second_run_joins_the_stop_it_started(rdeps: ReconcileDeps) -> None:
    live = _execution(rdeps, "start", "live")
    _scaled_out(rdeps, live)
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.stop) == ("execution-running", False)
    assert _stops(rdeps) == []
    rdeps.sfn.stop_execution(executionArn=live)
    [first] = reconcile(rdeps, [PROFILE])
    [again] = reconcile(rdeps, [PROFILE])  # the stop is running: that execution decides
    assert first.action == "stop-started" and (again.reason, again.action) == ("execution-running", "none")
    assert len(_stops(rdeps)) == 1


def test_a_stuck_phase_without_lock_or_execution_is_stopped(rdeps: ReconcileDeps) -> None:
    dead = _execution(rdeps, "start", "gone", status="ABORTED")
    rdeps.steps.store.set_phase(PROFILE, Phase.STARTING, rdeps.steps.clock.now(), dead)
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.action) == ("phase-stuck", "stop-started")
    assert "STARTING since" in repair.detail and "no start or stop of it is running" in repair.detail


def test_capacity_the_record_does_not_explain_is_stopped(rdeps: ReconcileDeps) -> None:
    spec = rdeps.steps.profile(PROFILE)
    rdeps.steps.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.action) == ("capacity-unexplained", "stop-started")
    assert repair.detail.startswith("STOPPED but its service wants 1 task(s)")


def test_an_orphan_pool_is_answered_by_its_first_profile_only(rdeps: ReconcileDeps) -> None:
    asg = rdeps.steps.pool("g7e-2gpu").asg_name
    rdeps.steps.autoscaling.set_desired_capacity(AutoScalingGroupName=asg, DesiredCapacity=1)
    on_pool = sorted(rdeps.steps.registry.profiles_on_pool("g7e-2gpu"))
    repairs = reconcile(rdeps, on_pool)
    assert [(r.profile, r.reason) for r in repairs if r.stop] == [(on_pool[0], "capacity-unexplained")]


def test_a_ready_profile_with_its_capacity_is_consistent(rdeps: ReconcileDeps) -> None:
    start = _execution(rdeps, "start", "done")
    rdeps.sfn.stop_execution(executionArn=start)
    _scaled_out(rdeps, start)
    rdeps.steps.store.release_locks([f"profile:{PROFILE}", "pool:g7e-2gpu"], start)
    rdeps.steps.store.set_phase(PROFILE, Phase.READY, rdeps.steps.clock.now(), start)
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.stop) == ("consistent", False)


def test_a_failed_stop_after_ready_is_driven_again_under_a_fresh_name(rdeps: ReconcileDeps) -> None:
    _ready(rdeps, rdeps.steps.clock.now() - timedelta(minutes=5))
    failed = _execution(rdeps, "stop", "user", status="ABORTED")
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.action) == ("stop-failed", "stop-started")
    assert repair.execution_arn != failed


def test_a_stop_from_before_the_current_phase_is_not_driven_again(rdeps: ReconcileDeps, clock: FakeClock) -> None:
    _execution(rdeps, "stop", "old", status="ABORTED")
    clock.advance(60)
    _ready(rdeps, clock.now())
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.stop) == ("consistent", False)


def test_a_failed_profile_with_an_open_session_is_stopped_to_close_it(rdeps: ReconcileDeps) -> None:
    dead = _execution(rdeps, "stop", "forced", status="ABORTED")
    rdeps.steps.clock.advance(1)
    rdeps.steps.store.set_phase(PROFILE, Phase.FAILED, rdeps.steps.clock.now(), dead, session_id="s9")
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.action) == ("session-open", "stop-started")


def test_a_closed_stop_name_is_never_reused(rdeps: ReconcileDeps) -> None:
    dead = _execution(rdeps, "start", "dead2", status="ABORTED")
    _scaled_out(rdeps, dead)
    [first] = reconcile(rdeps, [PROFILE])
    rdeps.sfn.stop_execution(executionArn=first.execution_arn)  # that stop died too; the lock is free
    rdeps.steps.store.acquire_locks([f"profile:{PROFILE}"], dead, rdeps.steps.clock.now(), 7200)  # same evidence again
    [second] = reconcile(rdeps, [PROFILE])
    names = attempt_names("stop", PROFILE, tuple(first.evidence))
    assert first.execution_arn.endswith(names[0]) and second.execution_arn.endswith(names[1])


def test_the_record_moving_meanwhile_makes_it_wait_for_the_next_sweep(
    rdeps: ReconcileDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = _execution(rdeps, "start", "dead3", status="ABORTED")
    _scaled_out(rdeps, dead)
    store = rdeps.steps.store
    original = store.get_profile
    reads = iter(
        [
            original(PROFILE),
            ProfileState(profile=PROFILE, phase=Phase.READY, updated_at=rdeps.steps.clock.now() + timedelta(seconds=1)),
        ]
    )
    monkeypatch.setattr(store, "get_profile", lambda name: next(reads))
    [repair] = reconcile(rdeps, [PROFILE])
    assert (repair.reason, repair.action) == ("lock-owner-ended", "changed") and _stops(rdeps) == []


def test_one_profile_raising_is_reported_and_the_others_are_still_reconciled(
    rdeps: ReconcileDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = sorted(rdeps.steps.registry.profiles)
    for name in names:
        spec = rdeps.steps.profile(name)
        rdeps.steps.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    original = rdeps.steps.store.get_lock

    def broken(lock: str) -> Any:
        if lock == f"profile:{names[0]}":
            raise RuntimeError("DynamoDB said no")
        return original(lock)

    monkeypatch.setattr(rdeps.steps.store, "get_lock", broken)
    repairs = reconcile(rdeps, names)
    assert [(r.profile, r.action) for r in repairs] == [(names[0], "error")] + [(n, "stop-started") for n in names[1:]]
    assert len(names) > 1
    assert repairs[0].detail == "RuntimeError: DynamoDB said no"


def test_a_status_change_event_reconciles_the_profile_its_input_names(rdeps: ReconcileDeps) -> None:
    dead = _execution(rdeps, "start", "console", status="ABORTED")
    _scaled_out(rdeps, dead)
    event = {
        "version": "0",
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "resources": [dead],
        "detail": {
            "executionArn": dead,
            "stateMachineArn": rdeps.machines["start"],
            "name": dead.rsplit(":", 1)[-1],
            "status": "ABORTED",
            "input": json.dumps({"profile": PROFILE}),
            "inputDetails": {"included": True},
        },
    }
    [repair] = on_status_change(rdeps, event)
    assert (repair.profile, repair.reason, repair.trigger) == (
        PROFILE,
        "lock-owner-ended",
        "ABORTED start-deepseek-v4-flash-console",
    )
    # EventBridge leaves a large input out: the reconciler reads it from DescribeExecution.
    del event["detail"]["input"]
    [again] = on_status_change(rdeps, event)
    assert (again.profile, again.reason) == (PROFILE, "execution-running")


def test_dry_run_decides_without_acting(rdeps: ReconcileDeps) -> None:
    dead = _execution(rdeps, "start", "dry", status="ABORTED")
    _scaled_out(rdeps, dead)
    [repair] = reconcile(rdeps, [PROFILE], dry_run=True)
    assert (repair.reason, repair.action) == ("lock-owner-ended", "would-stop") and _stops(rdeps) == []
    assert rdeps.steps.store.get_lock(f"profile:{PROFILE}") is not None


@pytest.mark.parametrize("status", ["RUNNING", "SUCCEEDED"])
def test_a_live_or_finished_owner_is_not_a_dead_one(status: str) -> None:
    state = ProfileState(profile=PROFILE, phase=Phase.READY)
    seen = Evidence(profile=PROFILE, state=state, lock_owner="arn:x:start-p-1", lock_owner_status=status, service_desired=1)
    assert decide(seen).stop is False


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "ABORTED", "MISSING"])
def test_every_ended_owner_is_dead(status: str) -> None:
    seen = Evidence(profile=PROFILE, state=ProfileState(profile=PROFILE), lock_owner="arn:x:start-p-1", lock_owner_status=status)
    assert decide(seen).reason == "lock-owner-ended"
