"""Request and response bodies of the REST API (pydantic; the OpenAPI document is generated from them)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servingctl.control.sweep import PlannedStop
from servingctl.runs.matrix import MAX_UPLOAD_BYTES
from servingctl.shared.flow_inputs import Poll, StartDeadlines, StopDeadlines
from servingctl.store.models import Phase


def lower_bound(model: type[BaseModel], name: str) -> int:
    """A field's declared lower bound (ge): the API's messages and the CLI's checks never repeat the number."""
    return next(int(m.ge) for m in model.model_fields[name].metadata if getattr(m, "ge", None) is not None)


class _Body(BaseModel):
    # strict: "30" is not 30 and true is not 1 (no coercion); extra: an unknown field is refused by name.
    model_config = ConfigDict(extra="forbid", strict=True)


class StartRequest(_Body):
    """POST /profiles/{name}/start."""

    allow_shared_pool: bool = Field(default=False, description="start even when another profile holds the pool")
    lease_minutes: int | None = Field(
        default=None, ge=5, description="minutes until the sweep may stop it; at most the profile's max_lease_minutes"
    )
    poll: Poll | None = Field(default=None, description="wait-loop pacing of the flow (default 15 s, x1.5, max 60 s)")
    deadlines: StartDeadlines | None = Field(default=None, description="seconds per wait loop (registry defaults)")


class StopRequest(_Body):
    """POST /profiles/{name}/stop."""

    poll: Poll | None = Field(default=None, description="wait-loop pacing of the flow")
    deadlines: StopDeadlines | None = Field(default=None, description="seconds per wait loop")
    no_wake: bool = Field(
        default=False, description="a wake-on-request profile stays stopped: requests do not wake it until the next start"
    )


class KeepaliveRequest(_Body):
    """POST /profiles/{name}/keepalive."""

    minutes: int | None = Field(default=None, ge=1, description="lease from now; the profile's default_lease_minutes when absent")


class CancelRequest(_Body):
    """POST /benchmarks/{run_id}/cancel: no fields (an unknown one is refused by name)."""


class DatasetUploadRequest(_Body):
    """POST /benchmarks/{run_id}/dataset: the prompts about to be uploaded for a run not started yet."""

    size_bytes: int = Field(ge=1, le=MAX_UPLOAD_BYTES, description="the JSONL's size: the upload must be exactly this long")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex sha256 of the JSONL: S3 refuses other bytes")


class ErrorBody(BaseModel):
    """Every 4xx answer: what was wrong, and the field when one input was at fault."""

    status: int
    error: str = Field(description="BadRequest, NotFound or Conflict")
    message: str
    field: str | None = Field(default=None, description="the input at fault (body.lease_minutes, path.name, ...)")
    fields: list[str] = Field(
        default_factory=list, description="every input at fault, each with its location: body, query, path or header"
    )


class ExecutionRef(BaseModel):
    """A start or stop execution the API started or joined (202), or the answer that there is
    nothing to do (200: start on a READY profile, stop on a STOPPED one)."""

    execution_arn: str | None = Field(description="the execution started or joined; when already, the one that set the phase")
    execution_id: str | None = Field(description="the execution name: GET /executions/{execution_id}")
    profile: str
    action: Literal["start", "stop"]
    joined: bool = Field(description="true when an execution already running for the profile was returned")
    started_at: datetime | None = None
    already: bool = Field(
        default=False, description="true when the profile was already READY (start) or STOPPED (stop): no execution was started"
    )
    phase: Phase | None = Field(default=None, description="the recorded phase, when already")
    since: datetime | None = Field(default=None, description="when the profile became READY or STOPPED, when already")
    lease_deadline: datetime | None = Field(default=None, description="the lease of a READY profile, when already")
    message: str | None = Field(default=None, description="what happened, for people")


class Instance(BaseModel):
    """An instance of the profile's compute pool."""

    instance_id: str
    lifecycle: str
    protected: bool


