"""Steps of start_profile: prepare, lock, answer READY at once, pool guard, scale out, wait loops,
record READY, release; roll_back undoes only what this execution started."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from servingctl.control import aws, known, launch_failures, routing, timeline_sources
from servingctl.control.config import start_config
from servingctl.control.deps import Deps
from servingctl.control.flow import (
    config_of,
    hold_locks,
    lock_names,
    parse_time,
    raise_if_stop_requested,
    release_locks,
    scale_to_zero,
    session_note,
    settle_session,
    take_locks,
)
from servingctl.control.polling import Check, Progress, run_check
from servingctl.control.state import (
    Baseline,
    Current,
    Fallback,
    LockTaken,
    Ready,
    Routed,
    ScaledOut,
    StartState,
    TimelinePhase,
    Undone,
)
from servingctl.control.timeline import (
    GRACE_BOUNDS_S,
    GRACE_SPAN,
    HISTORY_STARTS,
    LOOP_SPANS,
    MIN_WAIT_S,
    derived_wait,
    hook_wait_marks,
    note_hook_waits,
    spans,
)
from servingctl.shared.errors import CapacityUnavailable, InvalidInput, LockHeld, ProfileNotFound, TaskFailed
from servingctl.shared.flow_inputs import StartConfig
from servingctl.store.base import LockConflict
from servingctl.store.models import Mark, Phase, Session, StartRecord, iso, profile_lock, session_id_for

if TYPE_CHECKING:
    from types_boto3_ecs.type_defs import TaskTypeDef

PHASES = ("capacity", "boot", "task", "health", "smoke")


def _config(state: StartState) -> StartConfig:
    config = config_of(state)
    assert isinstance(config, StartConfig), "a start step ran on a stop flow's state"
    return config


def _scaled(state: StartState) -> ScaledOut:
    """$.scale, which every step after scale_out reads."""
    if state.scale is None:
        raise InvalidInput("state.scale: missing; scale_out must run first")
    return state.scale


def _passed(check: Check | None, key: str) -> Check:
    """A wait loop's last answer, which record_ready reads once the loop is past."""
    if check is None or not check.ready:
        raise InvalidInput(f"state.{key}: missing or not ready; its wait loop must end first")
    return check


def _observe(deps: Deps, config: StartConfig, state: StartState, *extra: Mark) -> dict[str, str]:
    """Bring the start's timeline up to date from its sources; mark -> time, for the step's answer
    (so the execution's history holds the timeline as it grew)."""
    start_id = state.scale.start_id if state.scale else None
    record = timeline_sources.observe(deps, config.profile, config.pool, start_id, *extra) if start_id else None
    return {m.name: iso(m.at) or "" for m in record.marks} if record else {}


def prepare_start(deps: Deps, state: StartState, execution: str) -> StartConfig:
    """Validate the input (InvalidInput / ProfileNotFound) and merge the registry's defaults; a
    deadline the input does not set comes from the profile's past starts once there are enough."""
    named = state.profile()
    if named is not None and named in deps.retired:
        raise ProfileNotFound(f"profile: {named} cannot be started: {deps.retired[named]}; it can only be stopped")
    config = start_config(deps.registry, state.given())
    # Validated by start_config: a dict of the deadlines the input set, when it set any.
    given = state.given().get("deadlines") or {}
    history = deps.store.list_starts(config.profile, limit=HISTORY_STARTS)
    upper = deps.profile(config.profile).limits.max_start_deadline_s
    fixed = config.settings.deadlines
    derived = {
        name: wait
        for name, span in LOOP_SPANS.items()
        if given.get(name) is None and (wait := derived_wait(history, span, MIN_WAIT_S, upper)) is not None
    }
    deadlines = fixed.model_copy(update={**derived, "derived": sorted(derived)})
    return config.model_copy(update={"settings": config.settings.model_copy(update={"deadlines": deadlines})})


def acquire_lock(deps: Deps, state: StartState, execution: str) -> LockTaken:
    """Take the profile and pool locks together, taking them over from an owner whose execution is
    no longer RUNNING; LockHeld names a live holder."""
    config = _config(state)
    try:
        locks, dead = take_locks(deps, config, execution)
    except LockConflict as exc:
        raise LockHeld(f"{exc}; wait for it to finish or stop it") from None
    return LockTaken(owner=execution, expires_at=iso(locks[0].expires_at), locks=lock_names(config), taken_over_from=dead)


