"""The registry: compute pools and serving profiles, the one source of names the controller uses."""

from servingctl.registry.loader import Published, RegistryError, load_registry, parse_registry, read_registry
from servingctl.registry.models import (
    AutoStopSettings,
    ComputePool,
    IdleSettings,
    Period,
    Registry,
    RoutingHeader,
    Schedule,
    ServingOptions,
    ServingProfile,
    StartSettings,
)

__all__ = [
    "AutoStopSettings",
    "ComputePool",
    "IdleSettings",
    "Period",
    "Published",
    "Registry",
    "RegistryError",
    "RoutingHeader",
    "Schedule",
    "ServingOptions",
    "ServingProfile",
    "StartSettings",
    "load_registry",
    "parse_registry",
    "read_registry",
]
