"""Steps of stop_profile: prepare, flag a running start, lock (waiting), desired 0, drain, pool guard,
release capacity, termination, close the ledger session; force_release when anything fails."""

from __future__ import annotations

from datetime import timedelta

from servingctl.control import aws
from servingctl.control.config import stop_config
from servingctl.control.deps import Deps
from servingctl.control.flow import (
    config_of,
    hold_locks,
    parse_time,
    pool_users,
    release_locks,
    release_pool,
    scale_to_zero,
    service_to_zero,
    session_note,
    settle_session,
    take_locks,
)
from servingctl.control.polling import Check, Progress, run_check
from servingctl.control.routing import to_waker
from servingctl.control.state import Closed, Released, ScaledIn, StopFlagged, StopState, Undone
from servingctl.shared.flow_inputs import STOP_FLAG_MARGIN_S, StopConfig
from servingctl.store.base import LockConflict
from servingctl.store.models import Phase, iso, profile_lock


def _config(state: StopState) -> StopConfig:
    config = config_of(state)
    assert isinstance(config, StopConfig), "a stop step ran on a start flow's state"
    return config


def prepare_stop(deps: Deps, state: StopState, execution: str) -> StopConfig:
    """Validate the input; already_stopped when STOPPED, unlocked, ECS runs nothing and its pool is
    empty or used by another profile (the reconciler stops a profile to release an orphan pool)."""
    config = stop_config(deps.registry, state.given())
    recorded = deps.store.get_profile(config.profile)
    lock = deps.store.get_lock(profile_lock(config.profile))
    spec = deps.profile(config.profile)
    counts = aws.service_counts(deps.ecs, spec.cluster, spec.service)
    already = (
        recorded.phase == Phase.STOPPED
        and not (lock and lock.live(deps.clock.now()))
        and counts.desired == 0
        and counts.running + counts.pending == 0
        and (
            aws.describe_asg(deps.autoscaling, deps.pool(config.pool).asg_name).desired == 0
            or bool(pool_users(deps, config.profile))
        )
    )
    return config.model_copy(update={"already_stopped": already})


def request_stop(deps: Deps, state: StopState, execution: str) -> StopFlagged:
    """Set the stop flag a running start checks; it lapses by itself if this execution dies."""
    config = _config(state)
    now = deps.clock.now()
    until = now + timedelta(seconds=config.settings.deadlines.lock_s + STOP_FLAG_MARGIN_S)
    deps.store.update_profile(config.profile, now, stop_requested_by=execution, stop_requested_until=until)
    return StopFlagged(requested_until=iso(until))


def await_lock(deps: Deps, state: StopState, execution: str) -> Check:
    """Take the profile and pool locks (over from an owner whose execution is no longer RUNNING), or
    answer not-ready while a running execution holds them."""
    config = _config(state)

    def probe(progress: Progress) -> tuple[bool, str]:
        try:
            _, dead = take_locks(deps, config, execution)
        except LockConflict as exc:
            return False, f"waiting: {exc}"
        if dead:
            progress.marks["taken_over_from"] = dead
            return True, f"locks taken over from {', '.join(dead)} (no longer running)"
        return True, "locks taken"

    return run_check(
        last=state.lock,
        what="the profile and pool locks",
        deadline_s=config.settings.deadlines.lock_s,
        poll=config.settings.poll,
        clock=deps.clock,
        probe=probe,
    )


def scale_in_service(deps: Deps, state: StopState, execution: str) -> ScaledIn:
    """Record STOPPING (the stop flag has done its job), then a wake-on-request profile's rule at the
    waker (so no request reaches a draining target), then service desired 0 (auto scaling 0..0 first)."""
    config = _config(state)
    hold_locks(deps, config, execution)
    now = deps.clock.now()
    deps.store.set_phase(
        config.profile,
        Phase.STOPPING,
        now,
        execution,
        stop_requested_by=None,
        stop_requested_until=None,
        stopped_by=config.requested_by,
        no_wake=config.no_wake,
    )
    routed = to_waker(deps.elbv2, deps.profile(config.profile))
    details = [*routed, *service_to_zero(deps, config.profile)]
    return ScaledIn(at=iso(now) or "", service_desired=0, detail="; ".join(details), to_waker=bool(routed))


def check_drained(deps: Deps, state: StopState, execution: str) -> Check:
    """No task running or stopping and no target left registered in the profile's target group."""
    config = _config(state)
    spec = deps.profile(config.profile)

    def probe(progress: Progress) -> tuple[bool, str]:
        hold_locks(deps, config, execution)
        counts = aws.service_counts(deps.ecs, spec.cluster, spec.service)
        live = aws.service_tasks(deps.ecs, spec.cluster, spec.service, "RUNNING") + [
            t for t in aws.service_tasks(deps.ecs, spec.cluster, spec.service, "STOPPED") if t.get("lastStatus") != "STOPPED"
        ]
        targets = {
            ip: s for ip, s in aws.target_states(deps.elbv2, spec.target_group_arn).items() if s not in aws.GONE_TARGET_STATES
        }
        drained = not live and counts.running + counts.pending == 0 and not targets
        return drained, (
            f"{counts.running} running, {counts.pending} pending, {len(live)} task(s) not stopped, "
            f"targets: {', '.join(f'{ip} {s}' for ip, s in targets.items()) or 'none'}"
        )

    return run_check(
        last=state.drain,
        what="drained service and target group",
        deadline_s=config.settings.deadlines.drain_s,
        poll=config.settings.poll,
        clock=deps.clock,
        probe=probe,
    )


