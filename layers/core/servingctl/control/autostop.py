"""The auto-shutdown sweep: for every READY profile gather what sweep.decide needs, and act on it.

Gathers the recorded state (ready since, lease deadline, keepalive, a benchmark's hold), the target
group's ALB RequestCount over the idle window from CloudWatch, the model servers' own gauges
(vllm:num_requests_running / num_requests_waiting from /metrics of each target the group has
registered, read at its address: the sweep runs in the VPC and never goes through the ALB, so its
reads are not in RequestCount) and, for a budget, the session's start and
hourly price; asks servingctl.control.sweep.decide, and starts stop_profile under an idempotent name
when it says stop (dry run: reports only), with the sweep's own IAM identity as requested_by. Every
decision is published as an EventBridge event ("Profile auto-stopped" / "Profile kept running"),
and a planned stop within the profile's warning time also as "Profile stopping soon".

RequestCount: an ALB publishes it only for periods with requests, so a successful read without
datapoints means zero requests; only a failed read is "unknown" (the sweep then keeps the profile).
It counts every request the ALB routed to the group, so idle detection holds only while the
controller sends nothing through the ALB after READY (the smoke test's requests come before it).
Gauges: an unreadable /metrics is "unknown" and decides nothing (RequestCount alone decides idle).

Each profile is decided and acted on alone: an exception is logged and reported as that profile's
outcome (action "error"), and the sweep goes on with the others.

Sweeps may run at once (the function has no reserved concurrency by default): two that decide the
same stop start it under the same name and input, which Step Functions answers with one execution;
and each re-reads the record just before starting a stop, leaving a profile whose record moved since
its decision (stopped and started again by someone else meanwhile) to the next sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict

from servingctl.control import events
from servingctl.control.executions import attempt_names, execution_name, running_execution, start_fresh
from servingctl.control.flow import session_spend
from servingctl.control.sweep import Decision, PlannedStop, ServerLoad, decide
from servingctl.costs import PriceCatalog, load_catalog
from servingctl.loadgen.server_metrics import RUNNING, WAITING, parse_prometheus
from servingctl.registry.models import Registry, ServingProfile
from servingctl.shared.clock import Clock, SystemClock
from servingctl.shared.flow_inputs import Poll
from servingctl.store.base import Store
from servingctl.store.models import Phase, ProfileState

if TYPE_CHECKING:
    from types_boto3_cloudwatch import CloudWatchClient
    from types_boto3_elbv2 import ElasticLoadBalancingv2Client

METRIC_PERIOD_S = 60
# The per-replica load ECS service auto scaling tracks (Terraform's serving-profile module names it).
REPLICA_LOAD_NAMESPACE = "servingctl"
REPLICA_LOAD_METRIC = "RequestsPerReplica"
# A model server that does not answer /metrics within this is "unknown" (the sweep has 60 s in all).
GAUGE_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)


@dataclass
class SweepDeps:
    """What the sweep reads and drives (boto3 clients in Lambda, moto-backed ones in tests)."""

    sfn: Any
    cloudwatch: Any
    events: Any
    elbv2: Any
    autoscaling: Any  # the pools' scaling activities: what a session's instances cost so far
    store: Store
    registry: Registry
    stop_machine_arn: str
    clock: Clock = field(default_factory=SystemClock)
    # The sweep's own IAM ARN (STS GetCallerIdentity): requested_by of the stops it starts.
    identity: str = "servingctl-sweep"
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=GAUGE_TIMEOUT_S))
    catalog: Callable[[], PriceCatalog] = load_catalog


class SweepInput(BaseModel):
    """The sweep function's input (the schedule sends {"dry_run": false})."""

    model_config = ConfigDict(extra="forbid", strict=True)

    dry_run: bool = False
    poll: Poll | None = None


class Outcome(BaseModel):
    """One profile's decision and what the sweep did about it."""

    profile: str
    stop: bool
    reason: str
    detail: str
    action: str  # "stop-started", "stop-joined", "stop-running", "changed", "would-stop", "kept", "error"
    execution_arn: str | None = None
    requests_in_idle_window: int | None = None
    active_requests: int | None = None
    next_stop: PlannedStop | None = None
    stopping_soon: bool = False
    requested_by: str | None = None
    published: bool = False


