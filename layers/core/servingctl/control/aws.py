"""What the steps read from and change in ECS, Auto Scaling, ELBv2 and EC2 (boto3 clients injected)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from servingctl.store.models import InstanceSpan

if TYPE_CHECKING:
    from types_boto3_application_autoscaling import ApplicationAutoScalingClient
    from types_boto3_autoscaling import AutoScalingClient
    from types_boto3_autoscaling.type_defs import ActivityTypeDef
    from types_boto3_ec2 import EC2Client
    from types_boto3_ecs import ECSClient
    from types_boto3_ecs.literals import DesiredStatusType
    from types_boto3_ecs.type_defs import ContainerInstanceTypeDef, TaskTypeDef
    from types_boto3_elbv2 import ElasticLoadBalancingv2Client
    from types_boto3_logs import CloudWatchLogsClient

# Scaling activity outcomes that mean the launch will not happen (AWS keeps retrying behind them).
FAILED_ACTIVITY_CODES = frozenset({"Failed", "Cancelled"})
# Target states that still hold a registration (anything but gone/unused counts as not drained).
GONE_TARGET_STATES = frozenset({"unused"})
# EC2 stops billing an instance once it is shutting down.
GONE_INSTANCE_STATES = frozenset({"shutting-down", "terminated"})
# A stopped instance costs its volumes only: back in a warm pool and stopped, it counts as released.
PARKED_INSTANCE_STATES = frozenset({"stopped"})
# Warm pool lifecycle states of an instance a scale-out can take (Warmed:Pending* still initialises).
TAKEABLE_WARM_STATES = frozenset({"Warmed:Stopped", "Warmed:Running", "Warmed:Hibernated"})


@dataclass(frozen=True)
class ServiceCounts:
    """ECS service counters."""

    desired: int
    running: int
    pending: int


@dataclass(frozen=True)
class AsgInstance:
    """One instance of an Auto Scaling group."""

    instance_id: str
    lifecycle: str
    protected: bool


@dataclass(frozen=True)
class AsgView:
    """An Auto Scaling group's sizes and instances."""

    name: str
    desired: int
    min_size: int
    max_size: int
    instances: tuple[AsgInstance, ...]
    launch_template_id: str | None = None

    def in_service(self) -> list[str]:
        """Ids of InService instances."""
        return [i.instance_id for i in self.instances if i.lifecycle == "InService"]


def service_counts(ecs: ECSClient, cluster: str, service: str) -> ServiceCounts:
    """Desired, running and pending counts of an ECS service."""
    found = ecs.describe_services(cluster=cluster, services=[service])["services"]
    if not found:
        raise LookupError(f"ECS service {service} not found in cluster {cluster}")
    svc = found[0]
    return ServiceCounts(svc.get("desiredCount", 0), svc.get("runningCount", 0), svc.get("pendingCount", 0))


def set_service_desired(ecs: ECSClient, cluster: str, service: str, count: int, health_grace_s: int | None = None) -> None:
    """Set an ECS service's desired count (and its health-check grace period when given)."""
    if health_grace_s is None:
        ecs.update_service(cluster=cluster, service=service, desiredCount=count)
    else:
        ecs.update_service(cluster=cluster, service=service, desiredCount=count, healthCheckGracePeriodSeconds=health_grace_s)


def set_replica_bounds(
    appautoscaling: ApplicationAutoScalingClient, cluster: str, service: str, min_count: int, max_count: int
) -> None:
    """Bound ECS service auto scaling of the service to min_count..max_count tasks (0..0 holds it at
    rest: target tracking can then neither start a stopped profile nor keep one up)."""
    appautoscaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=f"service/{cluster}/{service}",
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=min_count,
        MaxCapacity=max_count,
    )


def describe_asg(autoscaling: AutoScalingClient, name: str) -> AsgView:
    """Sizes and instances of an Auto Scaling group."""
    groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    if not groups:
        raise LookupError(f"Auto Scaling group {name} not found")
    g = groups[0]
    instances = tuple(
        AsgInstance(i["InstanceId"], i.get("LifecycleState", ""), bool(i.get("ProtectedFromScaleIn")))
        for i in g.get("Instances", [])
    )
    template = (g.get("LaunchTemplate") or {}).get("LaunchTemplateId")
    return AsgView(name, g["DesiredCapacity"], g["MinSize"], g["MaxSize"], instances, template)


def warm_instances(autoscaling: AutoScalingClient, name: str) -> tuple[AsgInstance, ...]:
    """Instances in the group's warm pool with their Warmed:* lifecycle state (none without a pool)."""
    answer = autoscaling.describe_warm_pool(AutoScalingGroupName=name)
    return tuple(
        AsgInstance(i["InstanceId"], i.get("LifecycleState", ""), bool(i.get("ProtectedFromScaleIn")))
        for i in answer.get("Instances", [])
    )


