"""Auto Scaling's moto patches and the accessors the world's Auto Scaling part moves groups with.

moto launches InService instances synchronously on SetDesiredCapacity, DescribeScalingActivities is
always empty and DescribeWarmPool lists no instance (moto keeps only the warm pool's configuration).
Here the desired capacity is only recorded (the world launches and terminates over time), and a site's
Groups keeps the scaling activities and warm pool instances that the two Describe calls answer.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from moto.autoscaling.models import Activity, FakeAutoScalingGroup
from moto.autoscaling.responses import AutoScalingResponse
from moto.core.responses import ActionResult
from moto.ec2.models.instances import InstanceBackend
from moto.ec2.models.launch_templates import LaunchTemplate

from servingctl_twin.patching import Backends, Patch, part_of, set_missing


class Groups:
    """A site's Auto Scaling state moto lacks: each group's scaling activities (newest first) and its
    warm pool's instances (id -> (moto's instance state, Warmed:* lifecycle state)), kept out of the
    group's instance list as AWS keeps them."""

    def __init__(self) -> None:
        self._activities: dict[str, list[Activity]] = {}
        self._warm: dict[str, dict[str, tuple[Any, str]]] = {}
        self._lock = threading.Lock()

    def activities(self, name: str | None) -> list[Activity]:
        """The group's activities, newest first (every group's without a name)."""
        with self._lock:
            return list(self._activities.get(name, [])) if name else [a for acts in self._activities.values() for a in acts]

    def warm_states(self, name: str) -> list[tuple[Any, str]]:
        """(moto's instance state, Warmed:* lifecycle state) of each warm pool instance of the group."""
        with self._lock:
            return list(self._warm.get(name, {}).values())

    def warm_instances(self, name: str) -> dict[str, str]:
        """Instance id -> Warmed:* lifecycle state of the group's warm pool instances."""
        with self._lock:
            return {i: lifecycle for i, (_, lifecycle) in self._warm.get(name, {}).items()}

    def record_activity(
        self, b: Backends, name: str, *, description: str, cause: str, status_code: str, status_message: str | None = None
    ) -> None:
        """Add a scaling activity (Successful, Failed, InProgress...) to the group's history."""
        now = datetime.now(UTC)
        activity = Activity(description, cause, asg(b, name), start_time=now, end_time=now, status_code=status_code)
        set_missing(activity, status_message=status_message, details="{}")  # serialised as StatusMessage, Details
        activity.progress = 100
        with self._lock:
            self._activities.setdefault(name, []).insert(0, activity)

    def launch_into_warm_pool(self, b: Backends, name: str) -> str:
        """Launch one instance of the group's launch template into its warm pool (Warmed:Pending); return its id."""
        instance_id = launch_instance(b, name, protected=False)
        self.to_warm_pool(b, name, instance_id)
        return instance_id

    def to_warm_pool(self, b: Backends, name: str, instance_id: str) -> None:
        """Move an instance out of the group into its warm pool, Warmed:Pending (reuse on scale-in, or a new one)."""
        group = asg(b, name)
        state = next(s for s in group.instance_states if s.instance.id == instance_id)
        group.instance_states = [s for s in group.instance_states if s is not state]
        with self._lock:
            self._warm.setdefault(name, {})[instance_id] = (state, "Warmed:Pending")

    def set_warm_lifecycle(self, b: Backends, name: str, instance_id: str, lifecycle_state: str) -> None:
        """Move a warm pool instance to a Warmed:* state; Warmed:Stopped stops it in EC2."""
        with self._lock:
            state, _ = self._warm[name][instance_id]
            self._warm[name][instance_id] = (state, lifecycle_state)
        if lifecycle_state == "Warmed:Stopped":
            b.autoscaling.ec2_backend.stop_instances([instance_id])

    def take_from_warm_pool(self, b: Backends, name: str, instance_id: str) -> None:
        """The group takes a warm instance into service: EC2 starts it, lifecycle Pending."""
        with self._lock:
            state, _ = self._warm[name].pop(instance_id)
        b.autoscaling.ec2_backend.start_instances([instance_id])
        state.lifecycle_state = "Pending"
        asg(b, name).instance_states.append(state)

    def terminate_warm_instance(self, b: Backends, name: str, instance_id: str) -> None:
        """Terminate a warm pool instance in EC2 and forget it."""
        with self._lock:
            self._warm[name].pop(instance_id, None)
        b.autoscaling.ec2_backend.terminate_instances([instance_id])


def _set_desired_capacity(self: FakeAutoScalingGroup, new_capacity: int | None) -> None:
    """Record the desired capacity only: the world launches and terminates instances over time."""
    self.desired_capacity = self.min_size if new_capacity is None else new_capacity


def _describe_scaling_activities(self: AutoScalingResponse) -> ActionResult:
    """Return the activities the world recorded for the group, newest first."""
    name = self._get_param("AutoScalingGroupName")
    groups = part_of(self.region, Groups)
    found = [] if groups is None else groups.activities(name)
    return ActionResult({"Activities": found[: int(self._get_param("MaxRecords") or 100)]})


