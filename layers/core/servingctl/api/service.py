"""What the REST API does, as plain functions over injected boto3 clients, the store and the registry.

Conflict rules (409), decided here and documented in the OpenAPI descriptions:
- start while a stop of the profile runs: 409 (the stop wins; start again once it finished);
- start while another profile holds the pool and allow_shared_pool is false: 409;
- start while a start of the profile runs: 202 with that execution (joined);
- stop while a start runs: 202, the stop preempts the start (its checks see the stop flag and roll back);
- stop while a stop runs: 202 with that execution (joined);
- keepalive of a profile that is not READY: 409;
- start of a READY profile, stop of a STOPPED one (no flow of the profile running): 200 saying so
  ("already READY since ... (lease until ...)"), no execution started.
Execution names are start-<profile>-<token> / stop-<profile>-<token>, the token a hash of the
profile's newest execution of that flow: concurrent calls before a new one began name the same
execution, which Step Functions returns instead of starting a second one (one execution per intent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from servingctl import render
from servingctl.api.models import (
    ExecutionProgress,
    ExecutionRef,
    Instance,
    KeepaliveAnswer,
    KeepaliveRequest,
    Ledger,
    LedgerSession,
    MonthlyTotal,
    PhaseMark,
    ProfileDetail,
    ProfileSummary,
    ServiceEvent,
    StartHistory,
    StartRequest,
    StopRequest,
    WarmPoolCost,
    lower_bound,
)
from servingctl.api.starts import latest_start, start_history
from servingctl.control import aws
from servingctl.control.autostop import request_counts
from servingctl.control.config import limit_problems
from servingctl.control.executions import Action, canonical, execution_name, latest_execution, running_execution
from servingctl.control.flow import own_instances, session_spend
from servingctl.control.sweep import decide
from servingctl.costs import PriceCatalog, SessionCost, monthly_totals, stored_session_cost, volume_monthly_usd
from servingctl.registry.models import Registry, ServingProfile
from servingctl.shared.clock import Clock, SystemClock
from servingctl.store.base import Store
from servingctl.store.models import Phase, ProfileState, Session, iso

EXECUTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
RECENT_SERVICE_EVENTS = 5

# State name -> phase shown to people (the boot phase is split off capacity by the InService mark).
START_PHASES = {
    **dict.fromkeys(("PrepareStart", "AcquireLock", "CheckCurrent", "BranchOnCurrent", "GuardPool", "ScaleOut"), "prepare"),
    **dict.fromkeys(("CheckCapacity", "BranchOnCapacity", "WaitForCapacity"), "capacity"),
    **dict.fromkeys(("CheckTask", "BranchOnTask", "WaitForTask"), "task"),
    **dict.fromkeys(("CheckTargets", "BranchOnTargets", "WaitForTargets", "RouteToModel"), "health"),
    "RunSmokeTest": "smoke",
    **dict.fromkeys(("RecordReady", "ReleaseLock"), "ready"),
    **dict.fromkeys(("RollBack", "FailStart"), "failed"),
}
STOP_PHASES = {
    **dict.fromkeys(("PrepareStop", "BranchOnStopped", "RequestStop"), "prepare"),
    **dict.fromkeys(("AcquireLock", "BranchOnLock", "WaitForLock"), "lock"),
    **dict.fromkeys(("ScaleInService", "CheckDrained", "BranchOnDrained", "WaitForDrain"), "drain"),
    **dict.fromkeys(("GuardPool", "BranchOnPool", "ReleaseCapacity"), "release"),
    **dict.fromkeys(("CheckTerminated", "BranchOnTerminated", "WaitForTermination"), "terminate"),
    **dict.fromkeys(("AnswerStopped", "CloseSession", "ReleaseLock"), "stopped"),
    **dict.fromkeys(("ForceRelease", "FailStop"), "failed"),
}
# Check states whose output carries {ready, wait_s, detail, progress} under this key of the state.
CHECK_KEYS = {
    "CheckCapacity": "capacity",
    "CheckTask": "task",
    "CheckTargets": "targets",
    "AcquireLock": "lock",
    "CheckDrained": "drain",
    "CheckTerminated": "termination",
}


class ApiError(Exception):
    """An answer other than success; status and error name come from the subclass."""

    status = 500
    error = "Error"

    def __init__(self, message: str, field: str | None = None, fields: list[str] | None = None) -> None:
        super().__init__(message)
        # fields: every input at fault with its location (body.x, query.y); field alone when one is.
        self.message, self.field = message, field
        self.fields = fields if fields is not None else [field] if field else []


class BadRequest(ApiError):
    """400: the input is wrong; the message names the field and the allowed values."""

    status, error = 400, "BadRequest"


class NotFound(ApiError):
    """404: no such profile or execution."""

    status, error = 404, "NotFound"


class Conflict(ApiError):
    """409: a conflicting operation is running."""

    status, error = 409, "Conflict"


class RegistryUnavailable(ApiError):
    """503: a registry parameter is missing or malformed; the message names it and the fields at fault."""

    status, error = 503, "RegistryUnavailable"


@dataclass
class ApiDeps:
    """What the API reads and drives (boto3 clients in Lambda, moto-backed ones in tests)."""

    sfn: Any
    ecs: Any
    autoscaling: Any
    elbv2: Any
    store: Store
    registry: Registry
    catalog: PriceCatalog
    start_machine_arn: str
    stop_machine_arn: str
    clock: Clock = field(default_factory=SystemClock)
    # The benchmark routes (servingctl.api.benchmarks): runs store, run_benchmark, the records bucket.
    runs: Any = None
    bench_machine_arn: str = ""
    s3: Any = None
    records_bucket: str = ""
    bench_ecs: bool = False  # the ECS benchmark task is deployed (long scenarios allowed)
    # GET /profiles/{name} forecasts an idle stop from the ALB's RequestCount (None: no idle forecast).
    cloudwatch: Any = None
    # Profiles known only from the copy their record keeps (servingctl.control.known), with why.
    retired: dict[str, str] = field(default_factory=dict)

    def machine(self, action: Action) -> str:
        """The state machine ARN of a start or a stop."""
        return self.start_machine_arn if action == "start" else self.stop_machine_arn


def profile_spec(deps: ApiDeps, name: str) -> ServingProfile:
    """The registry's profile, or NotFound listing the known ones."""
    if name not in deps.registry.profiles:
        raise NotFound(f"unknown profile {name!r}; known profiles: {', '.join(sorted(deps.registry.profiles))}", "path.name")
    return deps.registry.profiles[name]