def check_current(deps: Deps, state: StartState, execution: str) -> Current:
    """READY in the store and a running task in ECS: nothing to start."""
    config = _config(state)
    recorded = deps.store.get_profile(config.profile)
    spec = deps.profile(config.profile)
    counts = aws.service_counts(deps.ecs, spec.cluster, spec.service)
    return Current(phase=recorded.phase.value, ready=recorded.phase == Phase.READY and counts.running >= 1)


def scale_out(deps: Deps, state: StartState, execution: str) -> ScaledOut:
    """Record STARTING and the ledger session, then service desired min_replicas (and auto scaling
    bounds min..max_replicas) and the ASG up to min_replicas when below it."""
    config = _config(state)
    spec, pool = deps.profile(config.profile), deps.pool(config.pool)
    hold_locks(deps, config, execution)
    now = deps.clock.now()
    history = deps.store.list_starts(config.profile, limit=HISTORY_STARTS)  # the past starts, not this one
    session_id, start_id = _session_and_start(deps, config, execution, now)
    # The store first: roll_back acts only on a profile recorded STARTING by this execution.
    _record_starting(deps, config, execution, now, session_id)
    baseline = _baseline(deps, config)
    # ECS ignores the target's health this long after the task started: as long as past starts needed.
    grace = derived_wait(history, GRACE_SPAN, *GRACE_BOUNDS_S)
    replicas = spec.min_replicas
    aws.set_service_desired(deps.ecs, spec.cluster, spec.service, replicas, health_grace_s=grace)
    if spec.max_replicas > 1:
        aws.set_replica_bounds(deps.appautoscaling, spec.cluster, spec.service, replicas, spec.max_replicas)
    group = aws.describe_asg(deps.autoscaling, pool.asg_name)
    asg_scaled = group.desired < replicas
    if asg_scaled:
        # An earlier start's capacity fallback may have left the group on an alternate's template.
        if group.desired == 0 and pool.launch_template_id and group.launch_template_id not in (None, pool.launch_template_id):
            aws.use_launch_template(deps.autoscaling, pool.asg_name, pool.launch_template_id)
        # One instance per replica (each task reserves the instance's GPUs).
        aws.set_asg_desired(deps.autoscaling, pool.asg_name, replicas)
    return ScaledOut(
        at=iso(now) or "",
        asg_scaled=asg_scaled,
        session_id=session_id,
        start_id=start_id,
        baseline=baseline,
        health_grace_s=grace,
    )


def _session_and_start(deps: Deps, config: StartConfig, execution: str, now: datetime) -> tuple[str, str]:
    """The ledger session this start bills to and its timeline's id (the start record made when new):
    a retry of scale_out keeps both; an open session whose instance still runs goes on."""
    recorded = deps.store.get_profile(config.profile)
    current = deps.store.get_session(config.profile, recorded.session_id) if recorded.session_id else None
    if current is not None and current.open and current.start_execution == execution:
        ended = False  # a retry of this step keeps the session it opened
    else:
        # An open session whose instance is gone ends at its termination time; one whose instance
        # still runs (a dead start's, a failed stop's) goes on: its hours are billed once.
        current, ended = settle_session(deps, config.profile, execution, "ended before this start", now)
    session_id = current.session_id if current is not None and not ended else session_id_for(now, execution)
    # This start's timeline; a retry of this step (its session opened by this execution) keeps it.
    start_id = session_id if current is not None and current.start_execution == execution else session_id_for(now, execution)
    if deps.store.get_start(config.profile, start_id) is None:
        deps.store.put_start(
            StartRecord(
                profile=config.profile,
                start_id=start_id,
                execution=execution,
                requested_at=now,
                marks=[Mark(name="requested", at=now, source="controller: scale_out", seen_at=now)],
            )
        )
    return session_id, start_id


