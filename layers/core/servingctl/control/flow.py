"""Pieces both flows share: config from the state, locks (taken over from a dead owner, renewed at
every probe), the stop flag, pool activity, releasing a pool."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from servingctl.control import aws
from servingctl.control.deps import Deps
from servingctl.control.routing import to_waker
from servingctl.control.state import FlowState, PoolGuard, Unlocked
from servingctl.costs import PriceCatalog, stored_session_cost
from servingctl.registry.models import Registry
from servingctl.shared.errors import InvalidInput, PoolBusy, StopRequested
from servingctl.shared.flow_inputs import StartConfig, StopConfig
from servingctl.store.base import LockConflict
from servingctl.store.models import InstanceSpan, Lock, Phase, Session, iso, pool_lock, profile_lock

if TYPE_CHECKING:
    from types_boto3_autoscaling import AutoScalingClient

ACTIVE_PHASES = frozenset({Phase.STARTING, Phase.READY, Phase.STOPPING})
# An execution's closed statuses: once DescribeExecution shows one, it never changes again.
CLOSED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


def config_of(state: FlowState) -> StartConfig | StopConfig:
    """The flow's $.config written by prepare_start / prepare_stop."""
    if state.config is None:
        raise InvalidInput("state.config: missing; prepare_start or prepare_stop must run first")
    return state.config


def lock_names(config: StartConfig | StopConfig) -> list[str]:
    """The profile lock and the pool lock, in that order."""
    return [profile_lock(config.profile), pool_lock(config.pool)]


