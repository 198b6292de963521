"""EC2 Auto Scaling's part of the world: what a group does over time after an API call.

Owns each pool's instances: the group launching or terminating an instance to match its desired
capacity (honouring max size and scale-in protection, and the instance type of the launch template the
group points at), failed launches under capacity-unavailable (each a Failed activity with AWS's status
message, retried), the ECS agent registering a container instance once InService, and the warm pool.

Warm pools (a pool whose group has one): the group keeps max size - desired (at least min size)
instances beside it. A new one launches into the pool (Warmed:Pending: launch, first boot, user
data; the ECS agent does not register, ECS_WARM_POOLS_CHECK) and stops (Warmed:Stopped). A
scale-out takes a stopped one first: EC2 starts it (Pending, warm_start_s) instead of launching and
booting a new one. With reuse on scale-in, a scale-in stops the instance back into the pool
(Warmed:Pending, park_s, then Warmed:Stopped; its ECS agent disconnects and reconnects at the next
start) and its volume keeps what earlier tasks put there (servingctl_twin.ecs.scheduler reads it).
Without reuse a scale-in terminates and the pool is refilled with a fresh instance.

A group with a launch lifecycle hook (a prepared warm pool) holds a new pool instance in
Warmed:Pending:Wait while the prepare step of its user data runs (the image pull, the weights' S3
sync and a vLLM run to /health that fills the compile cache: pull_s + prefetch_s + load_s), then the
user data completes the hook (Warmed:Pending:Proceed) and it stops with its pool's profiles on its
volume. Past the hook's heartbeat timeout it is abandoned (terminated). Taken into service, it
passes Pending:Wait (the user data sees InService and completes the hook at once, hook_s) and
Pending:Proceed. Each refill is logged with its GPU seconds (launch and prepare, billed as running).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from servingctl_twin.autoscaling.patches import (
    Groups,
    asg,
    asg_instances,
    launch_hook,
    launch_instance,
    launch_template_data,
    launch_template_id,
    set_lifecycle,
    terminate_instance,
    warm_pool,
)
from servingctl_twin.ecs import patches as ecs_patches

if TYPE_CHECKING:
    from servingctl_twin.world import World

# A failed launch's StatusMessage per capacity-unavailable class, as Auto Scaling reports a group that
# launches through EC2 Fleet: EC2's error code, then its text (Amazon EC2 Auto Scaling user guide,
# troubleshooting launch failures, capacity limits, AMI issues; EC2 API error codes).
_FLEET = "Could not launch On-Demand Instances. {code} - {text} Launching EC2 instance failed."
_CONTACT = "Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."
LAUNCH_FAILURE_MESSAGES: dict[str, str] = {
    "insufficient-capacity": _FLEET.format(
        code="InsufficientInstanceCapacity",
        text=(
            "We currently do not have sufficient {itype} capacity in the Availability Zone you requested ({az}). Our system will "
            "be working on provisioning additional capacity. You can currently get {itype} capacity by not specifying an "
            "Availability Zone in your request or choosing {others}."
        ),
    ),
    "vcpu-limit": _FLEET.format(
        code="VcpuLimitExceeded",
        text=(
            "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the "
            "specified instance type belongs to. " + _CONTACT
        ),
    ),
    "instance-limit": _FLEET.format(
        code="InstanceLimitExceeded",
        text=(
            "You have requested more instances (1) than your current instance limit of 0 allows for the specified instance "
            "type. " + _CONTACT
        ),
    ),
    "unsupported": _FLEET.format(
        code="Unsupported",
        text=(
            "Your requested instance type ({itype}) is not supported in your requested Availability Zone ({az}). Please retry "
            "your request by not specifying an Availability Zone or choosing {others}."
        ),
    ),
    "launch-template": _FLEET.format(
        code="InvalidParameterValue",
        text=("Value ({profile}) for parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN."),
    ),
    "ami": _FLEET.format(code="InvalidAMIID.NotFound", text="The image id '[{image}]' does not exist."),
}


@dataclass
class _Instance:
    """One instance of a pool as the world moves it."""

    pool: str
    asg_name: str
    cluster: str
    state: str  # Warming, Parking, Warm (warm pool), Pending, InService, Registered, Terminating
    due: float
    container_instance_arn: str | None = None
    instance_type: str = ""
    # Profiles whose image layers, weights and compile cache are on the instance's volume.
    cached: set[str] = field(default_factory=set)
    hook_done: bool = False  # the launch hook of its way into service was completed
    abandon: bool = False  # its prepare outlasts the hook's heartbeat timeout


class AutoScaling:
    """The Auto Scaling groups of the registry's pools, moved one world step at a time."""

    def __init__(self, world: World) -> None:
        self.world = world
        # What DescribeScalingActivities and DescribeWarmPool answer (the site's).
        self.groups = world.site.part(Groups)
        self.instances: dict[str, _Instance] = {}
        self._next_launch_attempt: dict[str, float] = {}

    def live_instances(self, asg_name: str) -> list[str]:
        return [i for i, s, _ in asg_instances(self.world.b, asg_name) if s not in ("Terminating", "Terminated")]

    def _launch_failure(self, itype: str) -> str | None:
        """The class of launch failure capacity-unavailable plays for the type (None: it launches)."""
        if "capacity-unavailable" in self.world.faults:
            return "insufficient-capacity"
        for fault in self.world.faults:
            target, _, kind = fault.removeprefix("capacity-unavailable=").partition(":")
            if fault.startswith("capacity-unavailable=") and target == itype:
                return kind or "insufficient-capacity"
        return None

    def _launch_failure_message(self, kind: str, itype: str, asg_name: str) -> str:
        """AWS's StatusMessage of the failed launch, with the group's zones and launch template's values."""
        zones = [f"{self.world.registry.region}{z}" for z in "abc"]
        data = launch_template_data(self.world.b, asg_name)
        profile = (data.get("IamInstanceProfile") or {}).get(
            "Arn"
        ) or f"arn:aws:iam::{self.world.b.autoscaling.account_id}:instance-profile/ecs-gpu"
        return LAUNCH_FAILURE_MESSAGES[kind].format(
            itype=itype,
            az=zones[0],
            others=", ".join(zones[1:]),
            profile=profile,
            image=data.get("ImageId") or "ami-0123456789abcdef0",
        )

    def _launch_type(self, pool_name: str, asg_name: str) -> str:
        """The instance type of the launch template the group points at (the pool's options)."""
        pool = self.world.registry.pools[pool_name]
        by_template = {template: itype for itype, template in pool.options()}
        return by_template.get(launch_template_id(self.world.b, asg_name), pool.instance_type)

    def _cluster(self, pool_name: str) -> str:
        return self.world.registry.profiles[self.world.registry.profiles_on_pool(pool_name)[0]].cluster

    def _takeable_warm(self, asg_name: str) -> str | None:
        return next((i for i, state in self.groups.warm_instances(asg_name).items() if state == "Warmed:Stopped"), None)

    def scale(self, pool_name: str, asg_name: str, now: float) -> None:
        group = asg(self.world.b, asg_name)
        live = self.live_instances(asg_name)
        desired = min(group.desired_capacity or 0, group.max_size or 0)  # CreateAutoScalingGroup requires MaxSize
        if desired > len(live) and now >= self._next_launch_attempt.get(asg_name, 0.0):
            warm = self._takeable_warm(asg_name)
            # Starting a stopped instance needs capacity of its type as much as a launch does.
            itype = self.instances[warm].instance_type if warm else self._launch_type(pool_name, asg_name)
            if (failure := self._launch_failure(itype)) is not None:
                # AWS keeps retrying the launch, each attempt a failed activity of its own.
                self._next_launch_attempt[asg_name] = self.world.after(self.world.delays.capacity_retry_s)
                message = self._launch_failure_message(failure, itype, asg_name)
                self.groups.record_activity(
                    self.world.b,
                    asg_name,
                    status_code="Failed",
                    status_message=message,
                    description="Launching a new EC2 instance.  Status Reason: " + message,
                    cause=launch_cause(len(live), desired),
                )
                self.world.log("launch-failed", f"{pool_name}: {failure} ({itype})")
            elif warm:
                self.groups.take_from_warm_pool(self.world.b, asg_name, warm)
                self.instances[warm].state, self.instances[warm].due = "Pending", self.world.after(self.world.delays.warm_start_s)
                self.groups.record_activity(
                    self.world.b,
                    asg_name,
                    status_code="Successful",
                    description=f"Launching a new EC2 instance from warm pool: {warm}",
                    cause=launch_cause(len(live), desired),
                )
                self.world.log("launch-warm", f"{pool_name}: {warm} Warmed:Stopped -> Pending")
            else:
                # NewInstancesProtectedFromScaleIn (managed termination protection), or the fault.
                shielded = "protected-instance" in self.world.faults or bool(group.new_instances_protected_from_scale_in)
                instance_id = launch_instance(self.world.b, asg_name, protected=shielded)
                cause = launch_cause(len(live), desired)
                self._launched(pool_name, asg_name, instance_id, itype, into_warm_pool=False, cause=cause)
        elif desired < len(live):
            protected = {i for i, _, p in asg_instances(self.world.b, asg_name) if p}
            config = warm_pool(self.world.b, asg_name)
            reuse = config is not None and bool((config.instance_reuse_policy or {}).get("ReuseOnScaleIn"))
            for instance_id in [i for i in live if i not in protected][: len(live) - desired]:
                info = self.instances.get(instance_id)
                if reuse and info is not None:
                    self.world.scheduler.stop_tasks_on(instance_id, now)
                    self.groups.to_warm_pool(self.world.b, asg_name, instance_id)
                    info.state, info.due = "Parking", self.world.after(self.world.delays.park_s)
                    self.world.log("to-warm-pool", f"{pool_name}: {instance_id} Warmed:Pending")
                    continue
                set_lifecycle(self.world.b, asg_name, instance_id, "Terminating")
                if info is not None:
                    info.state, info.due = "Terminating", self.world.after(self.world.delays.terminate_s)
                self.world.log("terminating", f"{pool_name}: {instance_id}")
        for instance_id, info in list(self.instances.items()):
            if info.asg_name != asg_name or now < info.due:
                continue
            if info.state == "Pending" and launch_hook(self.world.b, asg_name) is not None and not info.hook_done:
                # The launch hook holds it (Pending:Wait) until the user data, seeing InService as the
                # target, completes it at once.
                set_lifecycle(self.world.b, asg_name, instance_id, "Pending:Wait")
                info.hook_done, info.due = True, self.world.after(self.world.delays.hook_s)
                self.world.log("pending-wait", f"{pool_name}: {instance_id} Pending:Wait")
            elif info.state == "Pending":
                set_lifecycle(self.world.b, asg_name, instance_id, "InService")
                info.state, info.due = "InService", self.world.after(self.world.delays.register_s)
                self.world.log("in-service", f"{pool_name}: {instance_id}")
            elif info.state == "InService":
                if info.container_instance_arn:  # back from the warm pool: the agent reconnects
                    ecs_patches.set_agent_connected(self.world.b, info.cluster, info.container_instance_arn, True)
                else:
                    document = json.dumps({"instanceId": instance_id, "region": self.world.registry.region})
                    answer = self.world.ecs.register_container_instance(cluster=info.cluster, instanceIdentityDocument=document)
                    info.container_instance_arn = answer["containerInstance"]["containerInstanceArn"]
                info.state, info.due = "Registered", float("inf")
                self.world.log("registered", f"{pool_name}: {instance_id}")
            elif info.state == "Warming" and (hook := launch_hook(self.world.b, asg_name)) is not None:
                # The user data's prepare step runs; it completes the hook unless it outlasts the timeout.
                prepare_s = self.world.delays.pull_s + self.world.delays.prefetch_s + self.world.delays.load_s
                self.groups.set_warm_lifecycle(self.world.b, asg_name, instance_id, "Warmed:Pending:Wait")
                info.state = "Preparing"
                info.due = self.world.after(min(prepare_s, float(hook.heartbeat_timeout or 3600)))
                info.abandon = prepare_s > float(hook.heartbeat_timeout or 3600)
                self.world.log("warm-prepare", f"{pool_name}: {instance_id} Warmed:Pending:Wait ({hook.name})")
            elif info.state == "Preparing":
                if info.abandon:
                    self.groups.terminate_warm_instance(self.world.b, asg_name, instance_id)
                    del self.instances[instance_id]
                    self.world.log("warm-abandoned", f"{pool_name}: {instance_id} prepare outlasted the hook's timeout")
                    continue
                self.groups.set_warm_lifecycle(self.world.b, asg_name, instance_id, "Warmed:Pending:Proceed")
                info.cached |= set(self.world.registry.profiles_on_pool(pool_name))
                gpu_s = (
                    self.world.delays.launch_s
                    + self.world.delays.pull_s
                    + self.world.delays.prefetch_s
                    + self.world.delays.load_s
                )
                self.world.log(
                    "warm-prepared", f"{pool_name}: {instance_id} prepared ({gpu_s / 60:.1f} GPU minutes with the launch)"
                )
                info.state, info.due = "Parking", self.world.after(self.world.delays.park_s)
            elif info.state in ("Warming", "Parking"):
                if info.container_instance_arn:
                    ecs_patches.set_agent_connected(self.world.b, info.cluster, info.container_instance_arn, False)
                self.groups.set_warm_lifecycle(self.world.b, asg_name, instance_id, "Warmed:Stopped")
                info.state, info.due = "Warm", float("inf")
                self.world.log("warm-stopped", f"{pool_name}: {instance_id} Warmed:Stopped")
            elif info.state == "Terminating":
                self.world.scheduler.stop_tasks_on(instance_id, now)
                if info.container_instance_arn:
                    self.world.ecs.deregister_container_instance(
                        cluster=info.cluster, containerInstance=info.container_instance_arn, force=True
                    )
                terminate_instance(self.world.b, asg_name, instance_id)
                self.groups.record_activity(
                    self.world.b,
                    asg_name,
                    status_code="Successful",
                    description=f"Terminating EC2 instance: {instance_id}",
                    cause=f"At {activity_stamp()} an instance was taken out of service in response to a difference between "
                    "desired and actual capacity, shrinking the capacity.",
                )
                del self.instances[instance_id]
                self.world.log("terminated", f"{pool_name}: {instance_id}")

    def _launched(self, pool_name: str, asg_name: str, instance_id: str, itype: str, *, into_warm_pool: bool, cause: str) -> None:
        """A new instance of the group (into service, or into its warm pool): tracked until it boots,
        its successful activity recorded as AWS words it, and logged."""
        self.instances[instance_id] = _Instance(
            pool_name,
            asg_name,
            self._cluster(pool_name),
            "Warming" if into_warm_pool else "Pending",
            self.world.after(self.world.delays.launch_s),
            instance_type=itype,
        )
        where = " into warm pool" if into_warm_pool else ""
        self.groups.record_activity(
            self.world.b,
            asg_name,
            status_code="Successful",
            description=f"Launching a new EC2 instance{where}: {instance_id}",
            cause=cause,
        )
        event, state = ("launch-into-warm-pool", "Warmed:Pending") if into_warm_pool else ("launch", "Pending")
        self.world.log(event, f"{pool_name}: {instance_id} {state} ({itype})")

    def keep_warm_pool(self, pool_name: str, asg_name: str, now: float) -> None:
        """Keep max size - desired (at least min size) instances in the group's warm pool."""
        config = warm_pool(self.world.b, asg_name)
        if config is None:
            return
        group = asg(self.world.b, asg_name)
        desired = group.desired_capacity or 0
        prepared = config.max_group_prepared_capacity or group.max_size or 0
        wanted = max(int(config.min_size or 0), prepared - desired)
        warm = self.groups.warm_instances(asg_name)
        if len(warm) < wanted and now >= self._next_launch_attempt.get(asg_name, 0.0):
            itype = self._launch_type(pool_name, asg_name)
            if self._launch_failure(itype) is not None:
                self._next_launch_attempt[asg_name] = self.world.after(self.world.delays.capacity_retry_s)
                return
            instance_id = self.groups.launch_into_warm_pool(self.world.b, asg_name)
            cause = (
                f"At {activity_stamp()} an instance was launched in response to a difference between desired and actual "
                f"warm pool capacity, increasing the capacity from {len(warm)} to {wanted}."
            )
            self._launched(pool_name, asg_name, instance_id, itype, into_warm_pool=True, cause=cause)
        elif len(warm) > wanted and desired == len(self.live_instances(asg_name)):
            # More stopped instances than the pool keeps (a reused one came back beside a spare).
            surplus = next((i for i, state in warm.items() if state == "Warmed:Stopped"), None)
            if surplus is not None:
                self.groups.terminate_warm_instance(self.world.b, asg_name, surplus)
                self.instances.pop(surplus, None)
                self.world.log("terminated", f"{pool_name}: {surplus} (warm pool surplus)")


def launch_cause(current: int, desired: int) -> str:
    """The Cause text EC2 Auto Scaling writes on a scale-out activity."""
    return (
        f"At {activity_stamp()} an instance was started in response to a difference between desired "
        f"and actual capacity, increasing the capacity from {current} to {desired}."
    )


def activity_stamp() -> str:
    """Now, as a scaling activity's Cause writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