def _forecast(deps: ApiDeps, name: str, state: ProfileState, with_requests: bool = False) -> dict[str, Any]:
    """The sweep's own decision about a READY profile, without the gauges (only the sweep in the VPC
    reads them): the next planned stop and whether it is within the warning time."""
    if state.phase != Phase.READY:
        return {}
    spec, now = deps.registry.profiles[name], deps.clock.now()
    counts = None
    if with_requests and deps.cloudwatch is not None and spec.idle.enabled:
        counts = request_counts(deps.cloudwatch, spec, now, spec.idle.window_minutes)
    observed: dict[str, Any] = {}
    session = deps.store.get_session(name, state.session_id) if spec.autostop.max_session_usd and state.session_id else None
    if session is not None:
        observed = session_spend(deps.autoscaling, deps.registry, deps.catalog, session, now)
    decision = decide(
        name,
        spec,
        now=now,
        ready_since=state.ready_at or state.phase_since or now,
        lease_deadline=state.lease_deadline,
        requests_in_idle_window=counts[0] if counts else None,
        last_request_at=counts[1] if counts else None,
        kept_alive_at=state.kept_alive_at,
        held_by=state.held_by,
        held_until=state.held_until,
        **observed,
    )
    return {"next_stop": decision.next_stop, "stopping_soon": decision.stopping_soon}


