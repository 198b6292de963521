"""The reconciler: makes each profile's recorded state and the cloud agree, by stopping it.

A GPU left running by a flow that died (aborted from the console, timed out, a RollBack that failed
itself, a run_benchmark aborted with its child start) is found from what is recorded and what
Step Functions, ECS and Auto Scaling say. A profile is stopped through stop_profile when

- lock-owner-ended: its lock is held by an execution that DescribeExecution (or the status-change
  event) shows closed, or that Step Functions does not know once the lock's lease ran out;
  that owner's locks are released first (conditionally on that owner), so the stop does not wait
  for their lease;
- phase-stuck: it is STARTING or STOPPING and no start or stop of it is running;
- stop-failed: a stop of it failed, timed out or was aborted after its current phase began, and it
  is not STOPPED with nothing running (a stop refused for bad input is not an intent to re-drive);
- capacity-unexplained: its ECS service wants or runs tasks while it is STOPPED or FAILED, or its
  pool's Auto Scaling group has capacity while no profile of the pool is active (reported on the
  pool's first profile);
- session-open: it is FAILED with nothing running and its ledger session still open;
- removed-from-registry: the registry's index no longer lists it while it is not STOPPED or its
  service wants or runs tasks (servingctl.control.known keeps its entry until it is stopped).

Capacity its tags name for a profile or pool neither the registry nor a record describes is
reported as an error (the SweepErrors alarm), never guessed at. Each profile it leaves
alone that is not STOPPED gets the published registry entry on its record (kept for the day the
registry loses it).

Nothing is done while a start or stop of the profile is running: that execution owns the outcome.
ListExecutions and DescribeExecution are eventually consistent (a just-started execution missing, a
just-ended one still RUNNING): only a closed status, which is final, makes an execution dead here;
anything unsure counts as running, so a lagging read delays a repair to the next look, never stops a
live start (see _running).
The stop runs under an idempotent name derived from the reason and its evidence, so the sweep and
the status-change event that find the same fault join one stop; the reason is published as a
"Profile reconciled" event and written to the record (reconciled_at, reconcile_reason).

The record is read first and again before acting: a flow that moved the profile meanwhile makes
this round skip it (action "changed"), and the next sweep looks again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servingctl.control import aws, events
from servingctl.control.deps import Deps
from servingctl.control.executions import execution_status, is_execution_of, running_execution, start_fresh
from servingctl.control.flow import CLOSED_STATUSES, pool_users
from servingctl.control.known import Known, refresh_entry
from servingctl.control.tags import TaggedCapacity
from servingctl.registry.models import Registry
from servingctl.shared.flow_inputs import Poll
from servingctl.store.models import Lock, Phase, ProfileState, pool_lock, profile_lock

Reason = Literal[
    "lock-owner-ended",
    "phase-stuck",
    "stop-failed",
    "capacity-unexplained",
    "session-open",
    "consistent",
    "execution-running",
    "removed-from-registry",
]
CLOSED_UNSUCCESSFUL = ("FAILED", "TIMED_OUT", "ABORTED")
# A stop that failed on its input asked for nothing the reconciler should do again.
INPUT_ERRORS = frozenset({"InvalidInput", "ProfileNotFound"})
# How far back the sweep looks for failed stops of a profile (its current phase bounds it further).
FAILED_STOP_LOOKBACK = timedelta(days=1)
STATUS_CHANGE = "Step Functions Execution Status Change"

log = logging.getLogger(__name__)


@dataclass
class ReconcileDeps:
    """What the reconciler reads and drives: the steps' clients and store, Step Functions, EventBridge."""

    steps: Deps
    sfn: Any
    events: Any
    machines: dict[str, str] = field(default_factory=dict)  # "start" / "stop" -> state machine ARN
    identity: str = "servingctl-sweep"
    # The published registry and the kept copies (steps.registry is known.registry); None: steps.registry alone.
    known: Known | None = None


class Evidence(BaseModel):
    """What was recorded and what the cloud said about one profile, read in that order."""

    model_config = ConfigDict(frozen=True)

    profile: str
    state: ProfileState
    lock_owner: str | None = None
    lock_owner_status: str | None = None
    running: str | None = Field(default=None, description="ARN of a RUNNING start or stop of the profile")
    failed_stop: str | None = Field(default=None, description="a stop of it that closed unsuccessfully after its phase began")
    service_desired: int = 0
    service_tasks: int = Field(default=0, description="running + pending")
    pool_capacity: int = Field(default=0, description="max(ASG desired, live instances) of its pool")
    pool_used_by: list[str] = Field(default_factory=list, description="other profiles active on the pool")
    pool_claimant: bool = Field(default=False, description="first profile of its pool: answers for an orphan pool")
    removed: str | None = Field(default=None, description="why the registry no longer lists it (None: it does)")