def _record_starting(deps: Deps, config: StartConfig, execution: str, now: datetime, session_id: str) -> None:
    """STARTING on the profile's record (what an earlier session left cleared) and its session opened."""
    pool = deps.pool(config.pool)
    deps.store.set_phase(
        config.profile,
        Phase.STARTING,
        now,
        execution,
        session_id=session_id,
        last_error=None,
        ready_at=None,
        stopped_at=None,
        phase_seconds={},
        lease_deadline=None,
        instance_type=pool.instance_type,
        warm_start=None,
        capacity_note=None,
        registry_entry=known.entry(deps.registry, config.profile),
        # Who asked; a keepalive or a benchmark hold of an earlier session does not carry over.
        started_by=config.requested_by,
        kept_alive_by=None,
        kept_alive_at=None,
        held_by=None,
        held_until=None,
        no_wake=False,
    )
    deps.store.open_session(
        Session(
            profile=config.profile,
            session_id=session_id,
            pool=config.pool,
            instance_type=pool.instance_type,
            price_key=pool.price_key or pool.instance_type,
            started_at=now,
            start_execution=execution,
        )
    )


def _baseline(deps: Deps, config: StartConfig) -> Baseline:
    """What failed before this start is not this start's failure: remembered by id, not by time (a
    retry right after an InsufficientInstanceCapacity must not fail on the old activity); and the warm
    pool's stopped instances now (the one the group takes into service is a warm start)."""
    spec, pool = deps.profile(config.profile), deps.pool(config.pool)
    warm = aws.warm_instances(deps.autoscaling, pool.asg_name) if pool.warm_pool else ()
    return Baseline(
        failed_activities=aws.failed_activity_ids(deps.autoscaling, pool.asg_name),
        stopped_tasks=[t["taskArn"] for t in aws.service_tasks(deps.ecs, spec.cluster, spec.service, "STOPPED")],
        warm_instances=[i.instance_id for i in warm if i.lifecycle in aws.TAKEABLE_WARM_STATES],
    )


def fall_back(deps: Deps, config: StartConfig, progress: Progress, activity: str, message: str) -> str:
    """After a failed launch: classify it (servingctl.control.launch_failures) and point the group at
    the option its class allows next, recording the attempt with its class (the check's marks, the
    profile record, the ledger session); CapacityUnavailable naming every attempt when none is left."""
    pool = deps.pool(config.pool)
    options = pool.options()
    types = [itype for itype, _ in options]
    index = int(progress.marks.get("option", 0))
    failure = launch_failures.classify(types[index], message)
    tried = progress.marks.setdefault("fallbacks", [])
    tried.append(
        {
            "instance_type": types[index],
            "activity": activity,
            "class": failure.kind,
            "code": failure.code,
            "reason": message,
            "at": iso(deps.clock.now()),
        }
    )
    following, skipped = launch_failures.next_option(failure, types, index)
    passed = f"; not tried: {', '.join(skipped)} (the same quota)" if skipped else ""
    if following is None:
        earlier = "; ".join(f"{t['instance_type']}: {t.get('class', 'unknown')}: {t['reason']}" for t in tried[:-1])
        raise CapacityUnavailable(
            f"{pool.asg_name} could not launch {types[index]}: {failure.summary()}: {message}{passed}"
            + (f"; alternates tried before: {earlier}" if earlier else "")
        )
    next_type, template = options[following]
    assert template is not None, "the registry requires a launch template per option"
    aws.use_launch_template(deps.autoscaling, pool.asg_name, template)
    # AWS kept retrying the refused type until now: those failed activities are not the next type's.
    passed_over = progress.marks.setdefault("passed_activities", [])
    passed_over += [a for a in aws.failed_activity_ids(deps.autoscaling, pool.asg_name) if a not in passed_over]
    progress.marks["option"], progress.marks["instance_type"] = following, next_type
    note = f"{types[index]}: {failure.summary()}{passed}; moved to {next_type} (option {following + 1} of {len(options)})"
    now = deps.clock.now()
    recorded = deps.store.update_profile(config.profile, now, instance_type=next_type, capacity_note=note)
    if recorded.session_id:
        deps.store.retype_session(config.profile, recorded.session_id, next_type, next_type, note)
    return note