def _summary(deps: ApiDeps, name: str, state: ProfileState, with_requests: bool = False) -> ProfileSummary:
    spec = deps.registry.profiles[name]
    pool = deps.registry.pools[spec.pool]
    price = deps.catalog.instance(deps.registry.region, pool.price_key or pool.instance_type)
    return ProfileSummary(
        name=name,
        phase=state.phase,
        pool=spec.pool,
        instance_type=pool.instance_type,
        model=spec.model,
        execution=state.execution,
        ready_at=state.ready_at,
        lease_deadline=state.lease_deadline,
        last_error=state.last_error,
        endpoint_url=spec.endpoint_url,
        routing_header=f"{spec.routing_header.name}: {spec.routing_header.value}",
        hourly_usd=price.hourly_usd if price else None,
        started_by=state.started_by,
        stopped_by=state.stopped_by,
        kept_alive_by=state.kept_alive_by,
        held_by=state.held_by,
        held_until=state.held_until,
        reconcile_reason=state.reconcile_reason,
        reconciled_at=state.reconciled_at,
        retired=deps.retired.get(name),
        wake_on_request=spec.wake_on_request,
        no_wake=state.no_wake,
        **_forecast(deps, name, state, with_requests),
    )


def _not_retired(deps: ApiDeps, name: str, what: str) -> None:
    """409 for a profile the registry no longer describes: it can only be stopped."""
    if name in deps.retired:
        raise Conflict(f"{name} cannot be {what}: {deps.retired[name]}; it can only be stopped (servingctl stop {name})")


def list_profiles(deps: ApiDeps) -> list[ProfileSummary]:
    """Every registry profile with its recorded phase (never-started ones are STOPPED), and every
    profile the registry lost that is not stopped yet."""
    return [_summary(deps, name, deps.store.get_profile(name)) for name in sorted(deps.registry.profiles)]


def get_profile(deps: ApiDeps, name: str) -> ProfileDetail:
    """One profile: recorded state, ECS counts and events, pool instances, target health, accrued cost."""
    spec = profile_spec(deps, name)
    pool = deps.registry.pools[spec.pool]
    state = deps.store.get_profile(name)
    found = deps.ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"]
    service = found[0] if found else {}
    group = aws.describe_asg(deps.autoscaling, pool.asg_name)
    now = deps.clock.now()
    session = deps.store.get_session(name, state.session_id) if state.session_id else None
    cost = billed(deps, session, now) if session is not None and session.open else None
    summary = _summary(deps, name, state, with_requests=True).model_dump()
    if cost is not None:
        # The open session's type and price: an alternate when the start fell back to one.
        summary["hourly_usd"], summary["instance_type"] = cost.hourly_usd, cost.instance_type
    warm = aws.warm_instances(deps.autoscaling, pool.asg_name) if pool.warm_pool else ()
    return ProfileDetail(
        **summary,
        desired_count=service.get("desiredCount", 0),
        running_count=service.get("runningCount", 0),
        pending_count=service.get("pendingCount", 0),
        instances=[Instance(instance_id=i.instance_id, lifecycle=i.lifecycle, protected=i.protected) for i in group.instances],
        target_health=aws.target_states(deps.elbv2, spec.target_group_arn),
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        service_events=[
            ServiceEvent(at=e.get("createdAt"), message=e.get("message", ""))
            for e in service.get("events", [])[:RECENT_SERVICE_EVENTS]
        ],
        uptime_s=round(cost.uptime_hours * 3600, 3) if cost else None,
        accrued_cost_usd=round(cost.cost_usd, 4) if cost and cost.cost_usd is not None else None,
        phase_seconds=state.phase_seconds,
        stop_requested=state.stop_requested(now),
        warm_instances=[Instance(instance_id=i.instance_id, lifecycle=i.lifecycle, protected=i.protected) for i in warm],
        warm_start=state.warm_start,
        capacity_note=state.capacity_note,
        start=latest_start(deps.store, name, now),
    )


def starts(deps: ApiDeps, name: str, limit: int) -> StartHistory:
    """The profile's latest starts with their timelines and per-phase p50/p90."""
    profile_spec(deps, name)
    return start_history(deps.store, name, limit, deps.clock.now())