def _describe_warm_pool(self: AutoScalingResponse) -> ActionResult:
    """The warm pool's configuration (moto's) and its instances with their Warmed:* states (the world's)."""
    name = self._get_param("AutoScalingGroupName")
    config = self.autoscaling_backend.describe_warm_pool(group_name=name)
    groups = part_of(self.region, Groups)
    warm = [] if groups is None else groups.warm_states(name)
    instances = [
        {
            "InstanceId": state.instance.id,
            "InstanceType": state.instance.instance_type,
            "AvailabilityZone": state.availability_zone,
            "LifecycleState": lifecycle,
            "HealthStatus": "Healthy",
        }
        for state, lifecycle in warm
    ]
    return ActionResult({"WarmPoolConfiguration": config, "Instances": instances})


def asg(b: Backends, name: str) -> FakeAutoScalingGroup:
    """The Auto Scaling group called name."""
    return b.autoscaling.autoscaling_groups[name]


def asg_tags(b: Backends, name: str) -> dict[str, str]:
    """The Auto Scaling group's tags, key -> value."""
    return {tag["Key"]: tag["Value"] for tag in asg(b, name).tags}


def asg_instances(b: Backends, name: str) -> list[tuple[str, str, bool]]:
    """(instance id, lifecycle state, protected from scale-in) of every instance of the group."""
    return [(s.instance.id, s.lifecycle_state, bool(s.protected_from_scale_in)) for s in asg(b, name).instance_states]


def launch_instance(b: Backends, name: str, *, protected: bool) -> str:
    """Launch one instance into the group in lifecycle state Pending; return its id."""
    group = asg(b, name)
    before = {s.instance.id for s in group.instance_states}
    group.replace_autoscaling_group_instances(1, group.get_propagated_tags())
    state = next(s for s in group.instance_states if s.instance.id not in before)
    state.lifecycle_state = "Pending"
    state.protected_from_scale_in = protected
    return state.instance.id


def launch_hook(b: Backends, name: str) -> Any:
    """The group's EC2_INSTANCE_LAUNCHING lifecycle hook (moto keeps it, plays nothing), None without one."""
    return next(
        (
            h
            for h in b.autoscaling.lifecycle_hooks.values()
            if h.auto_scaling_group_name == name and h.lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING"
        ),
        None,
    )


def warm_pool(b: Backends, name: str) -> Any:
    """The group's warm pool configuration (min_size, pool_state, instance_reuse_policy), None without one."""
    return asg(b, name).warm_pool


def launch_template_id(b: Backends, name: str) -> str:
    """Id of the launch template the group's next launch uses."""
    return str(_launch_template(b, name).id)


def launch_template_data(b: Backends, name: str) -> dict[str, Any]:
    """The LaunchTemplateData of the latest version of the group's launch template."""
    return dict(_launch_template(b, name).latest_version().data or {})


def _launch_template(b: Backends, name: str) -> LaunchTemplate:
    """The group's launch template (the twin's groups are all made from one)."""
    template = asg(b, name).ec2_launch_template
    if template is None:
        raise LookupError(f"Auto Scaling group {name} has no launch template")
    return template


def set_lifecycle(b: Backends, name: str, instance_id: str, lifecycle_state: str) -> None:
    """Move one instance of the group to lifecycle_state (InService, Terminating, ...)."""
    for state in asg(b, name).instance_states:
        if state.instance.id == instance_id:
            state.lifecycle_state = lifecycle_state


def terminate_instance(b: Backends, name: str, instance_id: str) -> None:
    """Remove the instance from the group and terminate it in EC2."""
    group = asg(b, name)
    group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]
    b.autoscaling.ec2_backend.terminate_instances([instance_id])


PATCHES = [
    # SetDesiredCapacity records the number; the world launches and terminates instances over time.
    Patch(
        "FakeAutoScalingGroup.set_desired_capacity",
        FakeAutoScalingGroup,
        "set_desired_capacity",
        ("self", "new_capacity"),
        _set_desired_capacity,
    ),
    # DescribeScalingActivities: the launches, terminations and failed launches the world recorded.
    Patch(
        "AutoScalingResponse.describe_scaling_activities",
        AutoScalingResponse,
        "describe_scaling_activities",
        ("self",),
        _describe_scaling_activities,
    ),
    # DescribeWarmPool: the pool's instances with their Warmed:* states.
    Patch("AutoScalingResponse.describe_warm_pool", AutoScalingResponse, "describe_warm_pool", ("self",), _describe_warm_pool),
    Patch(
        "FakeAutoScalingGroup.replace_autoscaling_group_instances",
        FakeAutoScalingGroup,
        "replace_autoscaling_group_instances",
        ("self", "count_needed", "propagated_tags"),
    ),
    Patch(
        "Activity.__init__",
        Activity,
        "__init__",
        ("self", "description", "cause", "auto_scaling_group", "activity_id", "start_time", "end_time", "status_code"),
    ),
    # A warm pool's instances stop and start in EC2.
    Patch("InstanceBackend.start_instances", InstanceBackend, "start_instances", ("self", "instance_ids")),
    Patch("InstanceBackend.stop_instances", InstanceBackend, "stop_instances", ("self", "instance_ids")),
]