def use_launch_template(autoscaling: AutoScalingClient, name: str, template_id: str) -> None:
    """Point the group's next launches at another launch template (another instance type); MinSize stays 0."""
    autoscaling.update_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=0, LaunchTemplate={"LaunchTemplateId": template_id, "Version": "$Latest"}
    )


def set_asg_desired(autoscaling: AutoScalingClient, name: str, count: int) -> None:
    """Set the group's desired capacity now, ignoring cooldowns (the start skips the provider's alarm delay)."""
    autoscaling.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=count, HonorCooldown=False)


def scale_asg_to_zero(autoscaling: AutoScalingClient, name: str) -> None:
    """Desired and min 0, so neither the group nor the capacity provider keeps an instance."""
    autoscaling.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, DesiredCapacity=0)


def clear_protection(autoscaling: AutoScalingClient, name: str, instance_ids: list[str]) -> None:
    """Clear scale-in protection: a protected instance survives desired 0."""
    if instance_ids:
        autoscaling.set_instance_protection(AutoScalingGroupName=name, InstanceIds=instance_ids, ProtectedFromScaleIn=False)


def failed_activity_ids(autoscaling: AutoScalingClient, name: str) -> list[str]:
    """Ids of the ASG's failed or cancelled scaling activities AWS still lists."""
    activities = autoscaling.describe_scaling_activities(AutoScalingGroupName=name, MaxRecords=20)["Activities"]
    return [a["ActivityId"] for a in activities if a.get("StatusCode") in FAILED_ACTIVITY_CODES]


def failed_launch(autoscaling: AutoScalingClient, name: str, known: set[str]) -> tuple[str, str] | None:
    """(activity id, AWS's status message) of a failed or cancelled scaling activity not among the known ids."""
    activities = autoscaling.describe_scaling_activities(AutoScalingGroupName=name, MaxRecords=20)["Activities"]
    for activity in activities:
        if activity.get("StatusCode") in FAILED_ACTIVITY_CODES and activity["ActivityId"] not in known:
            return activity["ActivityId"], activity.get("StatusMessage") or activity.get("Description") or activity["StatusCode"]
    return None


TERMINATING = "Terminating EC2 instance: "
# A successful launch into service names its instance: "Launching a new EC2 instance: i-..." (or, taken
# from the warm pool, "... from warm pool: i-..."); a launch into the warm pool is not in service.
LAUNCHED = re.compile(r"Launching a new EC2 instance(?: from warm pool)?: (i-\w+)$")


def _activities_since(autoscaling: AutoScalingClient, name: str, since: datetime) -> list[ActivityTypeDef]:
    """The group's activities that began at or after since; AWS lists them newest first, a page at a time."""
    found: list[ActivityTypeDef] = []
    for page in autoscaling.get_paginator("describe_scaling_activities").paginate(AutoScalingGroupName=name):
        for activity in page["Activities"]:
            if activity["StartTime"] < since:
                return found
            found.append(activity)
    return found


def _terminations(activities: list[ActivityTypeDef]) -> dict[str, datetime]:
    """Instance id -> the end of its "Terminating EC2 instance" activity among these."""
    ended = {}
    for activity in activities:
        description = activity.get("Description") or ""
        if description.startswith(TERMINATING):
            ended[description.removeprefix(TERMINATING).strip()] = activity.get("EndTime") or activity["StartTime"]
    return ended


def termination_times(autoscaling: AutoScalingClient, name: str, since: datetime) -> dict[str, datetime]:
    """Instance id -> when the group finished terminating it (its "Terminating EC2 instance"
    activity's end), for the activities AWS lists that began at or after since."""
    return _terminations(_activities_since(autoscaling, name, since))


def instance_spans(autoscaling: AutoScalingClient, name: str, since: datetime) -> list[InstanceSpan]:
    """Each instance the group launched into service or terminated since since, from its launch (since
    when it was already running) to its termination's end (None while it runs), oldest first."""
    activities = _activities_since(autoscaling, name, since)
    launched: dict[str, datetime] = {}
    for activity in activities:
        match = LAUNCHED.match(activity.get("Description") or "")
        if match and activity.get("StatusCode") == "Successful":
            launched[match.group(1)] = activity["StartTime"]
    ended = _terminations(activities)
    spans = [
        InstanceSpan(instance_id=i, started_at=launched.get(i, since), stopped_at=ended.get(i))
        for i in set(launched) | set(ended)
    ]
    return sorted(spans, key=lambda s: (s.started_at, s.instance_id))


