"""Auto-shutdown decisions: for one READY profile, stop it, keep it, or warn that it stops soon, and why.

Plain logic over what the sweep gathered (state, lease, ALB request counts, the model server's
running/waiting gauges, a benchmark's hold, the clock), so every case is tested with a frozen clock
and no AWS. Every way a profile can be stopped is a planned stop with a time:

- soft: lease end, idle window, the end of a schedule period (not `enforced`). Never while the model
  server runs or queues requests, nor while a benchmark holds the profile.
- hard: max runtime, the session budget, an `enforced` schedule end, the "stopped" override. Applied
  even then, but only after a drain: running requests may finish for up to drain_minutes after the
  limit. The drain is decided here, before stop_profile sets desired 0, because the ALB's
  deregistration delay (30 s) cuts any stream still running once the target deregisters.

The earliest planned stop within warning_minutes makes the sweep publish "Profile stopping soon".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from servingctl import render
from servingctl.registry.models import Schedule, ServingProfile
from servingctl.registry.schedule import should_run

Reason = Literal[
    "override-running",
    "override-stopped",
    "outside-schedule",
    "max-runtime",
    "budget",
    "lease-expired",
    "idle",
    "in-use",
    "idle-unknown",
    "requests-running",
    "held",
    "draining",
]
# When several stops are due at once, the reason reported is the first of these.
PRIORITY: tuple[Reason, ...] = ("override-stopped", "max-runtime", "budget", "outside-schedule", "lease-expired", "idle")
MINUTE = timedelta(minutes=1)


class ServerLoad(BaseModel):
    """The model server's own gauges (vllm:num_requests_running / vllm:num_requests_waiting)."""

    model_config = ConfigDict(frozen=True)

    running: int = Field(ge=0)
    waiting: int = Field(ge=0)
    replicas: int = Field(default=1, ge=1, description="model servers whose /metrics answered")

    @property
    def active(self) -> int:
        """Requests the server is working on or has queued."""
        return self.running + self.waiting


class PlannedStop(BaseModel):
    """One way the profile will be stopped, and when."""

    model_config = ConfigDict(frozen=True)

    reason: Reason
    at: datetime
    hard: bool = Field(description="applied even while requests run (after the drain)")
    detail: str


class Decision(BaseModel):
    """What the sweep does with one profile, with a reason a person can read."""

    model_config = ConfigDict(frozen=True)

    profile: str
    stop: bool
    reason: Reason
    detail: str
    next_stop: PlannedStop | None = Field(default=None, description="the earliest planned stop (due or not)")
    stopping_soon: bool = Field(default=False, description="next_stop is within warning_minutes: publish the warning")
    active_requests: int | None = Field(default=None, description="running + waiting on the model server; None when unread")


class Observed(BaseModel):
    """What the sweep (or the API, without gauges and request counts) knows about one READY profile."""

    model_config = ConfigDict(frozen=True)

    now: datetime
    ready_since: datetime
    lease_deadline: datetime | None = None
    requests_in_idle_window: int | None = Field(default=None, description="ALB RequestCount; None when unknown")
    last_request_at: datetime | None = Field(default=None, description="end of the last metric period with requests")
    load: ServerLoad | None = None
    kept_alive_at: datetime | None = None
    held_by: str | None = None
    held_until: datetime | None = None
    session_started_at: datetime | None = None
    hourly_usd: float | None = None
    # Every instance's cost so far and the instances running now (replicas), from the pool's scaling
    # activities; None: unknown, and the budget is counted as one instance since the session began.
    spent_usd: float | None = None
    running_instances: int = Field(default=1, ge=0)

    def held(self) -> bool:
        """True while a benchmark's hold is in force."""
        return bool(self.held_by and self.held_until and self.now < self.held_until)

    def busy(self) -> bool:
        """True when the gauges show requests running or waiting."""
        return self.load is not None and self.load.active > 0


def _local(schedule: Schedule, moment: datetime) -> str:
    return f"{moment.astimezone(ZoneInfo(schedule.timezone)):%a %Y-%m-%d %H:%M %Z}"


