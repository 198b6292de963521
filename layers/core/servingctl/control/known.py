"""The profiles the controller must be able to stop: the registry as published, and its own copies.

Every start keeps its profile's registry entry (the profile and its pool) on the profile's record
(registry_entry), and the reconciler refreshes it while the profile is not STOPPED. A profile the
registry no longer lists (removed), or whose parameters are malformed or missing, is then still
known to the sweep, the reconciler, the stop flow and the API from that copy until it is stopped;
so is a STOPPED one whose capacity its tags show running (servingctl.control.tags).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from servingctl.registry.layout import compact
from servingctl.registry.loader import Published, read_registry
from servingctl.registry.models import ComputePool, Registry, ServingProfile
from servingctl.store.base import Store
from servingctl.store.models import Phase, ProfileState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Known:
    """The published registry with the kept copies of the profiles it does not describe."""

    registry: Registry
    published: Published
    # Profile known only from its kept copy -> why the registry does not describe it.
    retired: dict[str, str] = field(default_factory=dict)
    # Of those, the ones the registry's index no longer lists: removed on purpose, to be stopped.
    removed: frozenset[str] = frozenset()


def entry(registry: Registry, name: str) -> str:
    """The registry entry a record keeps for a profile: the profile and its pool, as JSON."""
    profile = registry.profiles[name]
    return compact(
        {
            "pool_name": profile.pool,
            "pool": registry.pools[profile.pool].model_dump(mode="json"),
            "profile": profile.model_dump(mode="json"),
        }
    )


def _kept(raw: str) -> tuple[str, ComputePool, ServingProfile] | None:
    try:
        data = json.loads(raw)
        return data["pool_name"], ComputePool.model_validate(data["pool"]), ServingProfile.model_validate(data["profile"])
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        log.warning("a kept registry entry does not parse (%s): ignored", exc)
        return None


def _why(published: Published, name: str) -> str:
    if name in published.unusable:
        return published.unusable[name]
    if published.listed is not None and name not in published.listed:
        return "removed from the registry"
    problems = "; ".join(str(p) for p in published.problems) or "not in the registry"
    return f"the registry cannot be read whole ({problems})"


def merge(published: Published, store: Store, running: Collection[str] = ()) -> Known:
    """The published registry plus every recorded profile it does not describe that is not STOPPED
    (or whose capacity runs, by its tags), from the copy its record keeps."""
    base = published.registry
    profiles: dict[str, ServingProfile] = dict(base.profiles)
    pools: dict[str, ComputePool] = dict(base.pools)
    retired: dict[str, str] = {}
    for state in store.list_profiles():
        name = state.profile
        if name in profiles or not state.registry_entry or (state.phase == Phase.STOPPED and name not in running):
            continue
        kept = _kept(state.registry_entry)
        if kept is None:
            continue
        pool_name, pool, profile = kept
        pools.setdefault(pool_name, pool)
        profiles[name] = profile
        retired[name] = _why(published, name)
    removed = frozenset(n for n in retired if published.listed is not None and n not in published.listed)
    # Every part was validated on its own; the merged registry may hold more than MAX_PROFILES.
    registry = Registry.model_construct(schema_version=base.schema_version, region=base.region, pools=pools, profiles=profiles)
    return Known(registry, published, retired, removed)


def known(store: Store, source: str, region: str, running: Collection[str] = ()) -> Known:
    """read_registry of source (never refusing a problem) merged with the kept copies."""
    return merge(read_registry(source, region), store, running)


def refresh_entry(registry: Registry, store: Store, state: ProfileState, now: datetime) -> bool:
    """Write the published entry on the record of a profile that is not STOPPED when it keeps
    another one (or none: started before entries were kept, or the registry was edited while it
    ran); True when written."""
    if state.profile not in registry.profiles or state.phase == Phase.STOPPED:
        return False
    current = entry(registry, state.profile)
    if state.registry_entry == current:
        return False
    store.update_profile(state.profile, now, registry_entry=current)
    return True
