"""Where a wake-on-request profile's listener rule forwards (ModifyRule): at the model's target group
once its targets are healthy (the start's RouteToModel step, servingctl.control.start.route_to_model),
at the waker's Lambda target group before any path scales the profile in (user stop, sweep,
reconciler, roll-back, forced release: all of them go through stop.scale_in_service or
flow.scale_to_zero).

A profile without wake_on_request keeps the rule Terraform made: nothing here touches it.
"""

from __future__ import annotations

from typing import Any

from servingctl.registry.models import ServingProfile


def forward(elbv2: Any, rule_arn: str, target_group_arn: str) -> None:
    """Point the rule's one forward action at target_group_arn (idempotent: the same call twice is one state)."""
    elbv2.modify_rule(RuleArn=rule_arn, Actions=[{"Type": "forward", "TargetGroupArn": target_group_arn}])


def to_waker(elbv2: Any, spec: ServingProfile) -> list[str]:
    """Before a scale-in: requests of a wake-on-request profile reach the waker; what was done, in words."""
    if not spec.wake_on_request or spec.wake is None:
        return []
    forward(elbv2, spec.wake.listener_rule_arn, spec.wake.waker_target_group_arn)
    return ["listener rule at the waker"]