def owner_running(deps: Deps, owner: str) -> bool:
    """False only when DescribeExecution of the owner's execution shows it closed. That read is
    eventually consistent: it may still say RUNNING for a moment after the end (the next round takes
    the lock) or not know an execution that just started (ExecutionDoesNotExist), so unknown counts as
    running; a closed status is final, so it confirms the end. Only a live lease comes here: an owner
    that stopped renewing loses the lock when its lease runs out."""
    try:
        status = deps.stepfunctions.describe_execution(executionArn=owner)["status"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return True
        raise
    return status not in CLOSED_STATUSES


def take_locks(deps: Deps, config: StartConfig | StopConfig, execution: str) -> tuple[list[Lock], list[str]]:
    """Take the profile and pool locks; a holder whose execution is no longer RUNNING is taken over,
    conditionally on that same holder. Returns the locks and the dead owners taken over from;
    LockConflict names a live holder."""
    names, dead = lock_names(config), list[str]()
    # Each round takes the locks, finds a live holder, or learns one more dead owner.
    while True:
        try:
            locks = deps.store.acquire_locks(names, execution, deps.clock.now(), config.settings.lock_lease_s, dead)
            return locks, dead
        except LockConflict as exc:
            if exc.lock.owner in dead or owner_running(deps, exc.lock.owner):
                raise
            dead.append(exc.lock.owner)


def hold_locks(deps: Deps, config: StartConfig | StopConfig, execution: str) -> None:
    """Renew this execution's short lease on its locks (LockLost when another owner has them now)."""
    deps.store.renew_locks(lock_names(config), execution, deps.clock.now(), config.settings.lock_lease_s)


def parse_time(value: str) -> datetime:
    """An ISO time from the state (the Z suffix included)."""
    return datetime.fromisoformat(value)


def raise_if_stop_requested(deps: Deps, profile: str) -> None:
    """A stop flag in force ends the start (it rolls back and lets the stop proceed)."""
    state = deps.store.get_profile(profile)
    if state.stop_requested(deps.clock.now()):
        raise StopRequested(f"stop of {profile} requested by {state.stop_requested_by}")


def pool_users(deps: Deps, profile: str) -> list[str]:
    """Other profiles active on this profile's pool, by recorded phase or by what ECS runs."""
    pool = deps.profile(profile).pool
    users = []
    for other in deps.registry.profiles_on_pool(pool):
        if other == profile:
            continue
        recorded = deps.store.get_profile(other).phase
        spec = deps.profile(other)
        counts = aws.service_counts(deps.ecs, spec.cluster, spec.service)
        if recorded in ACTIVE_PHASES or counts.desired > 0 or counts.running + counts.pending > 0:
            users.append(f"{other} ({recorded}, desired {counts.desired}, running {counts.running})")
    return users


def release_pool(deps: Deps, pool_name: str) -> tuple[list[str], list[str]]:
    """Clear scale-in protection, then ASG desired and min 0; returns (instances, protection cleared)."""
    pool = deps.pool(pool_name)
    view = aws.describe_asg(deps.autoscaling, pool.asg_name)
    protected = [i.instance_id for i in view.instances if i.protected]
    aws.clear_protection(deps.autoscaling, pool.asg_name, protected)
    aws.scale_asg_to_zero(deps.autoscaling, pool.asg_name)
    return [i.instance_id for i in view.instances], protected


def service_to_zero(deps: Deps, profile: str) -> list[str]:
    """Service auto scaling bounds 0..0 (a profile of several replicas), then desired 0; in words."""
    spec = deps.profile(profile)
    details = []
    if spec.max_replicas > 1:
        # First: target tracking (and its minimum) must not raise the desired count behind the stop.
        aws.set_replica_bounds(deps.appautoscaling, spec.cluster, spec.service, 0, 0)
        details.append(f"{spec.service} auto scaling 0..0")
    aws.set_service_desired(deps.ecs, spec.cluster, spec.service, 0)
    return [*details, f"{spec.service} desired 0"]


def scale_to_zero(deps: Deps, config: StartConfig | StopConfig) -> list[str]:
    """Service desired 0 (a wake-on-request profile's rule at the waker first), and the pool to 0 unless
    another profile uses it; what was done, in words."""
    details = [*to_waker(deps.elbv2, deps.profile(config.profile)), *service_to_zero(deps, config.profile)]
    users = pool_users(deps, config.profile)
    if users:
        details.append(f"pool {config.pool} kept for {'; '.join(users)}")
    else:
        instances, protected = release_pool(deps, config.pool)
        details.append(
            f"{deps.pool(config.pool).asg_name} desired/min 0 ({len(instances)} instance(s), "
            f"protection cleared on {len(protected)})"
        )
    return details


def session_end(deps: Deps, profile: str, session: Session, fallback: datetime) -> datetime | None:
    """When the session's instance time ended: None while its pool has (or is getting) an instance
    for it; else the end of the last "Terminating EC2 instance" activity since the session began
    (fallback when the group lists none). On a pool another profile keeps, the profile's own use
    ended with its service: fallback."""
    if pool_users(deps, profile):
        return max(fallback, session.started_at)
    group = aws.describe_asg(deps.autoscaling, deps.pool(session.pool).asg_name)
    if group.desired > 0 or group.instances:
        return None
    ended = aws.termination_times(deps.autoscaling, group.name, since=session.started_at)
    return max(ended.values()) if ended else max(fallback, session.started_at)


def settle_session(deps: Deps, profile: str, execution: str, reason: str, fallback: datetime) -> tuple[Session | None, bool]:
    """Close the profile's open ledger session at its instance's real termination time once the pool
    has no instance left; (the session, closed now or already) or (None, True) when there is none.
    While an instance still runs the session stays open: its hours are billed to it until the next
    stop (or the reconciler) closes it, never to a second session."""
    recorded = deps.store.get_profile(profile)
    session = deps.store.get_session(profile, recorded.session_id) if recorded.session_id else None
    if session is None:
        return None, True
    if not session.open:
        return session, True
    end = session_end(deps, profile, session, fallback)
    if end is None:
        return session, False
    spans = own_instances(deps.autoscaling, deps.registry, session)
    return deps.store.close_session(profile, session.session_id, end, execution, reason, spans), True


def own_instances(autoscaling: AutoScalingClient, registry: Registry, session: Session) -> list[InstanceSpan]:
    """Each instance's span in the session, from its pool's scaling activities; none on a pool the
    registry gives to other profiles too (its instances are not the session's alone)."""
    if registry.profiles_on_pool(session.pool) != [session.profile]:
        return []
    return aws.instance_spans(autoscaling, registry.pools[session.pool].asg_name, session.started_at)


def session_spend(
    autoscaling: AutoScalingClient, registry: Registry, catalog: PriceCatalog, session: Session, now: datetime
) -> dict[str, Any]:
    """What a session's budget is judged on (Observed fields): its start and hourly price and, from
    its pool's scaling activities, what every instance has cost so far and how many run now."""
    pool = registry.pools[session.pool]
    price = catalog.instance(registry.region, pool.price_key or pool.instance_type)
    seen: dict[str, Any] = {"session_started_at": session.started_at, "hourly_usd": price.hourly_usd if price else None}
    live = own_instances(autoscaling, registry, session)
    if price is not None and live:
        cost = stored_session_cost(catalog, registry.region, session, now, live)
        seen |= {"spent_usd": cost.cost_usd, "running_instances": sum(span.stopped_at is None for span in live)}
    return seen


def session_note(session: Session | None, closed: bool) -> list[str]:
    """What settle_session did to the ledger session, in words (nothing when there was none)."""
    if session is None:
        return []
    return [f"session closed at {iso(session.stopped_at)}" if closed else "session open until the instance is gone"]


def release_locks(deps: Deps, config: StartConfig | StopConfig, execution: str) -> str:
    """Give back the profile and pool locks this execution holds; which were released, in words."""
    released = deps.store.release_locks(lock_names(config), execution)
    return f"released {', '.join(released) or 'no lock'}"


def guard_pool(deps: Deps, state: FlowState, execution: str) -> PoolGuard:
    """Who else uses the pool; a start refuses (PoolBusy) unless allow_shared_pool."""
    config = config_of(state)
    users = pool_users(deps, config.profile)
    if users and isinstance(config, StartConfig) and not config.settings.allow_shared_pool:
        raise PoolBusy(f"pool {config.pool} is in use by {'; '.join(users)}; pass allow_shared_pool=true to share it")
    return PoolGuard(others=users, keep=bool(users))


def release_lock(deps: Deps, state: FlowState, execution: str) -> Unlocked:
    """Give back the locks this execution holds."""
    return Unlocked(released=deps.store.release_locks(lock_names(config_of(state)), execution))