class ServiceEvent(BaseModel):
    """One of the ECS service's recent events."""

    at: datetime | None
    message: str


class ProfileSummary(BaseModel):
    """A profile as GET /profiles lists it (from the registry and the store: no AWS describe calls)."""

    name: str
    phase: Phase
    pool: str
    instance_type: str
    model: str
    execution: str | None = None
    ready_at: datetime | None = None
    lease_deadline: datetime | None = None
    last_error: str | None = None
    endpoint_url: str = Field(description="the internal ALB's URL: reachable from inside the VPC only")
    routing_header: str = Field(description="the header the ALB routes to this profile by, e.g. X-LLM-Profile: NAME")
    hourly_usd: float | None = Field(
        default=None,
        description="hourly price of the instance (the price catalog's; an open session's own price in GET /profiles/{name})",
    )
    started_by: str | None = Field(default=None, description="IAM ARN of who asked for the last start")
    stopped_by: str | None = Field(
        default=None, description="IAM ARN of who asked for the last stop (the sweep's role for its stops)"
    )
    kept_alive_by: str | None = Field(default=None, description="IAM ARN of the last keepalive's caller")
    held_by: str | None = Field(default=None, description="benchmark run holding the profile (the sweep's soft stops wait)")
    held_until: datetime | None = None
    reconcile_reason: str | None = Field(
        default=None, description="why the reconciler last stopped it (reason: detail), e.g. a lock held by an aborted start"
    )
    reconciled_at: datetime | None = None
    wake_on_request: bool = Field(
        default=False, description="while not READY, a request wakes it (503 with Retry-After meanwhile)"
    )
    no_wake: bool = Field(default=False, description="its last stop asked that requests not wake it (stop --no-wake)")
    retired: str | None = Field(
        default=None,
        description="why the registry no longer describes it (e.g. removed from the registry): it is "
        "shown from the copy the controller keeps until it is stopped, and can be stopped, not started",
    )
    next_stop: PlannedStop | None = Field(
        default=None, description="READY only: the earliest stop the sweep is headed for (lease, schedule, idle, hard limits)"
    )
    stopping_soon: bool = Field(default=False, description="next_stop is within the profile's autostop.warning_minutes")


class TimelinePhase(BaseModel):
    """One phase of a start: the mark that ends it, how long it took and what past starts took."""

    mark: str = Field(description="e.g. instance_launched, pull_stopped, vllm_weights_loaded, target_healthy, ready")
    label: str = Field(description="the phase that ends at the mark, in words")
    at: datetime
    seconds: float = Field(description="from the previous mark reached to this one")
    since_request_s: float
    source: str = Field(description="where the time comes from (EC2, ECS, CloudWatch Logs, the ALB, the controller)")
    overhead_s: float | None = Field(default=None, description="from the mark to the controller recording it")
    p50_s: float | None = Field(default=None, description="the phase's median over the profile's past READY starts")
    p90_s: float | None = None


class StartTimeline(BaseModel):
    """One start of a profile as its timeline: the phases passed, and what it waits for now."""

    start_id: str
    execution: str
    outcome: str = Field(description="STARTING, READY or FAILED")
    requested_at: datetime
    ended_at: datetime | None = None
    error: str | None = None
    phases: list[TimelinePhase]
    waiting_for: str | None = Field(default=None, description="the phase in progress (STARTING only)")
    waiting_expected_at: datetime | None = Field(default=None, description="when past starts (p50) ended that phase")
    expected_ready_at: datetime | None = Field(default=None, description="when past starts (p50) say READY comes")
    past_starts: int = Field(default=0, description="READY starts before this one the expectations come from")


class StartHistory(BaseModel):
    """GET /profiles/{name}/starts: the latest starts, oldest first, with per-phase p50 and p90."""

    profile: str
    starts: list[StartTimeline]
    p50_s: dict[str, float] = Field(default_factory=dict, description="mark -> median seconds of its phase (READY starts)")
    p90_s: dict[str, float] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict, description="mark -> the phase's words")


