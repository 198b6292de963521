"""The start/stop flows' $.config: the execution input validated and merged with its profile's
registry defaults (the start and stop steps, and the benchmark worker checking start/stop options)."""

from __future__ import annotations

from typing import Any

from servingctl.registry.models import Registry, ServingProfile
from servingctl.shared.errors import InvalidInput, ProfileNotFound
from servingctl.shared.settings import (
    ResolvedDeadlines,
    SmokeTarget,
    StartConfig,
    StartInput,
    StartSettings,
    StopConfig,
    StopInput,
    StopSettings,
    parse_input,
)

# Lock leases cover every deadline of the flow plus this margin for the short steps around the loops.
LOCK_MARGIN_S = 900


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
        raise InvalidInput(f"invalid input: lease_minutes: must be between 5 and {profile.max_lease_minutes} for {given.profile} (got {lease})")
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
            lock_ttl_s=deadlines.capacity_s + deadlines.task_s + deadlines.health_s + LOCK_MARGIN_S,
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
    return StopConfig(
        profile=given.profile,
        pool=profile.pool,
        settings=StopSettings(
            poll=given.poll,
            deadlines=given.deadlines,
            lock_ttl_s=given.deadlines.drain_s + given.deadlines.terminate_s + LOCK_MARGIN_S,
        ),
        already_stopped=already_stopped,
        requested_by=given.requested_by,
    )
