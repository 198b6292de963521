"""The start/stop flows' $.config: the execution input validated against its profile's registry
limits and merged with its defaults (the start and stop steps, the API's early checks, and the
benchmark worker checking start/stop options), and the locks' lease."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servingctl.registry.models import Registry, ServingProfile
from servingctl.shared.errors import InvalidInput, ProfileNotFound
from servingctl.shared.flow_inputs import (
    Poll,
    ResolvedDeadlines,
    SmokeTarget,
    StartConfig,
    StartInput,
    StartSettings,
    StopConfig,
    StopDeadlines,
    StopInput,
    StopSettings,
    parse_input,
)

# The lock owner renews its lease at every probe; the lease covers this many of the slowest polls
# plus a margin for one step between probes (a 180 s Lambda and its retries' back-off). A waiter
# takes over at once when the owner's execution is no longer RUNNING; the lease only bounds how long
# a lock outlives an owner nobody can ask about.
LOCK_LEASE_POLLS = 3
LOCK_LEASE_MARGIN_S = 300


def lock_lease_s(poll: Poll) -> int:
    """Seconds a lock lasts after its owner's last renewal: a few of the slowest polls plus one step."""
    return LOCK_LEASE_POLLS * poll.max_interval_s + LOCK_LEASE_MARGIN_S


def _within(problems: list[str], field: str, value: int | None, largest: int, limit: str, profile: str) -> None:
    if value is not None and value > largest:
        problems.append(f"{field}: must be between 1 and {largest} seconds (the {limit} of {profile}); got {value}")


def limit_problems(profile: str, spec: ServingProfile, poll: Poll | None, deadlines: dict[str, int | None]) -> list[str]:
    """What in a start's or stop's poll and deadlines exceeds the profile's registry limits, one
    line per field naming the allowed range (empty when everything is within them)."""
    limits, problems = spec.limits, list[str]()
    if poll is not None:
        for name in ("interval_s", "max_interval_s"):
            _within(
                problems, f"poll.{name}", getattr(poll, name), limits.max_poll_interval_s, "limits.max_poll_interval_s", profile
            )
    for name, value in deadlines.items():
        stop = name in StopDeadlines.model_fields
        largest = limits.max_stop_deadline_s if stop else limits.max_start_deadline_s
        limit = "limits.max_stop_deadline_s" if stop else "limits.max_start_deadline_s"
        _within(problems, f"deadlines.{name}", value, largest, limit, profile)
    return problems


def _check_limits(profile: str, spec: ServingProfile, poll: Poll, deadlines: BaseModel) -> None:
    problems = limit_problems(profile, spec, poll, deadlines.model_dump())
    if problems:
        raise InvalidInput("invalid input: " + "; ".join(problems))


def resolve_profile(registry: Registry, name: str) -> ServingProfile:
    """The registry's profile, or ProfileNotFound listing the known names."""
    if name not in registry.profiles:
        raise ProfileNotFound(f"profile: unknown profile {name!r}; known profiles: {', '.join(sorted(registry.profiles))}")
    return registry.profiles[name]


def start_config(registry: Registry, data: Any) -> StartConfig:
    """Validate start input and merge the profile's defaults into the flow's config."""
    given = parse_input(StartInput, data)
    profile = resolve_profile(registry, given.profile)
    lease = given.lease_minutes if given.lease_minutes is not None else profile.default_lease_minutes
    if lease > profile.max_lease_minutes:
        raise InvalidInput(
            f"invalid input: lease_minutes: must be between 5 and {profile.max_lease_minutes} for {given.profile} (got {lease})"
        )
    _check_limits(given.profile, profile, given.poll, given.deadlines)
    deadlines = ResolvedDeadlines(
        capacity_s=given.deadlines.capacity_s or profile.start.capacity_timeout_s,
        task_s=given.deadlines.task_s or profile.start.task_timeout_s,
        health_s=given.deadlines.health_s or profile.start.health_timeout_s,
    )
    return StartConfig(
        profile=given.profile,
        pool=profile.pool,
        settings=StartSettings(
            allow_shared_pool=given.allow_shared_pool,
            lease_minutes=lease,
            poll=given.poll,
            deadlines=deadlines,
            max_task_failures=profile.start.max_task_failures,
            lock_lease_s=lock_lease_s(given.poll),
        ),
        smoke=SmokeTarget(
            url=profile.endpoint_url,
            header_name=profile.routing_header.name,
            header_value=profile.routing_header.value,
            model=profile.model,
        ),
        requested_by=given.requested_by,
    )


def stop_config(registry: Registry, data: Any, already_stopped: bool = False) -> StopConfig:
    """Validate stop input and resolve the profile's pool."""
    given = parse_input(StopInput, data)
    profile = resolve_profile(registry, given.profile)
    _check_limits(given.profile, profile, given.poll, given.deadlines)
    return StopConfig(
        profile=given.profile,
        pool=profile.pool,
        settings=StopSettings(
            poll=given.poll,
            deadlines=given.deadlines,
            lock_lease_s=lock_lease_s(given.poll),
        ),
        already_stopped=already_stopped,
        no_wake=given.no_wake,
        requested_by=given.requested_by,
    )