class ProfileDetail(ProfileSummary):
    """GET /profiles/{name}: the summary plus what ECS, Auto Scaling, the ALB and the ledger say now."""

    desired_count: int
    running_count: int
    pending_count: int
    instances: list[Instance]
    target_health: dict[str, str] = Field(description="target id -> health state")
    min_replicas: int = Field(default=1, description="tasks a start brings up (one instance each)")
    max_replicas: int = Field(default=1, description="tasks service auto scaling may run under load")
    service_events: list[ServiceEvent]
    uptime_s: float | None = Field(default=None, description="seconds since the open session started")
    accrued_cost_usd: float | None = Field(default=None, description="open session uptime x hourly price")
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    stop_requested: bool = False
    warm_instances: list[Instance] = Field(
        default_factory=list, description="the pool's warm pool instances (Warmed:Stopped ones cost their volume only)"
    )
    warm_start: bool | None = Field(default=None, description="the last start took a stopped instance from the warm pool")
    capacity_note: str | None = Field(default=None, description="why the last start runs on an alternate instance type")
    start: StartTimeline | None = Field(default=None, description="the latest start's timeline")


class PhaseMark(BaseModel):
    """When a phase of a flow began and how long it has lasted (until the next phase or now)."""

    name: str
    started_at: datetime
    elapsed_s: float


class ExecutionProgress(BaseModel):
    """GET /executions/{id}: status, the current phase and the time spent in each phase so far."""

    execution_arn: str
    execution_id: str
    action: Literal["start", "stop"]
    profile: str | None
    status: str = Field(description="RUNNING, SUCCEEDED, FAILED, TIMED_OUT or ABORTED")
    phase: str = Field(
        description="start: prepare, capacity, boot, task, health, smoke, ready, failed; "
        "stop: prepare, lock, drain, release, terminate, stopped, failed"
    )
    phases: list[PhaseMark]
    started_at: datetime
    stopped_at: datetime | None = None
    elapsed_s: float
    error: str | None = None
    cause: str | None = None
    detail: str | None = Field(default=None, description="what the current wait loop last saw")


class LedgerSession(BaseModel):
    """One session with its cost."""

    profile: str
    session_id: str
    instance_type: str
    started_at: datetime
    stopped_at: datetime | None
    open: bool
    uptime_hours: float
    instances: int = Field(default=1, description="instances that ran in it (replicas); 1 on sessions from before replicas")
    instance_hours: float = Field(description="each instance's own running time, summed: what cost_usd bills")
    hourly_usd: float | None
    cost_usd: float | None
    close_reason: str | None = None


class MonthlyTotal(BaseModel):
    """Uptime and cost of one profile in one month (sessions counted in the month they started)."""

    profile: str
    month: str = Field(description="YYYY-MM")
    uptime_hours: float
    cost_usd: float | None


class WarmPoolCost(BaseModel):
    """A pool's warm (stopped) instances and what their gp3 volumes cost standing, whether or not anything runs."""

    pool: str
    instances: int = Field(description="instances in the warm pool now")
    volume_gib: int
    volume_monthly_usd: float | None = Field(
        description="one volume a month: GB-month plus throughput and IOPS above gp3's baseline"
    )
    standing_monthly_usd: float | None = Field(description="instances x volume_monthly_usd")


class Ledger(BaseModel):
    """GET /ledger."""

    sessions: list[LedgerSession]
    monthly: list[MonthlyTotal]
    total_cost_usd: float | None
    warm_pools: list[WarmPoolCost] = Field(default_factory=list, description="standing cost of the pools' warm instances")


class KeepaliveAnswer(ProfileSummary):
    """POST /profiles/{name}/keepalive: the profile with its lease, and what the keepalive did to it."""

    extended: bool = Field(description="false when the lease already ended later than now + minutes: it is kept, not shortened")
    previous_lease_deadline: datetime | None
    requested_lease_deadline: datetime = Field(description="now + minutes")
    message: str = Field(description="what happened, for people (the new lease, or why it did not move)")