def check_capacity(deps: Deps, state: StartState, execution: str) -> Check:
    """An InService instance registered as a container instance. A failed launch moves to the pool's
    next instance type when its class allows (fall_back); otherwise, or after the last option, fails fast."""
    config = _config(state)
    spec, pool = deps.profile(config.profile), deps.pool(config.pool)
    baseline = _scaled(state).baseline
    warm = set(baseline.warm_instances)

    def probe(progress: Progress) -> tuple[bool, str]:
        hold_locks(deps, config, execution)
        raise_if_stop_requested(deps, config.profile)
        handled = {t["activity"] for t in progress.marks.get("fallbacks", [])} | set(progress.marks.get("passed_activities", []))
        failure = aws.failed_launch(deps.autoscaling, pool.asg_name, set(baseline.failed_activities) | handled)
        if failure:
            return False, fall_back(deps, config, progress, *failure)
        group = aws.describe_asg(deps.autoscaling, pool.asg_name)
        in_service = group.in_service()
        if in_service:
            progress.mark_once("in_service_at", iso(deps.clock.now()))
        # A warm instance passes Pending, Pending:Wait, Pending:Proceed (EC2 start) to InService.
        from_pool = [i for i in group.instances if i.instance_id in warm]
        if from_pool:
            progress.mark_once("warm_instance", from_pool[0].instance_id)
        registered = sorted(set(in_service) & aws.registered_instances(deps.ecs, spec.cluster))
        if registered:
            progress.mark_once("instance_id", registered[0])
            progress.marks["instance_ids"] = registered
        # Its launch hook holding an instance (preparing in the warm pool, or on its way into service).
        warm_now = aws.warm_instances(deps.autoscaling, pool.asg_name) if pool.warm_pool else ()
        waits = progress.marks.setdefault("hook_waits", {})
        note_hook_waits(waits, [(i.instance_id, i.lifecycle) for i in (*group.instances, *warm_now)], deps.clock.now())
        held = hook_wait_marks(waits, [i.instance_id for i in group.instances])
        progress.marks["timeline"] = _observe(deps, config, state, *held)
        states = "; ".join(f"{i.instance_id} {i.lifecycle}" + (" (from the warm pool)" if i.instance_id in warm else "")
                           for i in group.instances if i.lifecycle != "InService")  # fmt: skip
        if not group.instances and pool.warm_pool:
            # Nothing in the group yet: say what the warm pool holds (Warmed:Pending still initialises).
            pooled = ", ".join(f"{i.instance_id} {i.lifecycle}" for i in warm_now)
            states = f"warm pool: {pooled or 'empty (a new instance launches)'}"
        return len(registered) >= spec.min_replicas, (
            f"{len(in_service)} instance(s) InService in {pool.asg_name}, "
            f"{len(registered)} of {spec.min_replicas} registered in cluster {spec.cluster}" + (f"; {states}" if states else "")
        )

    return run_check(
        last=state.capacity,
        what="capacity (instance InService and registered)",
        deadline_s=config.settings.deadlines.capacity_s,
        poll=config.settings.poll,
        clock=deps.clock,
        probe=probe,
    )


def _count_task_failures(deps: Deps, config: StartConfig, state: StartState) -> int:
    """Tasks of the service stopped since the scale-out; TaskFailed once max_task_failures is reached."""
    spec = deps.profile(config.profile)
    known = set(_scaled(state).baseline.stopped_tasks)
    stopped = [
        t
        for t in aws.service_tasks(deps.ecs, spec.cluster, spec.service, "STOPPED")
        if t.get("lastStatus") == "STOPPED" and t["taskArn"] not in known
    ]
    if len(stopped) >= config.settings.max_task_failures:
        # Stable sort: among equal stamps the one ECS listed last is the latest.
        last = sorted(stopped, key=lambda t: str(t.get("stoppedAt") or t.get("createdAt") or ""))[-1]
        raise TaskFailed(
            f"{len(stopped)} task(s) of {spec.service} stopped since the start "
            f"(limit {config.settings.max_task_failures}); last: {aws.stopped_reason(last)}"
        )
    return len(stopped)


def _running_tasks(deps: Deps, config: StartConfig) -> tuple[list[TaskTypeDef], list[TaskTypeDef]]:
    spec = deps.profile(config.profile)
    live = aws.service_tasks(deps.ecs, spec.cluster, spec.service, "RUNNING")
    return live, [t for t in live if t.get("lastStatus") == "RUNNING"]


