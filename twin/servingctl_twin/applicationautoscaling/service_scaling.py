"""Application Auto Scaling's part of the world: ECS service auto scaling by target tracking.

Owns what AWS does on its own for each profile's scalable target (ecs:service:DesiredCount) once
the controller or Terraform registered it (RegisterScalableTarget, PutScalingPolicy through moto):
- the bounds: a desired count outside MinCapacity..MaxCapacity is brought inside them (AWS scales to
  a new minimum or maximum at once);
- target tracking on a customized metric (the sweep's servingctl/RequestsPerReplica): its scale-out
  alarm fires when 3 consecutive one-minute periods all average above the target, its scale-in
  alarm when 15 consecutive periods all average under 90 % of it (Application Auto Scaling's
  managed alarms, which treat missing data as missing: a period without a datapoint is not
  considered, and a range with none at all is INSUFFICIENT_DATA, which fires neither); the
  new desired count is ceil(current x metric / target) within the bounds, after the policy's
  scale-out or scale-in cooldown.
A minute is the world's alarm_period_s (60 simulated seconds unless the delays are scaled), and
the cooldowns are scaled with it. A predefined metric (ALBRequestCountPerTarget) is not played:
the twin's ALB publishes RequestCountPerTarget as ELB does, one datapoint a wall-clock minute, which
a scaled alarm period (seconds) cannot read as minutes; such a policy never acts here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3

if TYPE_CHECKING:
    from servingctl_twin.world import World

SCALE_OUT_PERIODS = 3
SCALE_IN_PERIODS = 15
SCALE_IN_RATIO = 0.9  # target tracking scales in only below the target by more than 10 %
# AWS's alarm period the policies' cooldowns are written against.
AWS_PERIOD_S = 60.0


def resource_id(cluster: str, service: str) -> str:
    """The scalable target's ResourceId of an ECS service."""
    return f"service/{cluster}/{service}"


class ServiceScaling:
    """Target tracking of the registry's multi-replica profiles, moved one world step at a time."""

    def __init__(self, world: World, client_kw: dict[str, Any]) -> None:
        self.world = world
        self.appautoscaling = boto3.client("application-autoscaling", **client_kw)
        self.cloudwatch = boto3.client("cloudwatch", **client_kw)
        self._next: dict[str, float] = {}
        self._last_scaling: dict[str, float] = {}  # profile -> monotonic time of its last scaling activity

    def step(self, profile: str, now: float) -> None:
        """Keep the service inside its bounds and act on its target tracking policy."""
        spec = self.world.registry.profiles[profile]
        if spec.max_replicas <= 1 or now < self._next.get(profile, 0.0):
            return
        self._next[profile] = self.world.after(self.world.delays.alarm_period_s / 6)
        rid = resource_id(spec.cluster, spec.service)
        found = self.appautoscaling.describe_scalable_targets(ServiceNamespace="ecs", ResourceIds=[rid])["ScalableTargets"]
        if not found:
            return
        low, high = found[0]["MinCapacity"], found[0]["MaxCapacity"]
        service = self.world.scheduler.service(profile)
        current = int(service.desired_count)
        if not low <= current <= high:
            self._set(profile, min(max(current, low), high), current, f"outside its bounds {low}..{high}")
            return
        for policy in self.appautoscaling.describe_scaling_policies(ServiceNamespace="ecs", ResourceId=rid)["ScalingPolicies"]:
            config = policy.get("TargetTrackingScalingPolicyConfiguration")
            if config and config.get("CustomizedMetricSpecification") and current > 0:
                self._track(profile, config, current, low, high, now)

    def _periods(self, metric: dict[str, Any], count: int) -> list[float | None]:
        """The metric's average in each of the last count simulated minutes, oldest first (None: no datapoint)."""
        period_real = self.world.delays.alarm_period_s / self.world.time_scale
        end = datetime.now(UTC)
        answer = self.cloudwatch.get_metric_statistics(
            Namespace=metric["Namespace"],
            MetricName=metric["MetricName"],
            Dimensions=metric.get("Dimensions", []),
            StartTime=end - timedelta(seconds=period_real * count),
            EndTime=end,
            Period=1,
            Statistics=["Sum", "SampleCount"],
        )
        sums, counts = [0.0] * count, [0.0] * count
        for point in answer["Datapoints"]:
            age = (end - point["Timestamp"]).total_seconds()
            index = count - 1 - int(age // period_real)
            if 0 <= index < count:
                sums[index] += point["Sum"]
                counts[index] += point["SampleCount"]
        return [s / c if c else None for s, c in zip(sums, counts, strict=True)]

    def _track(self, profile: str, config: Mapping[str, Any], current: int, low: int, high: int, now: float) -> None:
        target = float(config["TargetValue"])
        metric = config["CustomizedMetricSpecification"]
        # Seconds since the last scaling activity, in AWS's seconds (the cooldowns' unit).
        since_last = (
            (now - self._last_scaling.get(profile, -math.inf))
            * self.world.time_scale
            * AWS_PERIOD_S
            / self.world.delays.alarm_period_s
        )
        periods = self._periods(metric, SCALE_IN_PERIODS)
        recent = [v for v in periods if v is not None]
        out = [v for v in periods[-SCALE_OUT_PERIODS:] if v is not None]
        if out and all(v > target for v in out) and since_last >= config.get("ScaleOutCooldown", 300):
            value = out[-1]
            wanted = min(high, math.ceil(current * value / target))
            if wanted > current:
                self._set(profile, wanted, current, f"{metric['MetricName']} {value:.2f} > target {target:g}")
        elif (
            not config.get("DisableScaleIn")
            and recent
            and all(v < SCALE_IN_RATIO * target for v in recent)
            and since_last >= config.get("ScaleInCooldown", 300)
        ):
            value = recent[-1]
            wanted = max(low, math.ceil(current * value / target))
            if wanted < current:
                self._set(
                    profile, wanted, current, f"{metric['MetricName']} {value:.2f} < {SCALE_IN_RATIO:g} x target {target:g}"
                )

    def _set(self, profile: str, wanted: int, current: int, why: str) -> None:
        spec = self.world.registry.profiles[profile]
        self.world.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=wanted)
        self._last_scaling[profile] = time.monotonic()
        self.world.log("service-scaling", f"{profile}: desired {current} -> {wanted} ({why})")