# ---- starting and stopping ---------------------------------------------------------------------
def intent_name(action: Action, profile: str, latest: Mapping[str, Any] | None, salt: str = "") -> str:
    """The execution name of the next start or stop of the profile: derived from its newest
    execution of that flow, so every request made before a new one began names the same execution
    (Step Functions answers a repeated StartExecution with it). Not from the profile record, which
    a stop's flag or a start's probe rewrites while requests race."""
    return execution_name(action, profile, latest["executionArn"] if latest else "", salt)


def _ref(execution: Mapping[str, Any], action: Action, profile: str, joined: bool) -> ExecutionRef:
    arn = execution["executionArn"]
    return ExecutionRef(
        execution_arn=arn,
        execution_id=arn.rsplit(":", 1)[-1],
        profile=profile,
        action=action,
        joined=joined,
        started_at=execution.get("startDate"),
    )


def launch(deps: ApiDeps, action: Action, profile: str, execution_input: dict[str, Any]) -> ExecutionRef:
    """Start the flow under its intent name, or join the profile's running one."""
    # One read decides both: the newest execution running means join it, else it names the next.
    latest = latest_execution(deps.sfn, deps.machine(action), action, profile)
    if latest is not None and latest["status"] == "RUNNING":
        return _ref(latest, action, profile, joined=True)
    document = canonical(execution_input)
    name = intent_name(action, profile, latest)
    try:
        answer = deps.sfn.start_execution(stateMachineArn=deps.machine(action), name=name, input=document)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
            raise
        # A concurrent request started it with another input (join it), or it already finished
        # (a fresh name: this request is a new intent).
        running = running_execution(deps.sfn, deps.machine(action), action, profile)
        if running is not None:
            return _ref(running, action, profile, joined=True)
        name = intent_name(action, profile, None, salt=iso(deps.clock.now()) or "")
        answer = deps.sfn.start_execution(stateMachineArn=deps.machine(action), name=name, input=document)
    return _ref(answer, action, profile, joined=False)


def _already(deps: ApiDeps, action: Action, name: str) -> ExecutionRef | None:
    """The answer to a start of a READY profile or a stop of a STOPPED one when no flow of the
    profile runs: nothing to do, said with since when and the lease (None: run the flow)."""
    state = deps.store.get_profile(name)
    if state.phase != (Phase.READY if action == "start" else Phase.STOPPED):
        return None
    if any(running_execution(deps.sfn, deps.machine(a), a, name) is not None for a in ("start", "stop")):
        return None
    since = (state.ready_at if action == "start" else state.stopped_at) or state.phase_since
    when = f" since {render.when(since)}" if since else ""
    lease = f" (lease until {render.when(state.lease_deadline)})" if action == "start" and state.lease_deadline else ""
    hint = "; keepalive extends the lease" if action == "start" else ""
    arn = state.execution
    return ExecutionRef(
        execution_arn=arn,
        execution_id=arn.rsplit(":", 1)[-1] if arn else None,
        profile=name,
        action=action,
        joined=False,
        already=True,
        phase=state.phase,
        since=since,
        lease_deadline=state.lease_deadline if action == "start" else None,
        message=f"{name} is already {state.phase.value}{when}{lease}: no new execution{hint}",
    )


def _pool_holders(deps: ApiDeps, profile: str) -> list[str]:
    spec = deps.registry.profiles[profile]
    holders = []
    for other in deps.registry.profiles_on_pool(spec.pool):
        phase = deps.store.get_profile(other).phase
        if other != profile and phase in (Phase.STARTING, Phase.READY, Phase.STOPPING):
            holders.append(f"{other} ({phase.value})")
    return holders


def _check_limits(name: str, spec: ServingProfile, body: StartRequest | StopRequest) -> None:
    """400 naming each poll setting or deadline past the profile's registry limits, with the range."""
    deadlines = body.deadlines.model_dump() if body.deadlines is not None else {}
    problems = limit_problems(name, spec, body.poll, deadlines)
    if problems:
        fields = ["body." + problem.split(":", 1)[0] for problem in problems]
        raise BadRequest("invalid request: " + "; ".join(problems), fields[0] if len(fields) == 1 else None, fields)