def request_counts(
    cloudwatch: CloudWatchClient, spec: ServingProfile, now: datetime, minutes: int
) -> tuple[int, datetime | None] | None:
    """The target group's RequestCount over the last minutes and the end of the last period with
    requests (None when there was none); None when CloudWatch could not be read."""
    try:
        answer = cloudwatch.get_metric_statistics(
            Namespace="AWS/ApplicationELB",
            MetricName="RequestCount",
            Dimensions=[
                {"Name": "TargetGroup", "Value": spec.target_group_arn.split(":")[-1]},
                {"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]},
            ],
            StartTime=now - timedelta(minutes=minutes),
            EndTime=now,
            Period=METRIC_PERIOD_S,
            Statistics=["Sum"],
        )
    except (ClientError, BotoCoreError):
        return None
    points = answer.get("Datapoints", [])
    busy = [p["Timestamp"] for p in points if p.get("Sum", 0.0) > 0]
    # A datapoint is stamped with its period's start: requests ran until its end (never after now).
    last = min(max(busy) + timedelta(seconds=METRIC_PERIOD_S), now) if busy else None
    return int(sum(point.get("Sum", 0.0) for point in points)), last


def requests_in_window(cloudwatch: CloudWatchClient, spec: ServingProfile, now: datetime, minutes: int) -> int | None:
    """Sum of the target group's RequestCount over the last minutes; None when CloudWatch could not be read."""
    counts = request_counts(cloudwatch, spec, now, minutes)
    return None if counts is None else counts[0]


def target_addresses(elbv2: ElasticLoadBalancingv2Client, spec: ServingProfile) -> list[str] | None:
    """Base URLs of the group's registered targets (draining ones too: their requests still run);
    None when DescribeTargetHealth could not be read."""
    try:
        found = elbv2.describe_target_health(TargetGroupArn=spec.target_group_arn)["TargetHealthDescriptions"]
    except (ClientError, BotoCoreError):
        return None
    return [f"http://{t['Target']['Id']}:{t['Target']['Port']}" for t in found if t["TargetHealth"]["State"] != "unused"]


def server_load(http: httpx.Client, elbv2: ElasticLoadBalancingv2Client, spec: ServingProfile) -> ServerLoad | None:
    """Running and waiting requests summed over the /metrics of the group's registered targets, read
    at their addresses (never through the ALB, whose RequestCount must count clients only); None
    when no target answers."""
    running = waiting = 0.0
    answered = 0
    for base in target_addresses(elbv2, spec) or []:
        try:
            answer = http.get(base + "/metrics")
            answer.raise_for_status()
        except httpx.HTTPError:
            continue
        samples = parse_prometheus(answer.text, frozenset((RUNNING, WAITING)))
        if any(s.name == RUNNING for s in samples):
            answered += 1
            running += sum(s.value for s in samples if s.name == RUNNING)
            waiting += sum(s.value for s in samples if s.name == WAITING)
    return ServerLoad(running=round(running), waiting=round(waiting), replicas=answered) if answered else None


def publish_replica_load(cloudwatch: CloudWatchClient, profile: str, load: ServerLoad, now: datetime) -> bool:
    """Publish (running + waiting) / replicas as servingctl/RequestsPerReplica of the profile, the
    signal its service's target tracking policy follows; False when CloudWatch refused it (the
    sweep's decision does not depend on it)."""
    try:
        cloudwatch.put_metric_data(
            Namespace=REPLICA_LOAD_NAMESPACE,
            MetricData=[
                {
                    "MetricName": REPLICA_LOAD_METRIC,
                    "Dimensions": [{"Name": "Profile", "Value": profile}],
                    "Timestamp": now,
                    "Value": load.active / load.replicas,
                    "Unit": "Count",
                }
            ],
        )
    except (ClientError, BotoCoreError):
        log.exception("replica load of %s not published", profile)
        return False
    return True


def stopping_soon_detail(decision: Decision, now: datetime) -> dict[str, Any]:
    """What the warning says: which stop, when, how many minutes are left, and what answers it."""
    stop = decision.next_stop
    assert stop is not None
    answer = (
        "a hard limit: keepalive does not move it"
        if stop.hard
        else f"servingctl keepalive {decision.profile} --minutes M (or requests running at that time) defers it"
    )
    return {
        "stop_reason": stop.reason,
        "stop_at": stop.at.isoformat(),
        "hard": stop.hard,
        "minutes_left": max(0.0, round((stop.at - now).total_seconds() / 60, 1)),
        "answer": answer,
    }


def auto_stop_parts(state: ProfileState) -> tuple[str, ...]:
    """What names one auto-stop per READY session: a repeated sweep joins the stop it started."""
    return ("auto", state.execution or "", str(state.ready_at))


def auto_stop_name(profile: str, state: ProfileState) -> str:
    """The first name of the READY session's auto-stop (start_fresh moves past closed ones)."""
    return execution_name("stop", profile, *auto_stop_parts(state))


def _session_cost(deps: SweepDeps, name: str, state: ProfileState) -> dict[str, Any]:
    """What the session's budget is judged on, read only for a profile with a budget."""
    if deps.registry.profiles[name].autostop.max_session_usd is None or not state.session_id:
        return {}
    session = deps.store.get_session(name, state.session_id)
    if session is None:
        return {}
    return session_spend(deps.autoscaling, deps.registry, deps.catalog(), session, deps.clock.now())


def _decide(deps: SweepDeps, name: str, state: ProfileState, now: datetime) -> tuple[Decision, int | None]:
    spec = deps.registry.profiles[name]
    counts = request_counts(deps.cloudwatch, spec, now, spec.idle.window_minutes) if spec.idle.enabled else None
    requests, last_request_at = counts if counts is not None else (None, None)
    ready_since = state.ready_at or state.phase_since or now
    load = server_load(deps.http, deps.elbv2, spec)
    if load is not None and spec.max_replicas > 1:
        publish_replica_load(deps.cloudwatch, name, load, now)
    decision = decide(
        name,
        spec,
        now=now,
        ready_since=ready_since,
        lease_deadline=state.lease_deadline,
        requests_in_idle_window=requests,
        last_request_at=last_request_at,
        load=load,
        kept_alive_at=state.kept_alive_at,
        held_by=state.held_by,
        held_until=state.held_until,
        **_session_cost(deps, name, state),
    )
    return decision, requests


def _act(deps: SweepDeps, name: str, state: ProfileState, poll: Poll | None) -> tuple[str, str | None]:
    """Start (or join) the stop; a stop someone else already runs is left alone, and so is a profile
    whose record moved since the decision (action "changed")."""
    # Sweeps may overlap (no reserved concurrency): one that decided on this READY session while
    # another stopped it, and someone started the profile again, must not stop the new session.
    if deps.store.get_profile(name).updated_at != state.updated_at:
        return "changed", None
    running = running_execution(deps.sfn, deps.stop_machine_arn, "stop", name)
    if running is not None:
        own = running["name"] in attempt_names("stop", name, auto_stop_parts(state))
        return ("stop-joined" if own else "stop-running"), running["executionArn"]
    document: dict[str, Any] = {"profile": name, "requested_by": deps.identity}
    if poll is not None:
        document["poll"] = poll.model_dump()
    return "stop-started", start_fresh(deps.sfn, deps.stop_machine_arn, "stop", name, auto_stop_parts(state), document)


def _one(deps: SweepDeps, name: str, now: datetime, dry_run: bool, poll: Poll | None) -> Outcome | None:
    """Decide and act on one profile; None when it is not READY."""
    state = deps.store.get_profile(name)
    if state.phase != Phase.READY:
        return None
    decision, requests = _decide(deps, name, state, now)
    arn: str | None = None
    if not decision.stop:
        action = "kept"
    elif dry_run:
        action = "would-stop"
    else:
        action, arn = _act(deps, name, state, poll)
    outcome = Outcome(
        **decision.model_dump(), action=action, execution_arn=arn, requests_in_idle_window=requests, requested_by=deps.identity
    )
    if not dry_run and action != "changed":  # a moved record: the next sweep decides and announces
        detail = outcome.model_dump(mode="json", exclude={"published"}) | {
            "at": now.isoformat(),
            "ready_execution": state.execution,
        }
        if decision.stopping_soon and decision.next_stop is not None:
            events.publish(deps.events, events.STOPPING_SOON, stopping_soon_detail(decision, now) | detail)
        outcome.published = events.publish(deps.events, events.AUTO_STOPPED if decision.stop else events.KEPT, detail)
    return outcome


def sweep(deps: SweepDeps, *, dry_run: bool = False, poll: Poll | None = None) -> list[Outcome]:
    """Decide for every READY profile; stop those the decision says to stop (unless dry_run). A
    profile whose decision or stop raised is reported with action "error"; the others go on."""
    now = deps.clock.now()
    outcomes = []
    for name in sorted(deps.registry.profiles):
        try:
            outcome = _one(deps, name, now, dry_run, poll)
        except Exception as exc:  # one profile's failure must not leave the others running
            log.exception("sweep of %s failed", name)
            outcome = Outcome(
                profile=name,
                stop=False,
                reason="error",
                detail=f"{type(exc).__name__}: {exc}",
                action="error",
                requested_by=deps.identity,
            )
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes
