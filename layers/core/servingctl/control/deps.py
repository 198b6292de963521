"""What every step gets injected: AWS clients, the store, the registry, the clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servingctl.registry.models import ComputePool, Registry, ServingProfile
from servingctl.shared.clock import Clock, SystemClock
from servingctl.store.base import Store


@dataclass
class Deps:
    """Injected collaborators of the steps (boto3 clients in Lambda, moto-backed ones in tests)."""

    ecs: Any
    autoscaling: Any
    elbv2: Any
    ec2: Any
    # Step Functions: DescribeExecution of a lock owner (is it still RUNNING?).
    stepfunctions: Any
    store: Store
    registry: Registry
    clock: Clock = field(default_factory=SystemClock)
    # CloudWatch Logs: the start timeline reads the containers' log streams (None: not read).
    logs: Any = None
    # Application Auto Scaling: a profile of several replicas has its service's scaling bounds
    # raised by the start and lowered to 0..0 by the stop (None: no profile scales).
    appautoscaling: Any = None
    # Seconds a check may keep watching inside one invocation (the handler derives it from the
    # Lambda's remaining time); 0 disables watching.
    watch_budget_s: float = 0.0
    # Profiles known only from the copy their record keeps (servingctl.control.known), with why:
    # they can be stopped, never started.
    retired: dict[str, str] = field(default_factory=dict)

    def profile(self, name: str) -> ServingProfile:
        """The registry's profile (the name was validated by prepare_*)."""
        return self.registry.profiles[name]

    def pool(self, name: str) -> ComputePool:
        """The registry's pool."""
        return self.registry.pools[name]