class Repair(BaseModel):
    """The reconciler's decision on one profile, and what it did."""

    profile: str
    stop: bool
    reason: Reason | Literal["error"]
    detail: str
    evidence: list[str] = Field(default_factory=list, description="what names the stop: the same fault, the same stop")
    action: str = "none"  # "stop-started", "would-stop", "none", "changed", "error"
    execution_arn: str | None = None
    trigger: str = "sweep"


def decide(seen: Evidence) -> Repair:
    """The rules of the module docstring, first match wins; pure, so every case is a unit test."""
    state, name = seen.state, seen.profile

    def repair(reason: Reason, detail: str, *evidence: str) -> Repair:
        return Repair(
            profile=name,
            stop=reason not in ("consistent", "execution-running"),
            reason=reason,
            detail=detail,
            evidence=[reason, *evidence],
        )

    if seen.running:
        return repair("execution-running", f"{seen.running.rsplit(':', 1)[-1]} is running: it decides what happens")
    # A SUCCEEDED owner released its locks on its way out (ReleaseLock failing fails the execution).
    if seen.lock_owner and seen.lock_owner_status not in ("RUNNING", "SUCCEEDED"):
        return repair(
            "lock-owner-ended",
            f"lock held by {seen.lock_owner.rsplit(':', 1)[-1]}, which is {seen.lock_owner_status}",
            seen.lock_owner,
        )
    since = state.phase_since.isoformat() if state.phase_since else "unknown"
    capacity = seen.service_desired > 0 or seen.service_tasks > 0
    if seen.removed and (state.phase != Phase.STOPPED or capacity):
        return repair(
            "removed-from-registry",
            f"{seen.removed} while {state.phase.value} (service wants {seen.service_desired} task(s), runs {seen.service_tasks})",
            since,
        )
    if state.phase in (Phase.STARTING, Phase.STOPPING):
        return repair(
            "phase-stuck",
            f"{state.phase.value} since {since}, set by "
            f"{(state.execution or 'nobody').rsplit(':', 1)[-1]}, and no start or stop of it is running",
            state.execution or "",
            since,
        )
    orphan_pool = seen.pool_capacity > 0 and not seen.pool_used_by and seen.pool_claimant
    if seen.failed_stop and (state.phase != Phase.STOPPED or capacity or orphan_pool or state.session_id):
        return repair(
            "stop-failed",
            f"stop {seen.failed_stop.rsplit(':', 1)[-1]} did not finish and it is {state.phase.value}",
            seen.failed_stop,
        )
    if state.phase != Phase.READY and capacity:
        return repair(
            "capacity-unexplained",
            f"{state.phase.value} but its service wants {seen.service_desired} task(s) and runs {seen.service_tasks}",
            since,
            str(seen.service_desired),
        )
    if state.phase != Phase.READY and orphan_pool:
        return repair(
            "capacity-unexplained",
            f"its pool keeps {seen.pool_capacity} instance(s) and no profile of the pool is active",
            since,
            f"pool {seen.pool_capacity}",
        )
    if state.phase == Phase.FAILED and state.session_id:
        return repair("session-open", f"FAILED with nothing running and ledger session {state.session_id} open", state.session_id)
    return repair("consistent", f"{state.phase.value} and the cloud agrees")


def _failed_stop(deps: ReconcileDeps, name: str, state: ProfileState, now: datetime) -> str | None:
    """The newest stop of the profile that closed unsuccessfully after its phase began (input errors aside)."""
    machine = deps.machines["stop"]
    since = max(state.phase_since or now - FAILED_STOP_LOOKBACK, now - FAILED_STOP_LOOKBACK)
    found: list[tuple[datetime, str]] = []
    for status in CLOSED_UNSUCCESSFUL:
        for page in deps.sfn.get_paginator("list_executions").paginate(stateMachineArn=machine, statusFilter=status):
            # Newest first: everything after an older one is older too.
            fresh = [e for e in page["executions"] if e["startDate"] >= since]
            found += [(e["startDate"], e["executionArn"]) for e in fresh if is_execution_of(e["name"], "stop", name)]
            if len(fresh) < len(page["executions"]):
                break
    for _, arn in sorted(found, reverse=True):
        if deps.sfn.describe_execution(executionArn=arn).get("error") not in INPUT_ERRORS:
            return arn
    return None


