"""The auto-shutdown sweep: for every READY profile gather what sweep.decide needs, and act on it.

Gathers the recorded state (ready since, lease deadline) and the target group's ALB RequestCount over
the idle window from CloudWatch, asks servingctl.control.sweep.decide, and starts stop_profile under
an idempotent name when it says stop (dry run: reports only). Every decision is published as an
EventBridge event ("Profile auto-stopped" / "Profile kept running").

RequestCount: an ALB publishes it only for periods with requests, so a successful read without
datapoints means zero requests; only a failed read is "unknown" (the sweep then keeps the profile).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict

from servingctl.control import events
from servingctl.control.clock import Clock, SystemClock
from servingctl.control.executions import canonical, execution_name, running_execution
from servingctl.control.settings import Poll
from servingctl.control.sweep import Decision, decide
from servingctl.registry.models import Registry, ServingProfile
from servingctl.store.base import Store
from servingctl.store.models import Phase, ProfileState

METRIC_PERIOD_S = 60


@dataclass
class SweepDeps:
    """What the sweep reads and drives (boto3 clients in Lambda, moto-backed ones in tests)."""

    sfn: Any
    cloudwatch: Any
    events: Any
    store: Store
    registry: Registry
    stop_machine_arn: str
    clock: Clock = field(default_factory=SystemClock)


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
    action: str  # "stop-started", "stop-joined", "stop-running", "would-stop", "kept"
    execution_arn: str | None = None
    requests_in_idle_window: int | None = None
    published: bool = False


def requests_in_window(cloudwatch: Any, spec: ServingProfile, now: datetime, minutes: int) -> int | None:
    """Sum of the target group's RequestCount over the last minutes; None when CloudWatch could not be read."""
    try:
        answer = cloudwatch.get_metric_statistics(
            Namespace="AWS/ApplicationELB", MetricName="RequestCount",
            Dimensions=[
                {"Name": "TargetGroup", "Value": spec.target_group_arn.split(":")[-1]},
                {"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]},
            ],
            StartTime=now - timedelta(minutes=minutes), EndTime=now, Period=METRIC_PERIOD_S, Statistics=["Sum"],
        )
    except (ClientError, BotoCoreError):
        return None
    return int(sum(point.get("Sum", 0.0) for point in answer.get("Datapoints", [])))


def auto_stop_name(profile: str, state: ProfileState) -> str:
    """One stop name per READY session: a repeated sweep joins the stop it started."""
    return execution_name("stop", profile, "auto", state.execution or "", str(state.ready_at))


def _decide(deps: SweepDeps, name: str, state: ProfileState, now: datetime) -> tuple[Decision, int | None]:
    spec = deps.registry.profiles[name]
    requests = requests_in_window(deps.cloudwatch, spec, now, spec.idle.window_minutes) if spec.idle.enabled else None
    ready_since = state.ready_at or state.phase_since or now
    decision = decide(name, spec, now=now, ready_since=ready_since, lease_deadline=state.lease_deadline,
                      requests_in_idle_window=requests)
    return decision, requests


def _act(deps: SweepDeps, name: str, state: ProfileState, poll: Poll | None) -> tuple[str, str]:
    """Start (or join) the stop; a stop someone else already runs is left alone."""
    running = running_execution(deps.sfn, deps.stop_machine_arn, "stop", name)
    own = auto_stop_name(name, state)
    if running is not None:
        return ("stop-joined" if running["name"] == own else "stop-running"), running["executionArn"]
    document: dict[str, Any] = {"profile": name}
    if poll is not None:
        document["poll"] = poll.model_dump()
    answer = deps.sfn.start_execution(stateMachineArn=deps.stop_machine_arn, name=own, input=canonical(document))
    return "stop-started", answer["executionArn"]


def sweep(deps: SweepDeps, *, dry_run: bool = False, poll: Poll | None = None) -> list[Outcome]:
    """Decide for every READY profile; stop those the decision says to stop (unless dry_run)."""
    now = deps.clock.now()
    outcomes = []
    for name in sorted(deps.registry.profiles):
        state = deps.store.get_profile(name)
        if state.phase != Phase.READY:
            continue
        decision, requests = _decide(deps, name, state, now)
        arn: str | None = None
        if not decision.stop:
            action = "kept"
        elif dry_run:
            action = "would-stop"
        else:
            action, arn = _act(deps, name, state, poll)
        outcome = Outcome(**decision.model_dump(), action=action, execution_arn=arn, requests_in_idle_window=requests)
        if not dry_run:
            detail = outcome.model_dump(exclude={"published"}) | {"at": now.isoformat(), "ready_execution": state.execution}
            outcome.published = events.publish(deps.events, events.AUTO_STOPPED if decision.stop else events.KEPT, detail)
        outcomes.append(outcome)
    return outcomes