def container_instances(ecs: ECSClient, cluster: str) -> list[ContainerInstanceTypeDef]:
    """Every container instance of the cluster, described."""
    arns: list[str] = []
    for page in ecs.get_paginator("list_container_instances").paginate(cluster=cluster):
        arns.extend(page["containerInstanceArns"])
    found: list[ContainerInstanceTypeDef] = []
    for start in range(0, len(arns), 100):
        found += ecs.describe_container_instances(cluster=cluster, containerInstances=arns[start : start + 100])[
            "containerInstances"
        ]
    return found


def registered_instances(ecs: ECSClient, cluster: str) -> set[str]:
    """EC2 ids of the cluster's ACTIVE container instances whose agent is connected."""
    return {
        ci["ec2InstanceId"]
        for ci in container_instances(ecs, cluster)
        if ci.get("status") == "ACTIVE" and ci.get("agentConnected", True)
    }


def service_tasks(ecs: ECSClient, cluster: str, service: str, desired_status: DesiredStatusType) -> list[TaskTypeDef]:
    """The service's tasks with the given desired status, described."""
    arns: list[str] = []
    for page in ecs.get_paginator("list_tasks").paginate(cluster=cluster, serviceName=service, desiredStatus=desired_status):
        arns.extend(page["taskArns"])
    tasks: list[TaskTypeDef] = []
    for start in range(0, len(arns), 100):
        tasks.extend(ecs.describe_tasks(cluster=cluster, tasks=arns[start : start + 100])["tasks"])
    # ECS tags a service's tasks with group "service:<name>"; filtering here too keeps us exact.
    return [t for t in tasks if t.get("group") == f"service:{service}"]


def task_ip(task: TaskTypeDef) -> str | None:
    """Private IPv4 of an awsvpc task (the ALB target id), None before its ENI is attached."""
    for attachment in task.get("attachments", []):
        for detail in attachment.get("details", []):
            if detail.get("name") == "privateIPv4Address":
                return str(detail["value"])
    return None


def stopped_reason(task: TaskTypeDef) -> str:
    """The task's stopped reason with its containers' reasons and exit codes."""
    parts = [task.get("stoppedReason") or task.get("stopCode") or "stopped"]
    for container in task.get("containers", []):
        bits = [
            b for b in (container.get("reason"), f"exit code {container['exitCode']}" if "exitCode" in container else None) if b
        ]
        if bits:
            parts.append(f"{container.get('name', 'container')}: {', '.join(bits)}")
    return "; ".join(parts)


def target_states(elbv2: ElasticLoadBalancingv2Client, target_group_arn: str) -> dict[str, str]:
    """Target id -> health state of every target registered in the group."""
    described = elbv2.describe_target_health(TargetGroupArn=target_group_arn)["TargetHealthDescriptions"]
    return {d["Target"]["Id"]: d["TargetHealth"]["State"] for d in described}


def instance_states(ec2: EC2Client, instance_ids: list[str]) -> dict[str, str]:
    """Instance id -> EC2 state name (instances EC2 no longer knows are absent)."""
    if not instance_ids:
        return {}
    states: dict[str, str] = {}
    # A filter (not InstanceIds) so instances EC2 already forgot do not fail the whole call.
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "instance-id", "Values": instance_ids}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                states[instance["InstanceId"]] = instance["State"]["Name"]
    return states


def launch_times(ec2: EC2Client, instance_ids: list[str]) -> dict[str, datetime]:
    """Instance id -> EC2 LaunchTime (the last start for a stopped-and-started instance)."""
    times: dict[str, datetime] = {}
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "instance-id", "Values": instance_ids}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                if instance.get("LaunchTime") is not None:
                    times[instance["InstanceId"]] = instance["LaunchTime"]
    return times


def container_instance_registered_at(ecs: ECSClient, cluster: str, instance_id: str) -> datetime | None:
    """When the instance's ECS agent registered it in the cluster, None before it did."""
    return next(
        (ci.get("registeredAt") for ci in container_instances(ecs, cluster) if ci.get("ec2InstanceId") == instance_id), None
    )


def log_events(logs: CloudWatchLogsClient, group: str, stream: str, since: datetime | None) -> list[tuple[datetime, str]]:
    """(CloudWatch's timestamp, line) of a log stream's events from since on; none before it exists."""
    kwargs: dict[str, Any] = {"logGroupName": group, "logStreamNames": [stream]}
    if since is not None:
        kwargs["startTime"] = int(since.timestamp() * 1000)
    events: list[tuple[datetime, str]] = []
    try:
        for page in logs.get_paginator("filter_log_events").paginate(**kwargs):
            events += [(datetime.fromtimestamp(e["timestamp"] / 1000, UTC), e["message"]) for e in page["events"]]
    except logs.exceptions.ResourceNotFoundException:
        return []  # the container has not written its first line yet
    return events