def schedule_stop_at(schedule: Schedule, now: datetime, ahead: timedelta, behind: timedelta) -> datetime | None:
    """When the schedule stops wanting the profile: the first minute outside it within `ahead`, or,
    when now is outside, since when (looked for up to `behind`; periods are whole minutes)."""
    floor = now.replace(second=0, microsecond=0)
    if not should_run(schedule, now):
        since = floor
        while now - since < behind and not should_run(schedule, since - MINUTE):
            since -= MINUTE
        return since if since <= now else now
    moment = floor + MINUTE
    while moment - now <= ahead:
        if not should_run(schedule, moment):
            return moment
        moment += MINUTE
    return None


def _keepalive_in_force(seen: Observed) -> bool:
    return seen.kept_alive_at is not None and seen.lease_deadline is not None and seen.now < seen.lease_deadline


def planned_stops(profile: ServingProfile, seen: Observed) -> list[PlannedStop]:
    """Every stop the profile is headed for, due or not (schedule ends only within the warning window)."""
    schedule = profile.schedule
    overridden = schedule is not None and schedule.override == "running"
    stops = _schedule_stops(profile, seen)
    if not overridden:
        stops += _lease_and_idle_stops(profile, seen)
    return stops + _limit_stops(profile, seen)


def _schedule_stops(profile: ServingProfile, seen: Observed) -> list[PlannedStop]:
    """An override that keeps it stopped, or the end of its schedule's period (a keepalive defers
    one that is not enforced)."""
    settings, schedule, now = profile.autostop, profile.schedule, seen.now
    if schedule is None:
        return []
    if schedule.override == "stopped":
        return [PlannedStop(reason="override-stopped", at=now, hard=True, detail="schedule override keeps it stopped")]
    if schedule.override is not None:
        return []
    at = schedule_stop_at(
        schedule,
        now,
        ahead=timedelta(minutes=settings.warning_minutes),
        behind=timedelta(minutes=settings.drain_minutes) + MINUTE,
    )
    if at is None:
        return []
    detail = (
        f"its {schedule.timezone} schedule ends at {_local(schedule, at)}"
        if at > now
        else f"{_local(schedule, now)} is outside every period of its {schedule.timezone} schedule"
    )
    if not schedule.enforced and _keepalive_in_force(seen) and seen.lease_deadline and seen.lease_deadline > at:
        at, detail = seen.lease_deadline, detail + f", deferred by a keepalive to {render.when(seen.lease_deadline)}"
    return [
        PlannedStop(
            reason="outside-schedule",
            at=at,
            hard=schedule.enforced,
            detail=detail + (" (enforced)" if schedule.enforced else ""),
        )
    ]


def _lease_and_idle_stops(profile: ServingProfile, seen: Observed) -> list[PlannedStop]:
    """The lease's end, and the end of the idle window (soft: both wait for running requests)."""
    stops: list[PlannedStop] = []
    if seen.lease_deadline is not None:
        stops.append(
            PlannedStop(
                reason="lease-expired",
                at=seen.lease_deadline,
                hard=False,
                detail=f"lease ends at {render.when(seen.lease_deadline)} (keepalive extends it)",
            )
        )
    if profile.idle.enabled and seen.requests_in_idle_window is not None:
        window = timedelta(minutes=profile.idle.window_minutes)
        quiet_since = max(t for t in (seen.ready_since, seen.kept_alive_at, seen.last_request_at) if t is not None)
        if seen.requests_in_idle_window > 0 and seen.last_request_at is None:
            quiet_since = seen.now  # requests without a time: count the window from now (never early)
        stops.append(
            PlannedStop(
                reason="idle",
                at=quiet_since + window,
                hard=False,
                detail=f"no requests for {profile.idle.window_minutes} minutes (since {render.when(quiet_since)})",
            )
        )
    return stops


