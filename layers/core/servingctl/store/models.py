"""Records the store keeps: profile state (phase machine), locks and ledger sessions, JSON-safe."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer


class Phase(StrEnum):
    """Lifecycle phase of a serving profile."""

    STOPPED = "STOPPED"
    STARTING = "STARTING"
    READY = "READY"
    STOPPING = "STOPPING"
    FAILED = "FAILED"


# Phase -> phases it may move to. READY -> STARTING is a restart after the task vanished; STARTING ->
# STARTING and STOPPING -> STARTING are takeovers after a dead execution's lock expired.
ALLOWED_TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STOPPED: frozenset({Phase.STOPPED, Phase.STARTING, Phase.STOPPING, Phase.FAILED}),
    Phase.STARTING: frozenset({Phase.STARTING, Phase.READY, Phase.STOPPING, Phase.FAILED}),
    Phase.READY: frozenset({Phase.READY, Phase.STARTING, Phase.STOPPING, Phase.FAILED}),
    Phase.STOPPING: frozenset({Phase.STOPPING, Phase.STOPPED, Phase.STARTING, Phase.FAILED}),
    Phase.FAILED: frozenset({Phase.FAILED, Phase.STARTING, Phase.STOPPING, Phase.STOPPED}),
}


def sources_of(target: Phase) -> list[Phase]:
    """Phases from which target may be entered."""
    return [p for p, targets in ALLOWED_TRANSITIONS.items() if target in targets]


def iso(value: datetime | None) -> str | None:
    """UTC ISO-8601 with a Z, the one time format the store and the state machines carry."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    @field_serializer("*", when_used="json")
    def _times_as_iso(self, value: Any) -> Any:
        return iso(value) if isinstance(value, datetime) else value


class ProfileState(_Record):
    """Where a profile is in its lifecycle, who moved it there, and what it cost in time."""

    profile: str
    phase: Phase = Phase.STOPPED
    execution: str | None = Field(default=None, description="ARN of the execution that set the phase")
    updated_at: datetime | None = None
    phase_since: datetime | None = None
    ready_at: datetime | None = None
    stopped_at: datetime | None = None
    phase_seconds: dict[str, float] = Field(default_factory=dict, description="capacity, boot, task, health, smoke, total")
    lease_deadline: datetime | None = None
    last_error: str | None = None
    session_id: str | None = Field(default=None, description="open ledger session")
    instance_type: str | None = Field(default=None, description="instance type of the current or last start")
    warm_start: bool | None = Field(default=None, description="the last start took a stopped instance from the warm pool")
    capacity_note: str | None = Field(default=None, description="why the start moved to an alternate instance type")
    stop_requested_by: str | None = None
    stop_requested_until: datetime | None = None
    # Who did it: the IAM ARN of the caller of the last start, stop and keepalive (the sweep's own for its stops).
    started_by: str | None = None
    stopped_by: str | None = None
    kept_alive_by: str | None = None
    # A user's stop asked that no request wake the profile (stop --no-wake); the next start clears it.
    no_wake: bool = False
    kept_alive_at: datetime | None = None
    # A benchmark run holding the profile: the sweep's soft stops wait until held_until (renewed per scenario).
    held_by: str | None = None
    held_until: datetime | None = None
    # The last time the reconciler found the record and the cloud disagreeing, and why it stopped the profile.
    reconciled_at: datetime | None = None
    reconcile_reason: str | None = None
    # The registry's entry for this profile and its pool (JSON) as the profile last ran with it, kept
    # by the start and the reconciler: a profile the registry loses can still be found and stopped.
    registry_entry: str | None = None

    def stop_requested(self, now: datetime) -> bool:
        """True while a stop flag set by a stop execution is still in force."""
        return bool(self.stop_requested_by and self.stop_requested_until and now < self.stop_requested_until)


# Fields a caller may change with update_profile / set_phase (the key and the audit time are the store's).
MUTABLE_FIELDS = frozenset(ProfileState.model_fields) - {"profile", "updated_at"}


class Lock(_Record):
    """A lease on a profile or pool, held by one execution until expires_at."""

    name: str = Field(description='"profile:<name>" or "pool:<name>"')
    owner: str
    acquired_at: datetime
    expires_at: datetime

    def live(self, now: datetime) -> bool:
        """True while the lease has not run out."""
        return now < self.expires_at


class InstanceSpan(_Record):
    """One instance's own time in a session, as its group's scaling activities date it."""

    instance_id: str
    started_at: datetime = Field(description="its launch activity's start (the session's start when it ran before)")
    stopped_at: datetime | None = Field(default=None, description="its termination activity's end; None while it runs")


class Session(_Record):
    """One ledger session: a profile's instance time from scale-out to stop (cost math: servingctl.costs)."""

    profile: str
    session_id: str
    pool: str
    instance_type: str
    price_key: str | None = None
    started_at: datetime
    stopped_at: datetime | None = None
    uptime_s: float | None = None
    start_execution: str | None = None
    stop_execution: str | None = None
    close_reason: str | None = None
    capacity_note: str | None = Field(default=None, description="why the session runs on an alternate instance type")
    # Each instance's span (replicas), stamped at close. Empty on sessions closed before it was kept,
    # on a pool the registry shares and when the group listed none: the session's span is one instance.
    instances: list[InstanceSpan] = Field(default_factory=list)

    @property
    def open(self) -> bool:
        """True until close_session stamped it."""
        return self.stopped_at is None


class Mark(_Record):
    """One point of a start's timeline: what happened, when, and which source said so."""

    name: str = Field(description="e.g. instance_launched, pull_stopped, vllm_weights_loaded, target_healthy, ready")
    at: datetime
    source: str = Field(description="where the time comes from, e.g. ecs:DescribeTasks pullStoppedAt, logs:vllm")
    # When the controller first saw it: at..seen_at is the controller's own overhead for this mark.
    seen_at: datetime | None = None


class StartRecord(_Record):
    """One start of a profile with its timeline, oldest mark first (the profile's start history)."""

    profile: str
    start_id: str = Field(description="the session id format: <requested ISO>#<execution name>")
    execution: str
    requested_at: datetime
    outcome: str = Field(default="STARTING", description="STARTING, READY or FAILED")
    ended_at: datetime | None = None
    marks: list[Mark] = Field(default_factory=list)
    error: str | None = None
    instance_id: str | None = None
    task_arn: str | None = None
    # The task's awslogs streams (log group, stream, is the prefetch container), read once from its task definition.
    log_streams: list[tuple[str, str, bool]] = Field(default_factory=list)

    def mark(self, name: str) -> Mark | None:
        """The mark of that name, None when not reached (yet)."""
        return next((m for m in self.marks if m.name == name), None)


def profile_lock(profile: str) -> str:
    """Lock name of a profile."""
    return f"profile:{profile}"


def pool_lock(pool: str) -> str:
    """Lock name of a compute pool."""
    return f"pool:{pool}"


def session_id_for(started_at: datetime, execution: str) -> str:
    """Session ids sort by start time and name the execution that opened them."""
    return f"{iso(started_at)}#{execution.rsplit(':', 1)[-1]}"