def check_task(deps: Deps, state: StartState, execution: str) -> Check:
    """min_replicas of the service's tasks RUNNING; stopped tasks are counted (TaskFailed after max_task_failures)."""
    config = _config(state)
    wanted = deps.profile(config.profile).min_replicas

    def probe(progress: Progress) -> tuple[bool, str]:
        hold_locks(deps, config, execution)
        raise_if_stop_requested(deps, config.profile)
        failures = _count_task_failures(deps, config, state)
        live, running = _running_tasks(deps, config)
        if running:
            progress.marks["task_arn"] = running[0]["taskArn"]
            progress.marks["task_ip"] = aws.task_ip(running[0])
        progress.marks["timeline"] = _observe(deps, config, state)
        statuses = ", ".join(f"{t['taskArn'].rsplit('/', 1)[-1][:8]} {t.get('lastStatus')}" for t in live)
        return len(running) >= wanted, (
            f"tasks ({len(running)} of {wanted} RUNNING): {statuses or 'none placed yet'}; stopped since start: {failures}"
        )

    return run_check(
        last=state.task,
        what="task RUNNING",
        deadline_s=config.settings.deadlines.task_s,
        poll=config.settings.poll,
        clock=deps.clock,
        probe=probe,
    )


def check_targets(deps: Deps, state: StartState, execution: str) -> Check:
    """min_replicas running tasks' IPs healthy in the profile's target group (watched at the poll interval)."""
    config = _config(state)
    spec = deps.profile(config.profile)
    wanted = spec.min_replicas
    group = spec.target_group_arn.split(":")[-1]

    def probe(progress: Progress) -> tuple[bool, str]:
        hold_locks(deps, config, execution)
        raise_if_stop_requested(deps, config.profile)
        failures = _count_task_failures(deps, config, state)
        _, running = _running_tasks(deps, config)
        if not running:
            return False, f"no running task (stopped since start: {failures}); ECS is placing one"
        targets = aws.target_states(deps.elbv2, spec.target_group_arn)
        ips = {t["taskArn"]: aws.task_ip(t) for t in running}
        healthy_ips = {arn: ip for arn, ip in ips.items() if ip and targets.get(ip) == "healthy"}
        if len(healthy_ips) >= wanted:
            arn, ip = next(iter(healthy_ips.items()))
            progress.marks["task_arn"], progress.marks["task_ip"] = arn, ip
            progress.marks["task_ips"] = sorted(healthy_ips.values())
            # The ALB keeps no time of the change: the first poll that saw them healthy is the mark.
            healthy = Mark(name="target_healthy", at=deps.clock.now(), source="elbv2:DescribeTargetHealth (first healthy poll)")
            progress.marks["timeline"] = _observe(deps, config, state, healthy)
            return True, f"target(s) {', '.join(sorted(healthy_ips.values()))} healthy in {group}"
        progress.marks["timeline"] = _observe(deps, config, state)
        seen = ", ".join(f"{ip}: {targets.get(ip, 'not registered') if ip else 'no IP yet'}" for ip in ips.values())
        return False, f"targets in {group}: {seen}"

    return run_check(
        last=state.targets,
        what="healthy ALB target",
        deadline_s=config.settings.deadlines.health_s,
        poll=config.settings.poll,
        clock=deps.clock,
        probe=probe,
        watch_budget_s=deps.watch_budget_s,
    )


def route_to_model(deps: Deps, state: StartState, execution: str) -> Routed:
    """Step RouteToModel: a wake-on-request profile's rule forwards to its model's target group again
    (the waker had it while the profile was not READY); other profiles keep Terraform's rule."""
    config = _config(state)
    spec = deps.profile(config.profile)
    hold_locks(deps, config, execution)  # a stop requested meanwhile wins: it raises StopRequested
    if not spec.wake_on_request or spec.wake is None:
        return Routed(routed=False, detail=f"{config.profile} does not wake on request: the rule is Terraform's")
    routing.forward(deps.elbv2, spec.wake.listener_rule_arn, spec.target_group_arn)
    return Routed(routed=True, detail=f"listener rule forwards to {spec.target_group_arn.rsplit(':', 1)[-1]}")


def phase_seconds(state: StartState, now_iso: str) -> dict[str, float]:
    """Seconds spent in capacity, boot (InService -> registered), task, health and smoke, and the total."""
    capacity = _passed(state.capacity, "capacity").progress.marks
    marks = [
        _scaled(state).at,
        capacity.get("in_service_at", capacity["ready_at"]),
        capacity["ready_at"],
        _passed(state.task, "task").progress.marks["ready_at"],
        _passed(state.targets, "targets").progress.marks["ready_at"],
        now_iso,
    ]
    times = [parse_time(m) for m in marks]
    spans = {name: round((times[i + 1] - times[i]).total_seconds(), 3) for i, name in enumerate(PHASES)}
    return spans | {"total": round((times[-1] - times[0]).total_seconds(), 3)}