def _limit_stops(profile: ServingProfile, seen: Observed) -> list[PlannedStop]:
    """The hard limits: the runtime since READY and the session's budget."""
    settings, stops = profile.autostop, list[PlannedStop]()
    if settings.max_runtime_minutes is not None:
        at = seen.ready_since + timedelta(minutes=settings.max_runtime_minutes)
        stops.append(
            PlannedStop(
                reason="max-runtime",
                at=at,
                hard=True,
                detail=f"max runtime of {settings.max_runtime_minutes} minutes since READY ends at {render.when(at)}",
            )
        )
    if settings.max_session_usd is not None and seen.hourly_usd and seen.session_started_at is not None:
        budget = settings.max_session_usd
        if seen.spent_usd is None:
            at = seen.session_started_at + timedelta(hours=budget / seen.hourly_usd)
            rate = f"{seen.hourly_usd:g} USD/h"
        else:
            # What is left, at the rate of the instances running now (each replica bills its own).
            burn = seen.hourly_usd * max(1, seen.running_instances)
            at = seen.now + timedelta(hours=max(0.0, budget - seen.spent_usd) / burn)
            rate = f"{seen.spent_usd:.2f} USD spent, {seen.running_instances} instance(s) at {seen.hourly_usd:g} USD/h each"
        stops.append(
            PlannedStop(
                reason="budget",
                at=at,
                hard=True,
                detail=f"the session reaches its budget of {budget:g} USD ({rate}) at {render.when(at)}",
            )
        )
    return stops


def _why_kept(profile: ServingProfile, requests: int | None, busy: bool, active: int | None) -> tuple[Reason, str]:
    """Why a profile no stop is due for keeps running, in words."""
    if profile.schedule and profile.schedule.override == "running":
        return "override-running", "schedule override keeps it running"
    if not profile.idle.enabled:
        return "in-use", "idle shutdown disabled"
    if requests is None:
        return "idle-unknown", "no request metric for the idle window"
    if requests or busy:
        running = f", {active} running or waiting now" if busy else ""
        return "in-use", f"{requests} requests in the last {profile.idle.window_minutes} minutes{running}"
    return "in-use", "ready for less than the idle window"


def _first(stops: list[PlannedStop]) -> PlannedStop:
    return min(stops, key=lambda s: (PRIORITY.index(s.reason), s.at))


def decide(
    name: str,
    profile: ServingProfile,
    *,
    now: datetime,
    ready_since: datetime,
    lease_deadline: datetime | None,
    requests_in_idle_window: int | None,
    **observed: object,
) -> Decision:
    """Decide whether the sweep stops a READY profile (requests_in_idle_window None means unknown);
    further keywords are Observed fields (gauges, hold, keepalive, session cost)."""
    seen = Observed.model_validate(
        {
            "now": now,
            "ready_since": ready_since,
            "lease_deadline": lease_deadline,
            "requests_in_idle_window": requests_in_idle_window,
            **observed,
        }
    )
    stops = planned_stops(profile, seen)
    upcoming = min(stops, key=lambda s: s.at) if stops else None
    active = seen.load.active if seen.load is not None else None
    due = [s for s in stops if s.at <= now]
    hard = [s for s in due if s.hard]
    busy = seen.busy()

    def answer(stop: bool, reason: Reason, detail: str, soon: bool = False) -> Decision:
        return Decision(
            profile=name, stop=stop, reason=reason, detail=detail, next_stop=upcoming, stopping_soon=soon, active_requests=active
        )

    if hard:
        limit = _first(hard)
        drained_by = limit.at + timedelta(minutes=profile.autostop.drain_minutes)
        if busy and now < drained_by:
            return answer(
                False,
                "draining",
                f"{limit.detail}; {active} request(s) still running or waiting: stops when "
                f"they finish, at {render.when(drained_by)} at the latest",
                soon=True,
            )
        tail = f" (drain of {profile.autostop.drain_minutes} min over, {active} request(s) cut)" if busy else ""
        return answer(True, limit.reason, limit.detail + tail)
    if due:
        if seen.held():
            return answer(False, "held", f"benchmark {seen.held_by} holds it until {render.when(seen.held_until)}")
        if busy:
            return answer(False, "requests-running", f"{_first(due).detail}; deferred: {active} request(s) running or waiting")
        return answer(True, _first(due).reason, _first(due).detail)
    warning = timedelta(minutes=profile.autostop.warning_minutes)
    soon = [s for s in stops if s.at - now <= warning and (s.hard or not seen.held()) and not (busy and s.reason == "idle")]
    kept, detail = _why_kept(profile, requests_in_idle_window, busy, active)
    if soon:
        first = min(soon, key=lambda s: s.at)
        return answer(False, kept, f"{detail}; stopping soon: {first.detail}", soon=True)
    return answer(False, kept, detail)
