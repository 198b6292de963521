"""The world simulator: plays AWS's part over time in the local twin, with delays scaled down.

Owns what AWS does on its own after an API call: the capacity provider and the ASG launching or
terminating an instance (honouring max size and scale-in protection, and the instance type of the
launch template the group points at), the ASG's warm pool (see below), container instance
registration, the ECS service scheduler placing and stopping tasks (PROVISIONING -> PENDING ->
RUNNING -> ... -> STOPPED, and replacing a task whose target stays unhealthy past the service's
health check grace period), ALB target registration and deregistration (what the load balancer
does with them, its health checks, draining and metrics, is servingctl.local.elbv2.load_balancers's), and a real
model server process per RUNNING task, listening at the task's ENI address (the twin's VPC is a
loopback range), and injects faults. Reads and writes go through the public APIs where
they can express it, and through servingctl.local.moto_patches where they cannot.

Warm pools (a pool whose group has one): the group keeps max size - desired (at least min size)
instances beside it. A new one launches into the pool (Warmed:Pending: launch, first boot, user
data; the ECS agent does not register, ECS_WARM_POOLS_CHECK) and stops (Warmed:Stopped). A
scale-out takes a stopped one first: EC2 starts it (Pending, warm_start_s) instead of launching and
booting a new one. With reuse on scale-in, a scale-in stops the instance back into the pool
(Warmed:Pending, park_s, then Warmed:Stopped; its ECS agent disconnects and reconnects at the next
start) and its volume keeps what earlier tasks put there: the image layers (a task's pull takes
warm_pull_s), the weights and the vLLM compile cache (the load is shorter by weights_sync_s and
compile_cache_s). Without reuse a scale-in terminates and the pool is refilled with a fresh instance.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from servingctl.local import moto_patches as mp
from servingctl.local.elbv2.load_balancers import LoadBalancers
from servingctl.local.faults import check_fault, execution_lag_s
from servingctl.local.modelserver import ModelServerProcess, simulator_server, tiny_model_dir, vllm_server
from servingctl.registry.models import Registry

# (service signing name, operation) throttled once under throttle-once; each maps to its error shape.
THROTTLED = {
    ("lambda", "Invoke"): "TooManyRequestsException",
    ("ecs", "UpdateService"): "ThrottlingException",
    ("ecs", "DescribeTasks"): "ThrottlingException",
    ("autoscaling", "UpdateAutoScalingGroup"): "Throttling",
    ("autoscaling", "SetDesiredCapacity"): "Throttling",
    ("elasticloadbalancing", "DescribeTargetHealth"): "Throttling",
}
WORLD_AGENT = "servingctl-world"
# profile_steps actions failed by a fault (fault -> action), answered as Lambda answers a handler that raised.
FAILED_STEPS = {"roll-back-fails": "roll_back", "prepare-stop-fails-once": "prepare_stop"}
STEP_FAILURE = ("An error occurred (InternalServerError) when calling the {operation} operation (reached max retries: 4): "
                "Internal server error")
# A failed launch's StatusMessage per capacity-unavailable class, as Auto Scaling reports a group that
# launches through EC2 Fleet: EC2's error code, then its text (Amazon EC2 Auto Scaling user guide,
# troubleshooting launch failures, capacity limits, AMI issues; EC2 API error codes).
_FLEET = "Could not launch On-Demand Instances. {code} - {text} Launching EC2 instance failed."
_CONTACT = "Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."
LAUNCH_FAILURE_MESSAGES: dict[str, str] = {
    "insufficient-capacity": _FLEET.format(code="InsufficientInstanceCapacity", text=(
        "We currently do not have sufficient {itype} capacity in the Availability Zone you requested ({az}). Our system will "
        "be working on provisioning additional capacity. You can currently get {itype} capacity by not specifying an "
        "Availability Zone in your request or choosing {others}.")),
    "vcpu-limit": _FLEET.format(code="VcpuLimitExceeded", text=(
        "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the "
        "specified instance type belongs to. " + _CONTACT)),
    "instance-limit": _FLEET.format(code="InstanceLimitExceeded", text=(
        "You have requested more instances (1) than your current instance limit of 0 allows for the specified instance "
        "type. " + _CONTACT)),
    "unsupported": _FLEET.format(code="Unsupported", text=(
        "Your requested instance type ({itype}) is not supported in your requested Availability Zone ({az}). Please retry "
        "your request by not specifying an Availability Zone or choosing {others}.")),
    "launch-template": _FLEET.format(code="InvalidParameterValue", text=(
        "Value ({profile}) for parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN.")),
    "ami": _FLEET.format(code="InvalidAMIID.NotFound", text="The image id '[{image}]' does not exist."),
}
CRASH_REASON = "Essential container in task exited"
# ECS's stopped reason for a task its service replaced after failed ELB health checks.
ELB_UNHEALTHY_REASON = "Task failed ELB health checks in (target-group {target_group})"
# RunTask's failure reason when Fargate has no capacity for the task (ECS's words).
FARGATE_CAPACITY_UNAVAILABLE = "Capacity is unavailable at this time. Please try again later or in a different availability zone"
# PREFETCHING: the world's name for PENDING while the prefetch container syncs the weights.
_PENDING_TASK = ("PROVISIONING", "PENDING", "PREFETCHING", "ACTIVATING")
# The init container of Terraform's serving-profile module and its lines (its prefetch_command).
PREFETCH_CONTAINER = "prefetch-weights"
PREFETCH_LINES = ("servingctl prefetch: syncing {model}", "servingctl prefetch: done")
# Real seconds between two shipments of a container's new output lines to CloudWatch Logs.
LOG_SHIP_S = 0.2
# A real vLLM loads in real seconds, which the time scale does not shorten: its grace period is at
# least what the twin gives a real server to answer /health (ModelServerProcess.wait_healthy's default).
REAL_SERVER_LOAD_S = 300.0
# The model container's port (Terraform's container_port): the target's port, where its server listens.
CONTAINER_PORT = 8000


@dataclass(frozen=True)
class Delays:
    """AWS's delays in simulated seconds (divided by the twin's time scale); defaults make a ~15 min start."""

    scale_out_s: float = 60.0  # capacity provider alarm before it raises an ASG at 0 for a waiting task
    launch_s: float = 120.0  # instance Pending -> InService
    register_s: float = 60.0  # InService -> ECS agent registers the container instance
    provision_s: float = 5.0  # task PROVISIONING -> PENDING
    pull_s: float = 120.0  # task PENDING: image pull
    prefetch_s: float = 60.0  # task PENDING after the pull -> RUNNING: the prefetch container's S3 sync (none on a warm volume)
    load_s: float = 540.0  # RUNNING -> the model answers /health (weights download and load)
    stop_s: float = 10.0  # task STOPPING -> STOPPED
    terminate_s: float = 60.0  # instance Terminating -> terminated
    crash_after_s: float = 30.0  # task-crash: RUNNING -> STOPPED
    capacity_retry_s: float = 120.0  # capacity-unavailable: interval of failed launch attempts
    # Warm pools. EC2 starts a stopped instance in well under a minute and skips the first boot
    # (AMI, cloud-init, user data) a launch pays: Stopped -> InService.
    warm_start_s: float = 40.0
    park_s: float = 30.0  # reuse on scale-in: InService -> Warmed:Stopped (EC2 stop)
    warm_pull_s: float = 5.0  # task PENDING -> RUNNING when the image layers are on the volume (manifest check)
    # Parts of load_s a warm volume saves: the 168 GB reference checkpoint's sync from S3 through gp3
    # at 1000 MiB/s (the registry's weights_pass_s, 161 s), and the torch.compile run a kept
    # VLLM_CACHE_ROOT replaces with a cache read (vLLM logs tens of seconds to minutes for it).
    weights_sync_s: float = 161.0
    compile_cache_s: float = 60.0
    # The service's health check grace period (the reference's 1800 s): ECS ignores ELB health
    # checks that long after a task starts, then replaces a task whose target is unhealthy.
    health_grace_s: float = 1800.0
    tick_s: float = 0.01  # real seconds between world steps (never scaled)

    def scaled(self, factor: float) -> Delays:
        """The same delays multiplied by factor (tick and thresholds unchanged)."""
        values = {k: v * factor for k, v in self.__dict__.items() if k.endswith("_s") and k != "tick_s"}
        return Delays(**{**self.__dict__, **values})


@dataclass
class _Instance:
    pool: str
    asg_name: str
    cluster: str
    state: str  # Warming, Parking, Warm (warm pool), Pending, InService, Registered, Terminating
    due: float
    container_instance_arn: str | None = None
    instance_type: str = ""
    # Profiles whose image layers, weights and compile cache are on the instance's volume.
    cached: set[str] = field(default_factory=set)


@dataclass
class _Task:
    profile: str
    arn: str
    task: Any  # moto's Task
    instance_id: str
    phase: str
    due: float
    target_id: str | None = None
    server: ModelServerProcess | None = None
    loaded_at: float = 0.0
    running_at: float = 0.0
    healthy: bool = False
    stop_reason: str = ""
    stop_code: str = ""
    grace_real_s: float = 0.0  # the service's health-check grace period when the task started, real seconds
    log_offset: int = 0  # bytes of the model server's output already shipped to CloudWatch Logs
    next_ship: float = 0.0


@dataclass
class Event:
    """Something the world did, at simulated seconds since the world started."""

    sim_s: float
    kind: str
    detail: str
    real: float = field(default_factory=time.time)


class World:
    """The background thread that plays AWS's part. start() / stop(); stop() kills every model server."""

    def __init__(
        self,
        b: mp.Backends,
        registry: Registry,
        *,
        endpoint_url: str,
        load_balancers: LoadBalancers,
        model_server: str = "sim",
        faults: Sequence[str] = (),
        time_scale: float = 20.0,
        delays: Delays | None = None,
        logdir: Path | None = None,
    ) -> None:
        self.b = b
        self.registry = registry
        self.load_balancers = load_balancers
        self.model_server = model_server
        _check_faults(faults, model_server)
        self.faults: frozenset[str] = frozenset(faults)
        mp.set_execution_lag(execution_lag_s(self.faults), WORLD_AGENT)
        self.time_scale = time_scale
        self.delays = delays or Delays()
        self.logdir = logdir
        self.events: list[Event] = []
        self._instances: dict[str, _Instance] = {}
        self._tasks: dict[str, _Task] = {}
        self._demand_since: dict[str, float] = {}
        self._next_launch_attempt: dict[str, float] = {}
        self._throttled: set[tuple[str, str]] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self.error: BaseException | None = None
        config = Config(user_agent_extra=WORLD_AGENT, retries={"mode": "standard", "max_attempts": 3})
        kw = {"endpoint_url": endpoint_url, "region_name": registry.region, "config": config,
              "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        self.ecs, self.elbv2, self.logs = (boto3.client(s, **kw) for s in ("ecs", "elbv2", "logs"))

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background thread."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="servingctl-world", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and every model server process it started."""
        self._stop.set()
        mp.set_execution_lag(None)
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for task in self._tasks.values():
                if task.server is not None:
                    task.server.stop(grace_s=5)
                    task.server = None

    def set_faults(self, faults: Sequence[str]) -> None:
        """Replace the active faults (throttle-once throttles each API once more)."""
        _check_faults(faults, self.model_server)
        with self._lock:
            self.faults = frozenset(faults)
            self._throttled.clear()
        mp.set_execution_lag(execution_lag_s(self.faults), WORLD_AGENT)

    def sim_now(self) -> float:
        """Simulated seconds since the world started."""
        return (time.monotonic() - self._t0) * self.time_scale

    def events_of(self, kind: str) -> list[Event]:
        """The events of one kind, oldest first."""
        with self._lock:
            return [e for e in self.events if e.kind == kind]

    def model_servers(self) -> dict[str, str]:
        """profile -> URL of its running model server process."""
        with self._lock:
            return {t.profile: t.server.url for t in self._tasks.values() if t.server is not None and t.server.running}

    def _log(self, kind: str, detail: str) -> None:
        self.events.append(Event(self.sim_now(), kind, detail))

    def _after(self, sim_seconds: float) -> float:
        return time.monotonic() + sim_seconds / self.time_scale

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    self._step()
            except Exception as exc:  # keep AWS's part playing; the error is visible on the world
                if repr(exc) != repr(self.error):
                    self._log("world-error", repr(exc))
                self.error = exc
            self._stop.wait(self.delays.tick_s)

    # ---- one step -----------------------------------------------------------------------------
    def _step(self) -> None:
        now = time.monotonic()
        for pool_name, pool in self.registry.pools.items():
            self._capacity_provider(pool_name, pool.asg_name, now)
            self._auto_scaling(pool_name, pool.asg_name, now)
            self._warm_pool(pool_name, pool.asg_name, now)
        for name in self.registry.profiles:
            self._scheduler(name, now)
        for task in list(self._tasks.values()):
            self._task_lifecycle(task, now)
            self._load(task, now)
            self._health(task, now)
            self._ship_logs(task, now)

    def _pool_profiles(self, pool_name: str) -> list[str]:
        return self.registry.profiles_on_pool(pool_name)

    def _service(self, profile: str) -> Any:
        p = self.registry.profiles[profile]
        return next(s for s in mp.services(self.b) if s.cluster_name == p.cluster and s.name == p.service)

    def _live_tasks(self, profile: str) -> list[_Task]:
        return [t for t in self._tasks.values() if t.profile == profile and t.task.desired_status == "RUNNING"]

    def _live_instances(self, asg_name: str) -> list[str]:
        return [i for i, s, _ in mp.asg_instances(self.b, asg_name) if s not in ("Terminating", "Terminated")]

    def _capacity_provider(self, pool_name: str, asg_name: str, now: float) -> None:
        """Managed scaling: a task waiting for an empty pool raises the ASG to 1 after the alarm delay."""
        group = mp.asg(self.b, asg_name)
        waiting = any(
            self._service(p).desired_count > len(self._live_tasks(p)) for p in self._pool_profiles(pool_name)
        )
        if not waiting or group.desired_capacity or self._live_instances(asg_name):
            self._demand_since.pop(pool_name, None)
            return
        since = self._demand_since.setdefault(pool_name, now)
        if now - since >= self.delays.scale_out_s / self.time_scale:
            group.desired_capacity = 1
            mp.record_activity(
                self.b, asg_name, status_code="Successful",
                description="Updating the desired capacity of the group",
                cause=f"At {_stamp()} a monitor alarm in state ALARM triggered policy ECSManagedAutoScalingPolicy "
                "changing the desired capacity from 0 to 1.",
            )
            self._log("scale-out", f"{pool_name}: capacity provider set desired 1")

    def _launch_failure(self, itype: str) -> str | None:
        """The class of launch failure capacity-unavailable plays for the type (None: it launches)."""
        if "capacity-unavailable" in self.faults:
            return "insufficient-capacity"
        for fault in self.faults:
            target, _, kind = fault.removeprefix("capacity-unavailable=").partition(":")
            if fault.startswith("capacity-unavailable=") and target == itype:
                return kind or "insufficient-capacity"
        return None

    def _launch_failure_message(self, kind: str, itype: str, asg_name: str) -> str:
        """AWS's StatusMessage of the failed launch, with the group's zones and launch template's values."""
        zones = [f"{self.registry.region}{z}" for z in "abc"]
        data = mp.launch_template_data(self.b, asg_name)
        profile = (data.get("IamInstanceProfile") or {}).get("Arn") or f"arn:aws:iam::{self.b.autoscaling.account_id}:instance-profile/ecs-gpu"
        return LAUNCH_FAILURE_MESSAGES[kind].format(itype=itype, az=zones[0], others=", ".join(zones[1:]),
                                                    profile=profile, image=data.get("ImageId") or "ami-0123456789abcdef0")

    def _launch_type(self, pool_name: str, asg_name: str) -> str:
        """The instance type of the launch template the group points at (the pool's options)."""
        pool = self.registry.pools[pool_name]
        by_template = {template: itype for itype, template in pool.options()}
        return by_template.get(mp.launch_template_id(self.b, asg_name), pool.instance_type)

    def _cluster(self, pool_name: str) -> str:
        return self.registry.profiles[self._pool_profiles(pool_name)[0]].cluster

    def _takeable_warm(self, asg_name: str) -> str | None:
        return next((i for i, state in mp.warm_instances(asg_name).items() if state == "Warmed:Stopped"), None)

    def _auto_scaling(self, pool_name: str, asg_name: str, now: float) -> None:
        group = mp.asg(self.b, asg_name)
        live = self._live_instances(asg_name)
        desired = min(group.desired_capacity or 0, group.max_size)
        if desired > len(live) and now >= self._next_launch_attempt.get(asg_name, 0.0):
            warm = self._takeable_warm(asg_name)
            # Starting a stopped instance needs capacity of its type as much as a launch does.
            itype = self._instances[warm].instance_type if warm else self._launch_type(pool_name, asg_name)
            if (failure := self._launch_failure(itype)) is not None:
                # AWS keeps retrying the launch, each attempt a failed activity of its own.
                self._next_launch_attempt[asg_name] = self._after(self.delays.capacity_retry_s)
                message = self._launch_failure_message(failure, itype, asg_name)
                mp.record_activity(
                    self.b, asg_name, status_code="Failed", status_message=message,
                    description="Launching a new EC2 instance.  Status Reason: " + message,
                    cause=_launch_cause(len(live), desired),
                )
                self._log("launch-failed", f"{pool_name}: {failure} ({itype})")
            elif warm:
                mp.take_from_warm_pool(self.b, asg_name, warm)
                self._instances[warm].state, self._instances[warm].due = "Pending", self._after(self.delays.warm_start_s)
                mp.record_activity(
                    self.b, asg_name, status_code="Successful",
                    description=f"Launching a new EC2 instance from warm pool: {warm}",
                    cause=_launch_cause(len(live), desired),
                )
                self._log("launch-warm", f"{pool_name}: {warm} Warmed:Stopped -> Pending")
            else:
                instance_id = mp.launch_instance(self.b, asg_name, protected="protected-instance" in self.faults)
                self._instances[instance_id] = _Instance(pool_name, asg_name, self._cluster(pool_name), "Pending",
                                                         self._after(self.delays.launch_s), instance_type=itype)
                mp.record_activity(
                    self.b, asg_name, status_code="Successful",
                    description=f"Launching a new EC2 instance: {instance_id}",
                    cause=_launch_cause(len(live), desired),
                )
                self._log("launch", f"{pool_name}: {instance_id} Pending ({itype})")
        elif desired < len(live):
            protected = {i for i, _, p in mp.asg_instances(self.b, asg_name) if p}
            config = mp.warm_pool(self.b, asg_name)
            reuse = config is not None and bool((config.instance_reuse_policy or {}).get("ReuseOnScaleIn"))
            for instance_id in [i for i in live if i not in protected][: len(live) - desired]:
                info = self._instances.get(instance_id)
                if reuse and info is not None:
                    self._stop_tasks_on(instance_id, now)
                    mp.to_warm_pool(self.b, asg_name, instance_id)
                    info.state, info.due = "Parking", self._after(self.delays.park_s)
                    self._log("to-warm-pool", f"{pool_name}: {instance_id} Warmed:Pending")
                    continue
                mp.set_lifecycle(self.b, asg_name, instance_id, "Terminating")
                if info is not None:
                    info.state, info.due = "Terminating", self._after(self.delays.terminate_s)
                self._log("terminating", f"{pool_name}: {instance_id}")
        for instance_id, info in list(self._instances.items()):
            if info.asg_name != asg_name or now < info.due:
                continue
            if info.state == "Pending":
                mp.set_lifecycle(self.b, asg_name, instance_id, "InService")
                info.state, info.due = "InService", self._after(self.delays.register_s)
                self._log("in-service", f"{pool_name}: {instance_id}")
            elif info.state == "InService":
                if info.container_instance_arn:  # back from the warm pool: the agent reconnects
                    mp.set_agent_connected(self.b, info.cluster, info.container_instance_arn, True)
                else:
                    document = json.dumps({"instanceId": instance_id, "region": self.registry.region})
                    answer = self.ecs.register_container_instance(cluster=info.cluster, instanceIdentityDocument=document)
                    info.container_instance_arn = answer["containerInstance"]["containerInstanceArn"]
                info.state, info.due = "Registered", float("inf")
                self._log("registered", f"{pool_name}: {instance_id}")
            elif info.state in ("Warming", "Parking"):
                if info.container_instance_arn:
                    mp.set_agent_connected(self.b, info.cluster, info.container_instance_arn, False)
                mp.set_warm_lifecycle(self.b, asg_name, instance_id, "Warmed:Stopped")
                info.state, info.due = "Warm", float("inf")
                self._log("warm-stopped", f"{pool_name}: {instance_id} Warmed:Stopped")
            elif info.state == "Terminating":
                self._stop_tasks_on(instance_id, now)
                if info.container_instance_arn:
                    self.ecs.deregister_container_instance(cluster=info.cluster, containerInstance=info.container_instance_arn, force=True)
                mp.terminate_instance(self.b, asg_name, instance_id)
                mp.record_activity(
                    self.b, asg_name, status_code="Successful", description=f"Terminating EC2 instance: {instance_id}",
                    cause=f"At {_stamp()} an instance was taken out of service in response to a difference between "
                    "desired and actual capacity, shrinking the capacity.",
                )
                del self._instances[instance_id]
                self._log("terminated", f"{pool_name}: {instance_id}")

    def _stop_tasks_on(self, instance_id: str, now: float) -> None:
        """The instance is going away (terminated or stopped): its tasks stop with it."""
        for task in self._tasks.values():
            if task.instance_id == instance_id and task.phase != "STOPPED":
                self._begin_stop(task, f"Host EC2 (instance {instance_id}) terminated.", "TerminationNotice", now)
                self._finish_stop(task)

    def _warm_pool(self, pool_name: str, asg_name: str, now: float) -> None:
        """Keep max size - desired (at least min size) instances in the group's warm pool."""
        config = mp.warm_pool(self.b, asg_name)
        if config is None:
            return
        group = mp.asg(self.b, asg_name)
        desired = group.desired_capacity or 0
        prepared = config.max_group_prepared_capacity or group.max_size
        wanted = max(int(config.min_size or 0), prepared - desired)
        warm = mp.warm_instances(asg_name)
        if len(warm) < wanted and now >= self._next_launch_attempt.get(asg_name, 0.0):
            itype = self._launch_type(pool_name, asg_name)
            if self._launch_failure(itype) is not None:
                self._next_launch_attempt[asg_name] = self._after(self.delays.capacity_retry_s)
                return
            instance_id = mp.launch_into_warm_pool(self.b, asg_name)
            self._instances[instance_id] = _Instance(pool_name, asg_name, self._cluster(pool_name), "Warming",
                                                     self._after(self.delays.launch_s), instance_type=itype)
            mp.record_activity(
                self.b, asg_name, status_code="Successful", description=f"Launching a new EC2 instance into warm pool: {instance_id}",
                cause=f"At {_stamp()} an instance was launched in response to a difference between desired and actual "
                f"warm pool capacity, increasing the capacity from {len(warm)} to {wanted}.",
            )
            self._log("launch-into-warm-pool", f"{pool_name}: {instance_id} Warmed:Pending ({itype})")
        elif len(warm) > wanted and desired == len(self._live_instances(asg_name)):
            # More stopped instances than the pool keeps (a reused one came back beside a spare).
            surplus = next((i for i, state in warm.items() if state == "Warmed:Stopped"), None)
            if surplus is not None:
                mp.terminate_warm_instance(self.b, asg_name, surplus)
                self._instances.pop(surplus, None)
                self._log("terminated", f"{pool_name}: {surplus} (warm pool surplus)")

    def _scheduler(self, profile: str, now: float) -> None:
        """The ECS service scheduler: place tasks up to desired, stop the surplus."""
        service = self._service(profile)
        live = self._live_tasks(profile)
        pool = self.registry.profiles[profile].pool
        if service.desired_count > len(live):
            instance = next(
                (i for i, info in self._instances.items() if info.pool == pool and info.state == "Registered"), None
            )
            if instance is not None:
                info = self._instances[instance]
                task = mp.create_service_task(
                    self.b, service, str(info.container_instance_arn), self.registry.pools[pool].capacity_provider
                )
                self._tasks[task.task_arn] = _Task(profile, task.task_arn, task, instance, "PROVISIONING",
                                                   self._after(self.delays.provision_s))
                self._log("task-provisioning", f"{profile}: {task.task_arn}")
        elif service.desired_count < len(live):
            for task in sorted(live, key=lambda t: t.task.created_at, reverse=True)[: len(live) - service.desired_count]:
                self._begin_stop(task, f"Scaling activity initiated by (deployment {service.deployments[0]['id']})",
                                 "ServiceSchedulerInitiated", now)
        tasks = [t for t in self._tasks.values() if t.profile == profile]
        mp.set_service_counts(
            service,
            running=sum(t.phase == "RUNNING" for t in tasks),
            pending=sum(t.phase in _PENDING_TASK for t in tasks),
        )

    def _task_lifecycle(self, task: _Task, now: float) -> None:
        if now < task.due:
            return
        if task.phase == "PROVISIONING":
            instance = self._instances.get(task.instance_id)
            cached = instance is not None and task.profile in instance.cached
            task.phase, task.due = "PENDING", self._after(self.delays.warm_pull_s if cached else self.delays.pull_s)
            mp.set_task_status(task.task, "PENDING")
            task.task.pull_started_at = datetime.now(timezone.utc)
        elif task.phase == "PENDING":
            task.task.pull_stopped_at = datetime.now(timezone.utc)
            instance = self._instances.get(task.instance_id)
            # A warm volume holds the synced revision's marker: the prefetch says so and exits at once.
            warm = instance is not None and task.profile in instance.cached
            task.phase, task.due = "PREFETCHING", self._after(0.0 if warm else self.delays.prefetch_s)
            lines = [PREFETCH_LINES[0].format(model=self.registry.profiles[task.profile].model)]
            self._container_log(task, PREFETCH_CONTAINER, [*lines, "weights already on the volume"] if warm else lines)
        elif task.phase == "PREFETCHING":
            self._container_log(task, PREFETCH_CONTAINER, [PREFETCH_LINES[1]])
            self._start_running(task, now)
        elif task.phase == "RUNNING" and "task-crash" in self.faults:
            self._begin_stop(task, CRASH_REASON, "EssentialContainerExited", now, exit_code=1)
        elif task.phase == "DEACTIVATING":
            if task.target_id:
                self.load_balancers.forget(self._tg(task), task.target_id)
            task.phase, task.due = "STOPPING", self._after(self.delays.stop_s)
            mp.set_task_status(task.task, "STOPPING")
            self._stop_server(task)
        elif task.phase == "STOPPING":
            self._finish_stop(task)
        if task.phase == "RUNNING" and task.due == float("inf") and "task-crash" in self.faults:
            task.due = self._after(self.delays.crash_after_s)

    def _start_running(self, task: _Task, now: float) -> None:
        task.phase, task.due = "RUNNING", float("inf")
        mp.set_task_status(task.task, "RUNNING")
        task.target_id = mp.task_ip(task.task)
        if self.model_server == "vllm" and task.target_id and "never-healthy" not in self.faults:
            self._start_server(task)  # a real vLLM loads in real time and listens once loaded
        if task.target_id:
            self.elbv2.register_targets(TargetGroupArn=self._tg(task), Targets=[{"Id": task.target_id, "Port": CONTAINER_PORT}])
        task.running_at = time.monotonic()  # the grace period runs from here (after the server process spawned)
        # The service's grace period as UpdateService last set it. It is in the twin's real seconds:
        # the twin sets it so, and a controller deriving it from past starts measured real seconds.
        grace_s = getattr(self._service(task.profile), "health_check_grace_period_seconds", self.delays.health_grace_s / self.time_scale)
        task.grace_real_s = max(grace_s, REAL_SERVER_LOAD_S) if self.model_server == "vllm" else grace_s
        instance = self._instances.get(task.instance_id)
        warm = instance is not None and task.profile in instance.cached
        saved = self.delays.weights_sync_s + self.delays.compile_cache_s if warm else 0.0
        task.loaded_at = self._after(max(0.0, self.delays.load_s - saved))
        if instance is not None:
            instance.cached.add(task.profile)  # the prefetch and the compile write to the instance's volume
        self._log("task-running", f"{task.profile}: {task.arn} ip {task.target_id} on {task.instance_id} "
                  f"({'warm volume: weights and compile cache kept' if warm else 'cold volume'})")

    def _begin_stop(self, task: _Task, reason: str, code: str, now: float, exit_code: int | None = None) -> None:
        if task.phase in ("DEACTIVATING", "STOPPING", "STOPPED"):
            return
        task.stop_reason, task.stop_code = reason, code
        was_running = task.phase == "RUNNING"
        mp.set_task_status(task.task, "DEACTIVATING", stopped_reason=reason, stop_code=code, exit_code=exit_code)
        # ECS deregisters the target at once: it drains for the group's deregistration delay (a
        # crashed container is gone at once, its in-flight requests with it).
        crashed = code == "EssentialContainerExited"
        if crashed:
            self._stop_server(task)
        drain = 0.0
        if task.target_id and was_running:
            drain = self.load_balancers.deregister(self._tg(task), task.target_id)
        task.phase, task.due = "DEACTIVATING", now + (0.0 if crashed else drain)
        task.healthy = False
        self._log("task-stopping", f"{task.profile}: {task.arn} ({reason})")

    def _finish_stop(self, task: _Task) -> None:
        if task.target_id:
            self.load_balancers.forget(self._tg(task), task.target_id)
        self._stop_server(task)
        task.phase, task.due = "STOPPED", float("inf")
        mp.set_task_status(task.task, "STOPPED", stopped_reason=task.stop_reason, stop_code=task.stop_code)
        self._log("task-stopped", f"{task.profile}: {task.arn} ({task.stop_reason})")

    def _tg(self, task: _Task) -> str:
        return self.registry.profiles[task.profile].target_group_arn

    # ---- model servers ------------------------------------------------------------------------
    def _start_server(self, task: _Task) -> None:
        """The task's model server, listening at its ENI address on the container port."""
        assert task.target_id is not None
        model = self.registry.profiles[task.profile].model
        log = self.logdir / f"{task.profile}-{task.arn.rsplit('/', 1)[-1]}.log" if self.logdir else None
        if self.model_server == "vllm":
            server = vllm_server(tiny_model_dir(), CONTAINER_PORT, served_model_name=model, log_path=log, host=task.target_id)
        else:
            faults = ["models-fail=1"] if "smoke-fails-once" in self.faults else []
            server = simulator_server(CONTAINER_PORT, served_model_name=model, speed=max(1.0, self.time_scale), faults=faults,
                                      log_path=log, host=task.target_id)
        task.server = server.start()
        self._log("model-server-started", f"{task.profile}: {server.url} pid {server.pid}")

    def _container_log(self, task: _Task, container: str, lines: Sequence[str]) -> None:
        """Write lines to the container's stream as the awslogs driver of its task definition would."""
        definition = self.b.ecs.describe_task_definition(task.task.task_definition_arn)
        settings = next(c for c in definition.container_definitions if c["name"] == container)["logConfiguration"]["options"]
        group, stream = settings["awslogs-group"], f"{settings['awslogs-stream-prefix']}/{container}/{task.arn.rsplit('/', 1)[-1]}"
        stamp = int(time.time() * 1000)
        try:
            self.logs.create_log_stream(logGroupName=group, logStreamName=stream)
        except self.logs.exceptions.ResourceAlreadyExistsException:
            pass
        self.logs.put_log_events(logGroupName=group, logStreamName=stream,
                                 logEvents=[{"timestamp": stamp, "message": line} for line in lines])

    def _ship_logs(self, task: _Task, now: float, final: bool = False) -> None:
        """The model server's new complete output lines to the vllm container's stream."""
        server = task.server
        if server is None or server.log_path is None or (now < task.next_ship and not final):
            return
        task.next_ship = now + LOG_SHIP_S
        with server.log_path.open("rb") as output:
            output.seek(task.log_offset)
            chunk = output.read()
        complete = chunk if final else chunk[: chunk.rfind(b"\n") + 1]
        lines = [line for line in complete.decode("utf-8", "replace").splitlines() if line.strip()]
        task.log_offset += len(complete)
        if lines:
            self._container_log(task, "vllm", lines)

    def _stop_server(self, task: _Task) -> None:
        if task.server is not None:
            self._ship_logs(task, time.monotonic(), final=True)
            task.server.stop(grace_s=5)
            self._log("model-server-stopped", f"{task.profile}: {task.server.url}")
            task.server = None

    def _load(self, task: _Task, now: float) -> None:
        """The simulator's model is loaded at loaded_at: its server listens from then on (as vLLM
        listens once its weights are loaded); under never-healthy it never does."""
        if (task.phase == "RUNNING" and task.server is None and task.target_id and self.model_server == "sim"
                and now >= task.loaded_at and "never-healthy" not in self.faults):
            self._start_server(task)

    def _health(self, task: _Task, now: float) -> None:
        """ECS's part of target health: the load balancer's verdict is logged, and past the service's
        grace period a task whose target is unhealthy is replaced (a new one follows)."""
        if task.phase != "RUNNING" or not task.target_id:
            return
        tg = self._tg(task)
        state = self.load_balancers.health(tg, task.target_id)
        if state == "healthy" and not task.healthy:
            task.healthy = True
            self._log("target-healthy", f"{task.profile}: {task.target_id}")
        elif state == "unhealthy":
            task.healthy = False
            if now - task.running_at >= task.grace_real_s:
                self._begin_stop(task, ELB_UNHEALTHY_REASON.format(target_group=tg), "ServiceSchedulerInitiated", now)
                self._log("task-unhealthy", f"{task.profile}: {task.arn} replaced after failed ELB health checks")

    # ---- throttle-once ------------------------------------------------------------------------
    def request_hook(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """Answer what AWS would under the active faults before moto does: Fargate RunTask without
        capacity (capacity-unavailable), the first call of each THROTTLED operation (throttle-once)."""
        if WORLD_AGENT in environ.get("HTTP_USER_AGENT", ""):
            return None
        if "capacity-unavailable" in self.faults:
            answer = self._no_fargate_capacity(environ)
            if answer is not None:
                return answer
        if self.faults & set(FAILED_STEPS):
            answer = self._failed_step(environ)
            if answer is not None:
                return answer
        if "throttle-once" not in self.faults:
            return None
        key = _operation(environ)
        if key not in THROTTLED:
            return None
        with self._lock:
            if key in self._throttled:
                return None
            self._throttled.add(key)
            self._log("throttled", f"{key[0]}:{key[1]}")
        code = THROTTLED[key]
        request_id = str(uuid.uuid4())
        if key[0] == "lambda":
            return 429, {"Content-Type": "application/json", "x-amzn-ErrorType": code, "x-amzn-RequestId": request_id}, \
                json.dumps({"Type": "User", "message": "Rate Exceeded.", "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded"}).encode()
        if key[0] == "ecs":
            return 400, {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": request_id}, \
                json.dumps({"__type": code, "message": "Rate exceeded"}).encode()
        body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>Rate exceeded</Message></Error>"
                f"<RequestId>{request_id}</RequestId></ErrorResponse>")
        return 400, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body.encode()


    def _failed_step(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """A profile_steps invoke of a step a fault fails: Lambda's answer for a handler that raised
        (200, X-Amz-Function-Error: Unhandled, the error in the payload); "-once" faults then clear."""
        if _operation(environ) != ("lambda", "Invoke"):
            return None
        try:
            action = json.loads(_body(environ) or b"{}").get("action")
        except ValueError:
            return None
        with self._lock:
            fault = next((f for f in self.faults if FAILED_STEPS.get(f) == action), None)
            if fault is None:
                return None
            if fault.endswith("-once"):
                self.faults = self.faults - {fault}
            self._log("step-failed", f"{action} ({fault})")
        operation = "UpdateItem" if action == "roll_back" else "GetItem"
        error = {"errorMessage": STEP_FAILURE.format(operation=operation), "errorType": "ClientError",
                 "requestId": str(uuid.uuid4()), "stackTrace": []}
        headers = {"Content-Type": "application/json", "X-Amz-Function-Error": "Unhandled", "X-Amz-Executed-Version": "$LATEST",
                   "x-amzn-RequestId": str(uuid.uuid4())}
        return 200, headers, json.dumps(error).encode()

    def _no_fargate_capacity(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """RunTask on Fargate places nothing: a 200 answer with Failures, as ECS gives when Fargate has
        no capacity (the caller must look at Failures; Step Functions' .sync fails AmazonECS.Unknown)."""
        if _operation(environ) != ("ecs", "RunTask"):
            return None
        request = json.loads(_body(environ) or b"{}")
        if request.get("launchType") != "FARGATE":
            return None
        self._log("run-task-failed", f"{request.get('taskDefinition')}: no Fargate capacity")
        failure = {"arn": request.get("cluster", ""), "reason": FARGATE_CAPACITY_UNAVAILABLE}
        body = json.dumps({"tasks": [], "failures": [failure]}).encode()
        return 200, {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": str(uuid.uuid4())}, body


def model_log_group(service: str) -> str:
    """The log group of a profile's containers, as Terraform's serving-profile module names it."""
    return f"/ecs/{service}"


def _check_faults(faults: Sequence[str], model_server: str) -> None:
    """ValueError naming an unknown fault, or one the model server cannot play."""
    for fault in faults:
        check_fault(fault)
    if "smoke-fails-once" in faults and model_server != "sim":
        raise ValueError("fault: smoke-fails-once needs the simulator model server (model_server 'sim')")


def _body(environ: dict[str, Any]) -> bytes:
    """The request body, put back for moto to read again."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _operation(environ: dict[str, Any]) -> tuple[str, str]:
    """(signing service, operation) of a request to the moto server."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    auth = environ.get("HTTP_AUTHORIZATION", "")
    scope = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", auth)
    service = scope.group(1) if scope else ""
    if target:
        return service, target.rsplit(".", 1)[-1]
    if re.match(r"^/2015-03-31/functions/[^/]+/invocations$", environ.get("PATH_INFO", "")):
        return "lambda", "Invoke"
    if environ.get("REQUEST_METHOD") == "POST" and service in ("autoscaling", "elasticloadbalancing"):
        body = _body(environ)
        action = re.search(rb"(?:^|&)Action=([A-Za-z]+)", body)
        return service, action.group(1).decode() if action else ""
    return service, ""


def _launch_cause(current: int, desired: int) -> str:
    """The Cause text EC2 Auto Scaling writes on a scale-out activity."""
    return (f"At {_stamp()} an instance was started in response to a difference between desired "
            f"and actual capacity, increasing the capacity from {current} to {desired}.")


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
