"""Pieces both flows share: config from the state, locks, the stop flag, pool activity, releasing a pool."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from servingctl.control import aws
from servingctl.control.deps import Deps
from servingctl.shared.errors import InvalidInput, PoolBusy, StopRequested
from servingctl.shared.settings import StartConfig, StopConfig
from servingctl.store.models import Phase, pool_lock, profile_lock

ACTIVE_PHASES = frozenset({Phase.STARTING, Phase.READY, Phase.STOPPING})


def config_of(state: dict[str, Any]) -> StartConfig | StopConfig:
    """The flow's $.config written by prepare_start / prepare_stop."""
    config = state.get("config")
    if not isinstance(config, dict):
        raise InvalidInput("state.config: missing; prepare_start or prepare_stop must run first")
    return StopConfig.model_validate(config) if config.get("flow") == "stop" else StartConfig.model_validate(config)


def lock_names(config: StartConfig | StopConfig) -> list[str]:
    """The profile lock and the pool lock, in that order."""
    return [profile_lock(config.profile), pool_lock(config.pool)]


def parse_time(value: str) -> datetime:
    """An ISO time from the state (the Z suffix included)."""
    return datetime.fromisoformat(value)


def error_reason(error: dict[str, Any] | None) -> str:
    """'<Error>: <message>' from a Catch's {Error, Cause} (Lambda causes are JSON with errorMessage)."""
    if not error:
        return "unknown error"
    cause = error.get("Cause") or ""
    try:
        message = json.loads(cause).get("errorMessage", cause)
    except (ValueError, AttributeError):
        message = cause
    return f"{error.get('Error', 'Error')}: {message}".rstrip(": ")


def raise_if_stop_requested(deps: Deps, profile: str) -> None:
    """A stop flag in force ends the start (it rolls back and lets the stop proceed)."""
    state = deps.store.get_profile(profile)
    if state.stop_requested(deps.clock.now()):
        raise StopRequested(f"stop of {profile} requested by {state.stop_requested_by}")


def pool_users(deps: Deps, profile: str) -> list[str]:
    """Other profiles active on this profile's pool, by recorded phase or by what ECS runs."""
    pool = deps.profile(profile).pool
    users = []
    for other in deps.registry.profiles_on_pool(pool):
        if other == profile:
            continue
        recorded = deps.store.get_profile(other).phase
        spec = deps.profile(other)
        counts = aws.service_counts(deps.ecs, spec.cluster, spec.service)
        if recorded in ACTIVE_PHASES or counts.desired > 0 or counts.running + counts.pending > 0:
            users.append(f"{other} ({recorded}, desired {counts.desired}, running {counts.running})")
    return users


def release_pool(deps: Deps, pool_name: str) -> tuple[list[str], list[str]]:
    """Clear scale-in protection, then ASG desired and min 0; returns (instances, protection cleared)."""
    pool = deps.pool(pool_name)
    view = aws.describe_asg(deps.autoscaling, pool.asg_name)
    protected = [i.instance_id for i in view.instances if i.protected]
    aws.clear_protection(deps.autoscaling, pool.asg_name, protected)
    aws.scale_asg_to_zero(deps.autoscaling, pool.asg_name)
    return [i.instance_id for i in view.instances], protected


def guard_pool(deps: Deps, state: dict[str, Any], execution: str) -> dict[str, Any]:
    """Who else uses the pool; a start refuses (PoolBusy) unless allow_shared_pool."""
    config = config_of(state)
    users = pool_users(deps, config.profile)
    if users and isinstance(config, StartConfig) and not config.settings.allow_shared_pool:
        raise PoolBusy(
            f"pool {config.pool} is in use by {'; '.join(users)}; pass allow_shared_pool=true to share it"
        )
    return {"others": users, "keep": bool(users)}


def release_lock(deps: Deps, state: dict[str, Any], execution: str) -> dict[str, Any]:
    """Give back the locks this execution holds."""
    return {"released": deps.store.release_locks(lock_names(config_of(state)), execution)}