def record_ready(deps: Deps, state: StartState, execution: str) -> Ready:
    """READY with phase durations and the lease deadline."""
    config = _config(state)
    hold_locks(deps, config, execution)
    now = deps.clock.now()
    seconds = phase_seconds(state, iso(now) or "")
    lease = now + timedelta(minutes=config.settings.lease_minutes)
    marks = _passed(state.capacity, "capacity").progress.marks
    instance_type = str(marks.get("instance_type", deps.pool(config.pool).instance_type))
    warm_start = "warm_instance" in marks
    deps.store.set_phase(
        config.profile,
        Phase.READY,
        now,
        execution,
        ready_at=now,
        phase_seconds=seconds,
        lease_deadline=lease,
        last_error=None,
        instance_type=instance_type,
        warm_start=warm_start,
    )
    return Ready(
        phase=Phase.READY.value,
        phase_seconds=seconds,
        lease_deadline=iso(lease),
        timeline=_finish_timeline(deps, config, state, "READY", now),
        instance_type=instance_type,
        warm_start=warm_start,
        # The check's marks keep each attempt's activity too; the answer keeps what a reader needs.
        capacity_fallbacks=[
            Fallback.model_validate({k: t.get(k) for k in ("instance_type", "class", "code", "reason", "at")})
            for t in marks.get("fallbacks", [])
        ],
    )


def _finish_timeline(
    deps: Deps, config: StartConfig, state: StartState, outcome: str, now: datetime, error: str | None = None
) -> list[TimelinePhase]:
    """The start's last marks (smoke test's first token, READY), its outcome, and its phases
    (mark, seconds, since the request) for the lifecycle event."""
    start_id = state.scale.start_id if state.scale else None
    if not start_id:
        return []
    extra = [Mark(name="ready", at=now, source="controller: record_ready", seen_at=now)] if outcome == "READY" else []
    first_token = state.smoke.first_token_at if state.smoke else None
    if first_token:
        extra.append(Mark(name="first_token", at=parse_time(first_token), source="smoke test: first completion token"))
    timeline_sources.observe(deps, config.profile, config.pool, start_id)
    record = timeline_sources.finish(deps, config.profile, start_id, outcome, now, error, *extra)
    return (
        [TimelinePhase(mark=name, seconds=seconds, since_request=since) for name, seconds, since in spans(record)]
        if record
        else []
    )


def roll_back(deps: Deps, state: StartState, execution: str) -> Undone:
    """Undo this execution's scale-out (desired 0; ASG 0 when the pool is unused), FAILED, release.

    The ledger session closes at the instance's termination time when the pool is already empty;
    otherwise it stays open (and named on the record) for the stop that finishes the job.
    """
    if state.config is None:
        return Undone(acted=False, detail="nothing was started")
    config = state.config
    reason = state.error_reason()
    recorded = deps.store.get_profile(config.profile)
    now = deps.clock.now()
    holder = deps.store.get_lock(profile_lock(config.profile))
    taken = holder is not None and holder.owner != execution and holder.live(now)
    details = []
    acted = recorded.execution == execution and recorded.phase in (Phase.STARTING, Phase.FAILED) and not taken
    if acted:
        details += scale_to_zero(deps, config)
        # A start that died between recording STARTING and opening its session has none to close.
        session, closed = settle_session(deps, config.profile, execution, "failed", now)
        deps.store.set_phase(
            config.profile, Phase.FAILED, now, execution, last_error=reason, session_id=None if closed else recorded.session_id
        )
        details.append(f"recorded FAILED: {reason}")
        _finish_timeline(deps, config, state, "FAILED", now, reason)
        details += session_note(session, closed)
    elif taken:
        details.append(f"nothing to undo: {holder.owner if holder else ''} holds the lock now")
    else:
        details.append(f"nothing of this execution to undo ({config.profile} is {recorded.phase.value})")
    details.append(release_locks(deps, config, execution))
    return Undone(acted=acted, detail="; ".join(details))