def release_capacity(deps: Deps, state: StopState, execution: str) -> Released:
    """Clear scale-in protection on the pool's instances, then ASG desired and min 0."""
    config = _config(state)
    hold_locks(deps, config, execution)
    instances, protected = release_pool(deps, config.pool)
    return Released(instances=instances, protection_cleared=protected)


def check_terminated(deps: Deps, state: StopState, execution: str) -> Check:
    """The ASG has no instance left and the released ones are shutting down or terminated in EC2, or
    (a warm pool with reuse on scale-in) back in the warm pool and stopped."""
    config = _config(state)
    pool = deps.pool(config.pool)
    released = state.release.instances if state.release else []

    def probe(progress: Progress) -> tuple[bool, str]:
        hold_locks(deps, config, execution)
        in_group = [f"{i.instance_id} {i.lifecycle}" for i in aws.describe_asg(deps.autoscaling, pool.asg_name).instances]
        warm = {i.instance_id: i.lifecycle for i in aws.warm_instances(deps.autoscaling, pool.asg_name)} if pool.warm_pool else {}
        states = aws.instance_states(deps.ec2, released)
        parked = [i for i, s in states.items() if i in warm and s in aws.PARKED_INSTANCE_STATES]
        if parked:
            progress.mark_once("returned_to_warm_pool", parked)
        running = [f"{i} {s}" + (f" ({warm[i]})" if i in warm else "") for i, s in states.items()
                   if s not in aws.GONE_INSTANCE_STATES and i not in parked]  # fmt: skip
        return not in_group and not running, (
            f"in {pool.asg_name}: {', '.join(in_group) or 'none'}; EC2 not yet gone: {', '.join(running) or 'none'}"
            + (f"; stopped in the warm pool: {', '.join(parked)}" if parked else "")
        )

    return run_check(
        last=state.termination,
        what="instances terminated",
        deadline_s=config.settings.deadlines.terminate_s,
        poll=config.settings.poll,
        clock=deps.clock,
        probe=probe,
    )


def close_session(deps: Deps, state: StopState, execution: str) -> Closed:
    """Close the open ledger session at the instance's real termination time (now when the pool is
    kept for another profile) and record STOPPED."""
    config = _config(state)
    hold_locks(deps, config, execution)
    now = deps.clock.now()
    # When the group lists no termination activity, the first probe that saw the instances gone.
    seen_gone = state.termination.progress.marks.get("ready_at") if state.termination else None
    session, _ = settle_session(deps, config.profile, execution, "stopped", parse_time(seen_gone) if seen_gone else now)
    deps.store.set_phase(
        config.profile,
        Phase.STOPPED,
        now,
        execution,
        session_id=None,
        stopped_at=now,
        lease_deadline=None,
        last_error=None,
    )
    return Closed(phase=Phase.STOPPED.value, session=session)


def force_release(deps: Deps, state: StopState, execution: str) -> Undone:
    """Stopping is the safe direction: desired 0 and the pool to 0 when unused, even without the lock.

    Runs for every failure of the flow, PrepareStop's included (the profile then comes from the
    input, when the registry knows it). The ledger session closes at the instance's termination time
    when the pool is already empty; otherwise it stays open on the record, so the hours until the
    next stop (or the reconciler) terminates the instance are billed to it, once.
    """
    config = _forced_config(deps, state)
    if config is None:
        return Undone(acted=False, detail=f"nothing was stopped: {state.error_reason()}")
    reason = state.error_reason()
    details = scale_to_zero(deps, config)
    now = deps.clock.now()
    lock = deps.store.get_lock(profile_lock(config.profile))
    # Only the lock owner clears the stop flag: a start still holding the lock must still see it.
    flag = {"stop_requested_by": None, "stop_requested_until": None} if lock is None or lock.owner == execution else {}
    session, closed = settle_session(deps, config.profile, execution, "stop failed", now)
    recorded = deps.store.get_profile(config.profile)
    deps.store.set_phase(
        config.profile,
        Phase.FAILED,
        now,
        execution,
        last_error=f"stop failed: {reason}",
        session_id=None if closed else recorded.session_id,
        **flag,
    )
    details.append(f"recorded FAILED: {reason}")
    details += session_note(session, closed)
    details.append(release_locks(deps, config, execution))
    return Undone(acted=True, detail="; ".join(details))


def _forced_config(deps: Deps, state: StopState) -> StopConfig | None:
    """The flow's config, or, when PrepareStop failed, one built from the input's profile with the
    default settings (None when the input names no profile the registry knows)."""
    if state.config is not None:
        return state.config
    profile = state.profile()
    if profile is None or profile not in deps.registry.profiles:
        return None
    return stop_config(deps.registry, {"profile": profile})