def start_profile(deps: ApiDeps, name: str, body: StartRequest, caller: str | None = None) -> ExecutionRef:
    """Validate, refuse conflicts (409), then start or join start_profile."""
    spec = profile_spec(deps, name)
    _not_retired(deps, name, "started")
    _check_limits(name, spec, body)
    if body.lease_minutes is not None and body.lease_minutes > spec.max_lease_minutes:
        raise BadRequest(
            f"lease_minutes: must be between {lower_bound(StartRequest, 'lease_minutes')} and {spec.max_lease_minutes} minutes "
            f"(the max_lease_minutes of {name}); got {body.lease_minutes}",
            "body.lease_minutes",
        )
    stopping = running_execution(deps.sfn, deps.stop_machine_arn, "stop", name)
    if stopping is not None:
        raise Conflict(f"{name} is being stopped by {stopping['name']}; start it again once that finished")
    holders = _pool_holders(deps, name)
    if holders and not body.allow_shared_pool:
        raise Conflict(
            f"pool {spec.pool} is held by {', '.join(holders)}; pass allow_shared_pool=true to share it",
            "body.allow_shared_pool",
        )
    already = _already(deps, "start", name)
    if already is not None:
        return already
    execution_input: dict[str, Any] = {"profile": name, "allow_shared_pool": body.allow_shared_pool}
    if caller:
        execution_input["requested_by"] = caller
    if body.lease_minutes is not None:
        execution_input["lease_minutes"] = body.lease_minutes
    if body.poll is not None:
        execution_input["poll"] = body.poll.model_dump()
    if body.deadlines is not None:
        execution_input["deadlines"] = body.deadlines.model_dump(exclude_none=True)
    return launch(deps, "start", name, execution_input)


def stop_profile(deps: ApiDeps, name: str, body: StopRequest, caller: str | None = None) -> ExecutionRef:
    """Start or join stop_profile (a running start is preempted by the flow's stop flag); no_wake is
    kept on the record (by the flow, or here when the profile is already STOPPED)."""
    _check_limits(name, profile_spec(deps, name), body)
    already = _already(deps, "stop", name)
    if already is not None:
        if body.no_wake:
            deps.store.update_profile(name, deps.clock.now(), no_wake=True, stopped_by=caller)
            already.message = f"{already.message}; requests no longer wake it until the next start"
        return already
    execution_input: dict[str, Any] = {"profile": name}
    if body.no_wake:
        execution_input["no_wake"] = True
    if caller:
        execution_input["requested_by"] = caller
    if body.poll is not None:
        execution_input["poll"] = body.poll.model_dump()
    if body.deadlines is not None:
        execution_input["deadlines"] = body.deadlines.model_dump()
    return launch(deps, "stop", name, execution_input)


KEEPALIVE_ATTEMPTS = 3


