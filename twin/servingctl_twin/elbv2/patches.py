"""ELBv2's moto patch: DescribeTargetHealth reports what the twin's load balancer decided (moto reports
every registered target `healthy` at once; an ALB reports initial, then its health checks' verdict)."""

from __future__ import annotations

import threading
from typing import Any

from moto.elbv2.models import FakeHealthStatus, FakeTargetGroup

from servingctl_twin.patching import Patch, original, part_of


class TargetHealth:
    """A site's target health: (target group ARN, target id) -> (state, reason, description)."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, str], tuple[str, str | None, str | None]] = {}
        self._lock = threading.Lock()

    def set(
        self, target_group_arn: str, target_id: str, state: str, reason: str | None = None, description: str | None = None
    ) -> None:
        """Decide what DescribeTargetHealth reports for a registered target."""
        with self._lock:
            self._states[(target_group_arn, target_id)] = (state, reason, description)

    def clear(self, target_group_arn: str, target_id: str) -> None:
        """Forget the decision for a target (after it is deregistered)."""
        with self._lock:
            self._states.pop((target_group_arn, target_id), None)

    def get(self, target_group_arn: str, target_id: str) -> tuple[str, str | None, str | None]:
        """The decision for a target (initial, registration in progress, until one is made)."""
        with self._lock:
            return self._states.get(
                (target_group_arn, target_id), ("initial", "Elb.RegistrationInProgress", "Target registration is in progress")
            )


def _health_for(self: FakeTargetGroup, target: dict[str, Any], ec2_backend: Any) -> FakeHealthStatus:
    """Registered targets report what the site's load balancer decided (initial until it says otherwise)."""
    registered = self.targets.get(target["Id"])
    health = part_of(self.arn.split(":")[3], TargetHealth)
    if registered is None or health is None:
        return original("FakeTargetGroup.health_for")(self, target, ec2_backend)
    state, reason, description = health.get(self.arn, target["Id"])
    return FakeHealthStatus(registered["Id"], registered["Port"], self.health_check_port, state, reason, description)


PATCHES = [
    # DescribeTargetHealth: initial, then healthy/unhealthy as the health checks decide, draining on deregistration.
    Patch("FakeTargetGroup.health_for", FakeTargetGroup, "health_for", ("self", "target", "ec2_backend"), _health_for),
    Patch(
        "FakeHealthStatus.__init__",
        FakeHealthStatus,
        "__init__",
        ("self", "instance_id", "port", "health_port", "status", "reason", "description"),
    ),
]