def _running(
    deps: ReconcileDeps,
    name: str,
    state: ProfileState,
    lock: Lock | None,
    owner_status: str | None,
    status_of: Callable[[str], str],
    now: datetime,
) -> str | None:
    """A start or stop of the profile that may be running. ListExecutions and DescribeExecution are
    eventually consistent: a listed RUNNING execution counts unless its own DescribeExecution (or the
    status-change event) shows it closed, a closed status being final; the execution that set the
    phase counts when DescribeExecution says RUNNING though the list has not caught up; the lock's
    owner counts while RUNNING, or while Step Functions does not know it yet and its lease is live."""
    for action in ("start", "stop"):
        listed = running_execution(deps.sfn, deps.machines[action], action, name)
        if listed is not None and status_of(listed["executionArn"]) not in CLOSED_STATUSES:
            return str(listed["executionArn"])
    if state.phase in (Phase.STARTING, Phase.STOPPING) and state.execution and status_of(state.execution) == "RUNNING":
        return state.execution
    if lock is not None and (owner_status == "RUNNING" or (owner_status == "MISSING" and lock.live(now))):
        return lock.owner
    return None


def observe(
    deps: ReconcileDeps, name: str, *, failed_stop: str | None = None, closed: Mapping[str, str] | None = None
) -> Evidence:
    """Read the record, then the executions, then ECS and Auto Scaling (in that order: a flow that
    raises capacity is RUNNING before it does, and records its phase first). closed: statuses already
    known final (a status-change event's), which a lagging read must not contradict."""
    steps, now = deps.steps, deps.steps.clock.now()
    known = dict(closed or {})

    def status_of(arn: str) -> str:
        return known[arn] if arn in known else known.setdefault(arn, execution_status(deps.sfn, arn))

    state = steps.store.get_profile(name)
    lock = steps.store.get_lock(profile_lock(name))
    owner_status = status_of(lock.owner) if lock else None
    running = _running(deps, name, state, lock, owner_status, status_of, now)
    if failed_stop is None and state.phase in (Phase.READY, Phase.FAILED):
        failed_stop = _failed_stop(deps, name, state, now)
    spec = steps.profile(name)
    counts = aws.service_counts(steps.ecs, spec.cluster, spec.service)
    group = aws.describe_asg(steps.autoscaling, steps.pool(spec.pool).asg_name)
    live = [i for i in group.instances if not i.lifecycle.startswith("Terminat")]
    pool_profiles = sorted(steps.registry.profiles_on_pool(spec.pool))
    return Evidence(
        profile=name,
        state=state,
        lock_owner=lock.owner if lock else None,
        lock_owner_status=owner_status,
        running=running,
        failed_stop=failed_stop,
        service_desired=counts.desired,
        service_tasks=counts.running + counts.pending,
        pool_capacity=max(group.desired, len(live)),
        pool_used_by=pool_users(steps, name),
        pool_claimant=pool_profiles[0] == name,
        removed=deps.known.retired[name] if deps.known and name in deps.known.removed else None,
    )


def act(deps: ReconcileDeps, seen: Evidence, repair: Repair, poll: Poll | None = None) -> Repair:
    """Release a dead owner's locks, start the stop (unless the record moved since), record why."""
    steps, now = deps.steps, deps.steps.clock.now()
    if steps.store.get_profile(seen.profile).updated_at != seen.state.updated_at:
        return repair.model_copy(
            update={"action": "changed", "detail": repair.detail + "; the record moved meanwhile: next sweep"}
        )
    if repair.reason == "lock-owner-ended" and seen.lock_owner:
        # Safe: the owner is over, and the delete is conditional on it still being the owner.
        spec = steps.profile(seen.profile)
        steps.store.release_locks([profile_lock(seen.profile), pool_lock(spec.pool)], seen.lock_owner)
    document: dict[str, Any] = {"profile": seen.profile, "requested_by": deps.identity}
    if poll is not None:
        document["poll"] = poll.model_dump()
    arn = start_fresh(deps.sfn, deps.machines["stop"], "stop", seen.profile, tuple(repair.evidence), document)
    done = repair.model_copy(update={"action": "stop-started", "execution_arn": arn})
    steps.store.update_profile(seen.profile, now, reconciled_at=now, reconcile_reason=f"{repair.reason}: {repair.detail}")
    events.publish(
        deps.events, events.RECONCILED, done.model_dump(mode="json") | {"at": now.isoformat(), "requested_by": deps.identity}
    )
    return done