def keepalive(deps: ApiDeps, name: str, body: KeepaliveRequest, caller: str | None = None) -> KeepaliveAnswer:
    """Set a READY profile's lease to now + minutes, or keep it when it already ends later (said in
    the answer); one conditional write on READY and the lease just read, so it never revives a
    stopping profile nor shortens a concurrent longer keepalive."""
    spec = profile_spec(deps, name)
    _not_retired(deps, name, "kept alive")
    minutes = body.minutes if body.minutes is not None else spec.default_lease_minutes
    if minutes > spec.max_lease_minutes:
        raise BadRequest(
            f"minutes: must be between {lower_bound(KeepaliveRequest, 'minutes')} and {spec.max_lease_minutes} minutes "
            f"(the max_lease_minutes of {name}); got {minutes}",
            "body.minutes",
        )
    for _ in range(KEEPALIVE_ATTEMPTS):
        state = deps.store.get_profile(name)
        if state.phase != Phase.READY:
            raise Conflict(f"{name} is {state.phase.value}: only a READY profile has a lease to extend")
        now = deps.clock.now()
        requested = now + timedelta(minutes=minutes)
        previous = state.lease_deadline
        extended = previous is None or requested > previous
        deadline = requested if extended else previous
        updated = deps.store.update_profile_if(
            name,
            now,
            {"phase": Phase.READY, "lease_deadline": previous},
            lease_deadline=deadline,
            kept_alive_by=caller,
            kept_alive_at=now,
        )
        if updated is not None:
            break
    else:
        raise Conflict(f"{name}: its record kept changing during the keepalive; try again")
    summary = _summary(deps, name, updated)
    if extended or previous is None:
        message = f"{name}: lease now ends at {render.when(deadline)} ({minutes} min from now)" + (
            f"; it ended at {render.when(previous)}" if previous else ""
        )
    else:
        left = int((previous - now).total_seconds() // 60)
        message = (
            f"{name}: lease already ends at {render.when(previous)} ({left} min from now), "
            f"later than now + {minutes} min: kept, not shortened"
        )
    stop = summary.next_stop
    if stop is not None and stop.hard and deadline is not None and stop.at < deadline:
        message += f"; a hard limit stops it earlier: {stop.detail}"
    return KeepaliveAnswer(
        **summary.model_dump(),
        extended=extended,
        previous_lease_deadline=previous,
        requested_lease_deadline=requested,
        message=message,
    )


# ---- progress -----------------------------------------------------------------------------------
def execution_arn(deps: ApiDeps, execution_id: str) -> tuple[str, Action]:
    """The ARN and flow of an execution given by name (start-.../stop-...) or by ARN."""
    action: Action
    if execution_id.startswith("arn:"):
        machine = execution_id.replace(":execution:", ":stateMachine:").rsplit(":", 1)[0]
        for action in ("start", "stop"):
            if machine == deps.machine(action):
                return execution_id, action
        raise NotFound(f"execution {execution_id} does not belong to the start or stop state machine", "path.execution_id")
    if not EXECUTION_NAME.match(execution_id):
        raise BadRequest("execution_id: an execution name (letters, digits, - and _, at most 80) or ARN", "path.execution_id")
    if execution_id.startswith("start-"):
        action = "start"
    elif execution_id.startswith("stop-"):
        action = "stop"
    else:
        raise NotFound(f"no execution {execution_id!r}: names begin with start- or stop-", "path.execution_id")
    machine = deps.machine(action)
    return machine.replace(":stateMachine:", ":execution:") + ":" + execution_id, action


def _history(deps: ApiDeps, arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in deps.sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events.extend(page["events"])
    return events


def _marks(history: list[dict[str, Any]], table: dict[str, str]) -> tuple[list[tuple[str, datetime]], str | None]:
    """(phase, entered at) in order, with boot split off capacity; and the last check's detail."""
    marks: list[tuple[str, datetime]] = []
    detail: str | None = None
    in_service_at: datetime | None = None
    for event in history:
        entered = event.get("stateEnteredEventDetails")
        if entered:
            phase = table.get(entered["name"])
            if phase and (not marks or marks[-1][0] != phase) and not (phase == "capacity" and marks and marks[-1][0] == "boot"):
                marks.append((phase, event["timestamp"]))
        exited = event.get("stateExitedEventDetails")
        if exited and exited["name"] in CHECK_KEYS:
            try:
                check = json.loads(exited.get("output") or "{}").get(CHECK_KEYS[exited["name"]]) or {}
            except ValueError:
                check = {}
            detail = check.get("detail", detail)
            seen = ((check.get("progress") or {}).get("marks") or {}).get("in_service_at")
            if exited["name"] == "CheckCapacity" and seen and in_service_at is None:
                in_service_at = datetime.fromisoformat(seen)
                if marks and marks[-1][0] == "capacity":
                    marks.append(("boot", max(in_service_at, marks[-1][1])))
    return marks, detail


def execution_progress(deps: ApiDeps, execution_id: str) -> ExecutionProgress:
    """Status, current phase and time per phase of a start or stop execution."""
    arn, action = execution_arn(deps, execution_id)
    try:
        described = deps.sfn.describe_execution(executionArn=arn)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("ExecutionDoesNotExist", "InvalidArn"):
            raise NotFound(f"no execution {execution_id!r}", "path.execution_id") from None
        raise
    try:
        profile = json.loads(described.get("input") or "{}").get("profile")
    except ValueError:
        profile = None
    marks, detail = _marks(_history(deps, arn), START_PHASES if action == "start" else STOP_PHASES)
    status = described["status"]
    started, stopped = described["startDate"], described.get("stopDate")
    end = stopped or deps.clock.now()
    phases = [
        PhaseMark(
            name=name, started_at=at, elapsed_s=round(((marks[i + 1][1] if i + 1 < len(marks) else end) - at).total_seconds(), 3)
        )
        for i, (name, at) in enumerate(marks)
    ]
    phase = marks[-1][0] if marks else "prepare"
    if status == "SUCCEEDED":
        phase = "ready" if action == "start" else "stopped"
    elif status != "RUNNING":
        phase = "failed"
    return ExecutionProgress(
        execution_arn=arn,
        execution_id=arn.rsplit(":", 1)[-1],
        action=action,
        profile=profile,
        status=status,
        phase=phase,
        phases=phases,
        started_at=started,
        stopped_at=stopped,
        elapsed_s=round((end - started).total_seconds(), 3),
        error=described.get("error"),
        cause=_reason(described.get("cause")),
        detail=detail,
    )


def _reason(cause: str | None) -> str | None:
    """A Lambda error's message out of its JSON cause (plain text stays as it is)."""
    if not cause:
        return cause
    try:
        parsed = json.loads(cause)
    except ValueError:
        return cause
    return str(parsed.get("errorMessage", cause)) if isinstance(parsed, dict) else cause


# ---- ledger -------------------------------------------------------------------------------------
def ledger(deps: ApiDeps, profile: str | None = None) -> Ledger:
    """Every session (or one profile's) with its cost, and the totals per profile per month."""
    if profile is not None:
        profile_spec(deps, profile)
    names = [profile] if profile is not None else sorted(deps.registry.profiles)
    now = deps.clock.now()
    rows, costs = [], []
    for name in names:
        for s in deps.store.list_sessions(name):
            cost = billed(deps, s, now)
            costs.append(cost)
            rows.append(
                LedgerSession(
                    profile=name,
                    session_id=s.session_id,
                    instance_type=s.instance_type,
                    started_at=s.started_at,
                    stopped_at=s.stopped_at,
                    open=s.open,
                    uptime_hours=round(cost.uptime_hours, 6),
                    instances=cost.instances,
                    instance_hours=round(cost.instance_hours, 6),
                    hourly_usd=cost.hourly_usd,
                    cost_usd=None if cost.cost_usd is None else round(cost.cost_usd, 4),
                    close_reason=s.close_reason,
                )
            )
    monthly = [
        MonthlyTotal(
            profile=p,
            month=m,
            uptime_hours=round(t["uptime_hours"] or 0.0, 6),
            cost_usd=None if t["cost_usd"] is None else round(t["cost_usd"], 4),
        )
        for (p, m), t in sorted(monthly_totals(costs).items())
    ]
    total = None if any(c.cost_usd is None for c in costs) else round(sum(c.cost_usd or 0.0 for c in costs), 4)
    return Ledger(sessions=rows, monthly=monthly, total_cost_usd=total, warm_pools=warm_pool_costs(deps))


def billed(deps: ApiDeps, session: Session, now: datetime) -> SessionCost:
    """A session's cost, each instance for its own time: an open one's instances as its pool's
    scaling activities list them now, a closed one's as it stored them."""
    live = own_instances(deps.autoscaling, deps.registry, session) if session.open else []
    return stored_session_cost(deps.catalog, deps.registry.region, session, now, live)


def warm_pool_costs(deps: ApiDeps) -> list[WarmPoolCost]:
    """Every pool with a warm pool: its instances now and their volumes' standing cost a month."""
    found = []
    for name, pool in sorted(deps.registry.pools.items()):
        if pool.warm_pool is None or pool.volume is None:
            continue
        count = len(aws.warm_instances(deps.autoscaling, pool.asg_name))
        each = volume_monthly_usd(deps.catalog, deps.registry.region, pool.volume)
        found.append(
            WarmPoolCost(
                pool=name,
                instances=count,
                volume_gib=pool.volume.size_gib,
                volume_monthly_usd=None if each is None else round(each, 2),
                standing_monthly_usd=None if each is None else round(count * each, 2),
            )
        )
    return found
