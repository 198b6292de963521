"""Auto-shutdown decisions: for one READY profile, stop it or keep it, and why.

Plain logic over what the sweep handler gathered (state, lease, request counts, the clock), so every
case is tested with a frozen clock and no AWS.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict

from servingctl.control.schedule import should_run
from servingctl.registry.models import ServingProfile

Reason = Literal[
    "override-running",
    "override-stopped",
    "outside-schedule",
    "lease-expired",
    "idle",
    "in-use",
    "idle-unknown",
]


class Decision(BaseModel):
    """What the sweep does with one profile, with a reason a person can read."""

    model_config = ConfigDict(frozen=True)

    profile: str
    stop: bool
    reason: Reason
    detail: str


def decide(
    name: str,
    profile: ServingProfile,
    *,
    now: datetime,
    ready_since: datetime,
    lease_deadline: datetime | None,
    requests_in_idle_window: int | None,
) -> Decision:
    """Decide whether the sweep stops a READY profile; requests_in_idle_window None means unknown."""
    schedule = profile.schedule
    if schedule and schedule.override == "running":
        return Decision(profile=name, stop=False, reason="override-running", detail="schedule override keeps it running")
    if schedule and schedule.override == "stopped":
        return Decision(profile=name, stop=True, reason="override-stopped", detail="schedule override keeps it stopped")
    if schedule and not should_run(schedule, now):
        return Decision(
            profile=name, stop=True, reason="outside-schedule",
            detail=f"{now.astimezone(ZoneInfo(schedule.timezone)):%a %Y-%m-%d %H:%M %Z} is outside every period of its {schedule.timezone} schedule",
        )
    if lease_deadline is not None and now >= lease_deadline:
        return Decision(
            profile=name, stop=True, reason="lease-expired",
            detail=f"lease ended at {lease_deadline.isoformat()} (keepalive extends it)",
        )
    if not profile.idle.enabled:
        return Decision(profile=name, stop=False, reason="in-use", detail="idle shutdown disabled")
    window = timedelta(minutes=profile.idle.window_minutes)
    if now - ready_since < window:
        return Decision(profile=name, stop=False, reason="in-use", detail="ready for less than the idle window")
    if requests_in_idle_window is None:
        return Decision(profile=name, stop=False, reason="idle-unknown", detail="no request metric for the idle window")
    if requests_in_idle_window == 0:
        return Decision(
            profile=name, stop=True, reason="idle",
            detail=f"no requests in the last {profile.idle.window_minutes} minutes",
        )
    return Decision(
        profile=name, stop=False, reason="in-use",
        detail=f"{requests_in_idle_window} requests in the last {profile.idle.window_minutes} minutes",
    )