def reconcile(
    deps: ReconcileDeps,
    profiles: list[str] | None = None,
    *,
    trigger: str = "sweep",
    failed_stop: str | None = None,
    dry_run: bool = False,
    poll: Poll | None = None,
    closed: Mapping[str, str] | None = None,
) -> list[Repair]:
    """Observe, decide and act for each profile (all of them by default; dry_run: decide only), each
    on its own: an exception is logged and reported as that profile's repair (action "error").
    closed: execution ARN -> a closed status already known (see observe)."""
    repairs = []
    published = deps.known.published.registry if deps.known else deps.steps.registry
    for name in sorted(profiles if profiles is not None else deps.steps.registry.profiles):
        try:
            seen = observe(deps, name, failed_stop=failed_stop, closed=closed)
            repair = decide(seen).model_copy(update={"trigger": trigger})
            if not repair.stop and not dry_run:
                refresh_entry(published, deps.steps.store, seen.state, deps.steps.clock.now())
            if repair.stop:
                repair = repair.model_copy(update={"action": "would-stop"}) if dry_run else act(deps, seen, repair, poll)
        except Exception as exc:  # one profile's failure must not leave the others running
            log.exception("reconcile of %s failed", name)
            repair = Repair(
                profile=name, stop=False, reason="error", detail=f"{type(exc).__name__}: {exc}", action="error", trigger=trigger
            )
        repairs.append(repair)
    return repairs


def undescribed_capacity(registry: Registry, tagged: TaggedCapacity, trigger: str = "sweep") -> list[Repair]:
    """An error for each service or group whose tags name a profile or pool the registry (with the
    kept copies) does not describe: running capacity nobody can stop through the flows."""
    found = [(f"profile {name}", where) for name, where in tagged.profiles.items() if name not in registry.profiles]
    found += [(f"pool {name}", where) for name, where in tagged.pools.items() if name not in registry.pools]
    return [
        Repair(
            profile=what.split(" ", 1)[1],
            stop=False,
            reason="error",
            action="error",
            trigger=trigger,
            detail=f"{where} is tagged for {what}, which neither the registry nor any record describes: "
            "stop it by hand (service desired 0, group desired and min 0)",
        )
        for what, where in sorted(found)
    ]


class StatusChange(BaseModel):
    """The detail of EventBridge's "Step Functions Execution Status Change" event (the fields used)."""

    model_config = ConfigDict(extra="ignore")

    executionArn: str
    stateMachineArn: str
    name: str
    status: str
    input: str | None = None


def on_status_change(deps: ReconcileDeps, event: dict[str, Any], poll: Poll | None = None) -> list[Repair]:
    """Reconcile the profile of the execution the event is about (its input names it; read by
    DescribeExecution when EventBridge left the input out)."""
    change = StatusChange.model_validate(event.get("detail") or {})
    raw = change.input if change.input is not None else deps.sfn.describe_execution(executionArn=change.executionArn).get("input")
    try:
        profile = json.loads(raw or "{}").get("profile")
    except (ValueError, AttributeError):
        profile = None
    trigger = f"{change.status} {change.name}"
    if not isinstance(profile, str) or profile not in deps.steps.registry.profiles:
        log.warning("status change of %s names no known profile: ignored", change.executionArn)
        return []
    is_stop = change.stateMachineArn == deps.machines["stop"] and change.status in CLOSED_UNSUCCESSFUL
    failed = None
    if is_stop and deps.sfn.describe_execution(executionArn=change.executionArn).get("error") not in INPUT_ERRORS:
        failed = change.executionArn
    # The event's closed status is final: a DescribeExecution or ListExecutions lagging behind it
    # (still RUNNING) must not keep the dead execution's lock for another sweep.
    closed = {change.executionArn: change.status} if change.status in CLOSED_STATUSES else None
    return reconcile(deps, [profile], trigger=trigger, failed_stop=failed, poll=poll, closed=closed)
