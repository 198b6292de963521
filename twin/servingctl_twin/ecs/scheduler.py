"""ECS's part of the world: the service scheduler and its tasks over time.

Owns each profile's service tasks: the capacity provider's managed scaling raising a pool's group
to one instance per replica the pool's services want (each replica reserves its instance's GPUs) and,
after its scale-in alarm, lowering it to what they need (with managed termination protection ECS
keeps the instances that run a task protected, so only an empty one goes), the scheduler placing
tasks on registered container instances without a task up to the desired count and stopping the
surplus (PROVISIONING -> PENDING -> RUNNING -> ... -> STOPPED), the task's image pull and
prefetch container (shorter on an instance whose volume kept them: warm pool reuse; none when the
task definition streams the weights: load_format runai_streamer), ALB target registration and
deregistration (what the load balancer does with them is servingctl_twin.elbv2's), replacing a
task whose target stays unhealthy past the service's health check grace period, and a real model
server process per RUNNING task, listening at the task's ENI address (the twin's VPC is a loopback
range).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from servingctl_twin.autoscaling import patches as autoscaling_patches
from servingctl_twin.autoscaling.groups import activity_stamp
from servingctl_twin.ecs.patches import (
    create_service_task,
    services,
    set_service_counts,
    set_task_status,
    task_container_definition,
    task_ip,
)
from servingctl_twin.modelserver import ModelServerProcess, simulator_server, tiny_model_dir, vllm_server

if TYPE_CHECKING:
    from servingctl_twin.world import World

CRASH_REASON = "Essential container in task exited"

# ECS's stopped reason for a task its service replaced after failed ELB health checks.
ELB_UNHEALTHY_REASON = "Task failed ELB health checks in (target-group {target_group})"

# PREFETCHING: the world's name for PENDING while the prefetch container syncs the weights.
_PENDING_TASK = ("PROVISIONING", "PENDING", "PREFETCHING", "ACTIVATING")

# The init container of Terraform's serving-profile module and its lines (its prefetch_command).
PREFETCH_CONTAINER = "prefetch-weights"
PREFETCH_LINES = ("servingctl prefetch: syncing {model}", "servingctl prefetch: done")

# A real vLLM loads in real seconds, which the time scale does not shorten: its grace period is at
# least what the twin gives a real server to answer /health (ModelServerProcess.wait_healthy's default).
REAL_SERVER_LOAD_S = 300.0

# The model container's port (Terraform's container_port): the target's port, where its server listens.
CONTAINER_PORT = 8000

# load_format runai_streamer: the model container's command streams the snapshot from S3.
STREAMER_ARGS = ("--load-format", "runai_streamer")


@dataclass
class _Task:
    """One service task as the world moves it."""

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


class Scheduler:
    """The ECS services of the registry's profiles and their tasks, moved one world step at a time."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.tasks: dict[str, _Task] = {}
        self._demand_since: dict[str, float] = {}
        self._scale_in_since: dict[str, float] = {}

    def _pool_profiles(self, pool_name: str) -> list[str]:
        return self.world.registry.profiles_on_pool(pool_name)

    def service(self, profile: str) -> Any:
        p = self.world.registry.profiles[profile]
        return next(s for s in services(self.world.b) if s.cluster_name == p.cluster and s.name == p.service)

    def live_tasks(self, profile: str) -> list[_Task]:
        return [t for t in self.tasks.values() if t.profile == profile and t.task.desired_status == "RUNNING"]

    def capacity_provider(self, pool_name: str, asg_name: str, now: float) -> None:
        """Managed scaling (target capacity 100 %, one task per instance): tasks waiting for an
        instance raise the group to the instances the pool's services want after the scale-out
        alarm's delay; fewer wanted than the group holds lowers it after the scale-in alarm's."""
        group = autoscaling_patches.asg(self.world.b, asg_name)
        profiles = self._pool_profiles(pool_name)
        # A profile's replicas need an instance each; profiles sharing a pool share its instances.
        wanted = max((max(int(self.service(p).desired_count), len(self.live_tasks(p))) for p in profiles), default=0)
        live = len(self.world.auto_scaling.live_instances(asg_name))
        desired = int(group.desired_capacity or 0)
        waiting = any(self.service(p).desired_count > len(self.live_tasks(p)) for p in profiles)
        if waiting and wanted > max(desired, live):
            self._scale_in_since.pop(pool_name, None)
            since = self._demand_since.setdefault(pool_name, now)
            if now - since >= self.world.delays.scale_out_s / self.world.time_scale:
                self._set_capacity(pool_name, asg_name, desired, min(wanted, int(group.max_size or 0)))
                self._demand_since.pop(pool_name, None)
            return
        self._demand_since.pop(pool_name, None)
        if 0 < wanted < desired:
            since = self._scale_in_since.setdefault(pool_name, now)
            if now - since >= self.world.delays.provider_scale_in_s / self.world.time_scale:
                # Managed termination protection: ECS unprotects the instances without a task, so
                # the group's scale-in takes one of them.
                busy = {t.instance_id for t in self.tasks.values() if t.phase != "STOPPED"}
                for instance_id, _, _ in autoscaling_patches.asg_instances(self.world.b, asg_name):
                    if instance_id not in busy:
                        self._protect(instance_id, False)
                self._set_capacity(pool_name, asg_name, desired, wanted)
                self._scale_in_since.pop(pool_name, None)
        else:
            self._scale_in_since.pop(pool_name, None)

    def _set_capacity(self, pool_name: str, asg_name: str, before: int, after: int) -> None:
        """ECSManagedAutoScalingPolicy's change of the group's desired capacity, as its activity says."""
        if after == before:
            return
        autoscaling_patches.asg(self.world.b, asg_name).desired_capacity = after
        self.world.auto_scaling.groups.record_activity(
            self.world.b,
            asg_name,
            status_code="Successful",
            description="Updating the desired capacity of the group",
            cause=f"At {activity_stamp()} a monitor alarm in state ALARM triggered policy ECSManagedAutoScalingPolicy "
            f"changing the desired capacity from {before} to {after}.",
        )
        self.world.log("scale-out" if after > before else "scale-in", f"{pool_name}: capacity provider set desired {after}")

    def _protect(self, instance_id: str, protected: bool) -> None:
        """Managed termination protection: ECS protects an instance while it runs a task of the pool's services."""
        info = self.world.auto_scaling.instances.get(instance_id)
        if info is None or not self._managed_protection(info.pool):
            return
        for state in autoscaling_patches.asg(self.world.b, info.asg_name).instance_states:
            if state.instance.id == instance_id:
                state.protected_from_scale_in = protected

    def _managed_protection(self, pool_name: str) -> bool:
        name = self.world.registry.pools[pool_name].capacity_provider
        provider = next((p for p in self.world.b.ecs.capacity_providers.values() if p.name == name), None)
        return provider is not None and provider.auto_scaling_group_provider.get("managedTerminationProtection") == "ENABLED"

    def stop_tasks_on(self, instance_id: str, now: float) -> None:
        """The instance is going away (terminated or stopped): its tasks stop with it."""
        for task in self.tasks.values():
            if task.instance_id == instance_id and task.phase != "STOPPED":
                self._begin_stop(task, f"Host EC2 (instance {instance_id}) terminated.", "TerminationNotice", now)
                self._finish_stop(task)

    def schedule(self, profile: str, now: float) -> None:
        """The ECS service scheduler: place tasks up to desired, stop the surplus."""
        service = self.service(profile)
        live = self.live_tasks(profile)
        pool = self.world.registry.profiles[profile].pool
        if service.desired_count > len(live):
            # A replica reserves its instance's GPUs: one task of the profile per instance. (Profiles
            # sharing a pool share its instances, as the twin's shared-pool starts expect.)
            busy = {t.instance_id for t in self.tasks.values() if t.profile == profile and t.phase != "STOPPED"}
            instance = next(
                (
                    i
                    for i, info in self.world.auto_scaling.instances.items()
                    if info.pool == pool and info.state == "Registered" and i not in busy
                ),
                None,
            )
            if instance is not None:
                info = self.world.auto_scaling.instances[instance]
                created = create_service_task(
                    self.world.b, service, str(info.container_instance_arn), self.world.registry.pools[pool].capacity_provider
                )
                self.tasks[created.task_arn] = _Task(
                    profile, created.task_arn, created, instance, "PROVISIONING", self.world.after(self.world.delays.provision_s)
                )
                self._protect(instance, True)
                self.world.log("task-provisioning", f"{profile}: {created.task_arn}")
        elif service.desired_count < len(live):
            for task in sorted(live, key=lambda t: t.task.created_at, reverse=True)[: len(live) - service.desired_count]:
                self._begin_stop(
                    task,
                    f"Scaling activity initiated by (deployment {service.deployments[0]['id']})",
                    "ServiceSchedulerInitiated",
                    now,
                )
        tasks = [t for t in self.tasks.values() if t.profile == profile]
        set_service_counts(
            service,
            running=sum(t.phase == "RUNNING" for t in tasks),
            pending=sum(t.phase in _PENDING_TASK for t in tasks),
        )

    def advance(self, task: _Task, now: float) -> None:
        if now < task.due:
            return
        if task.phase == "PROVISIONING":
            instance = self.world.auto_scaling.instances.get(task.instance_id)
            cached = instance is not None and task.profile in instance.cached
            task.phase, task.due = (
                "PENDING",
                self.world.after(self.world.delays.warm_pull_s if cached else self.world.delays.pull_s),
            )
            set_task_status(task.task, "PENDING")
            task.task.pull_started_at = datetime.now(UTC)
        elif task.phase == "PENDING":
            task.task.pull_stopped_at = datetime.now(UTC)
            if streamed_model(task.task) is not None:  # no prefetch container: vLLM reads S3 itself
                self._start_running(task, now)
            else:
                self._prefetch(task)
        elif task.phase == "PREFETCHING":
            self.world.container_logs.put(task, PREFETCH_CONTAINER, [PREFETCH_LINES[1]])
            self._start_running(task, now)
        elif task.phase == "RUNNING" and "task-crash" in self.world.faults:
            self._begin_stop(task, CRASH_REASON, "EssentialContainerExited", now, exit_code=1)
        elif task.phase == "DEACTIVATING":
            if task.target_id:
                self.world.load_balancers.forget(self._tg(task), task.target_id)
            task.phase, task.due = "STOPPING", self.world.after(self.world.delays.stop_s)
            set_task_status(task.task, "STOPPING")
            self.stop_server(task)
        elif task.phase == "STOPPING":
            self._finish_stop(task)
        if task.phase == "RUNNING" and task.due == float("inf") and "task-crash" in self.world.faults:
            task.due = self.world.after(self.world.delays.crash_after_s)

    def _prefetch(self, task: _Task) -> None:
        """The prefetch container's run: a warm volume holds the synced revision's marker, so the
        prefetch says so and exits at once."""
        instance = self.world.auto_scaling.instances.get(task.instance_id)
        warm = instance is not None and task.profile in instance.cached
        task.phase, task.due = "PREFETCHING", self.world.after(0.0 if warm else self.world.delays.prefetch_s)
        lines = [PREFETCH_LINES[0].format(model=self.world.registry.profiles[task.profile].model)]
        self.world.container_logs.put(task, PREFETCH_CONTAINER, [*lines, "weights already on the volume"] if warm else lines)

    def _start_running(self, task: _Task, now: float) -> None:
        task.phase, task.due = "RUNNING", float("inf")
        set_task_status(task.task, "RUNNING")
        task.target_id = task_ip(task.task)
        if self.world.model_server == "vllm" and task.target_id and "never-healthy" not in self.world.faults:
            self._start_server(task)  # a real vLLM loads in real time and listens once loaded
        if task.target_id:
            self.world.elbv2.register_targets(
                TargetGroupArn=self._tg(task), Targets=[{"Id": task.target_id, "Port": CONTAINER_PORT}]
            )
        task.running_at = time.monotonic()  # the grace period runs from here (after the server process spawned)
        # The service's grace period as UpdateService last set it. It is in the twin's real seconds:
        # the twin sets it so, and a controller deriving it from past starts measured real seconds.
        grace_s = getattr(
            self.service(task.profile),
            "health_check_grace_period_seconds",
            self.world.delays.health_grace_s / self.world.time_scale,
        )
        task.grace_real_s = max(grace_s, REAL_SERVER_LOAD_S) if self.world.model_server == "vllm" else grace_s
        instance = self.world.auto_scaling.instances.get(task.instance_id)
        warm = instance is not None and task.profile in instance.cached
        saved = self.world.delays.weights_sync_s + self.world.delays.compile_cache_s if warm else 0.0
        task.loaded_at = self.world.after(max(0.0, self.world.delays.load_s - saved))
        if instance is not None:
            instance.cached.add(task.profile)  # the prefetch and the compile write to the instance's volume
        self.world.log(
            "task-running",
            f"{task.profile}: {task.arn} ip {task.target_id} on {task.instance_id} "
            f"({'warm volume: weights and compile cache kept' if warm else 'cold volume'})",
        )

    def _begin_stop(self, task: _Task, reason: str, code: str, now: float, exit_code: int | None = None) -> None:
        if task.phase in ("DEACTIVATING", "STOPPING", "STOPPED"):
            return
        task.stop_reason, task.stop_code = reason, code
        was_running = task.phase == "RUNNING"
        set_task_status(task.task, "DEACTIVATING", stopped_reason=reason, stop_code=code, exit_code=exit_code)
        # ECS deregisters the target at once: it drains for the group's deregistration delay (a
        # crashed container is gone at once, its in-flight requests with it).
        crashed = code == "EssentialContainerExited"
        if crashed:
            self.stop_server(task)
        drain = 0.0
        if task.target_id and was_running:
            drain = self.world.load_balancers.deregister(self._tg(task), task.target_id)
        task.phase, task.due = "DEACTIVATING", now + (0.0 if crashed else drain)
        task.healthy = False
        self.world.log("task-stopping", f"{task.profile}: {task.arn} ({reason})")

    def _finish_stop(self, task: _Task) -> None:
        if task.target_id:
            self.world.load_balancers.forget(self._tg(task), task.target_id)
        self.stop_server(task)
        task.phase, task.due = "STOPPED", float("inf")
        set_task_status(task.task, "STOPPED", stopped_reason=task.stop_reason, stop_code=task.stop_code)
        if not any(t.instance_id == task.instance_id and t.phase != "STOPPED" for t in self.tasks.values()):
            # The instance's last task stopped: ECS lets the capacity provider's scale-in take it.
            self._protect(task.instance_id, False)
        self.world.log("task-stopped", f"{task.profile}: {task.arn} ({task.stop_reason})")

    def _tg(self, task: _Task) -> str:
        return self.world.registry.profiles[task.profile].target_group_arn

    def _start_server(self, task: _Task) -> None:
        """The task's model server, listening at its ENI address on the container port."""
        assert task.target_id is not None
        model = self.world.registry.profiles[task.profile].model
        log = self.world.logdir / f"{task.profile}-{task.arn.rsplit('/', 1)[-1]}.log" if self.world.logdir else None
        streamed = streamed_model(task.task)
        if self.world.model_server == "vllm" and streamed is not None:
            # The streamer's reads go to the twin's S3, which does not decide them by the task role:
            # Terraform's grant of that read is checked by terraform test (load_format.tftest.hcl).
            s3 = {
                "AWS_ENDPOINT_URL": self.world.endpoint_url,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": self.world.registry.region,
                "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",  # path-style: the endpoint is one host
            }
            server = vllm_server(
                streamed,
                CONTAINER_PORT,
                served_model_name=model,
                extra_args=STREAMER_ARGS,
                log_path=log,
                host=task.target_id,
                env=s3,
            )
        elif self.world.model_server == "vllm":
            server = vllm_server(tiny_model_dir(), CONTAINER_PORT, served_model_name=model, log_path=log, host=task.target_id)
        else:
            faults = ["models-fail=1"] if "smoke-fails-once" in self.world.faults else []
            server = simulator_server(
                CONTAINER_PORT,
                served_model_name=model,
                speed=max(1.0, self.world.time_scale),
                faults=faults,
                log_path=log,
                host=task.target_id,
            )
        task.server = server.start()
        self.world.log("model-server-started", f"{task.profile}: {server.url} pid {server.pid}")

    def stop_server(self, task: _Task) -> None:
        if task.server is not None:
            self.world.container_logs.ship(task, time.monotonic(), final=True)
            task.server.stop(grace_s=5)
            self.world.log("model-server-stopped", f"{task.profile}: {task.server.url}")
            task.server = None

    def load(self, task: _Task, now: float) -> None:
        """The simulator's model is loaded at loaded_at: its server listens from then on (as vLLM
        listens once its weights are loaded); under never-healthy it never does."""
        if (
            task.phase == "RUNNING"
            and task.server is None
            and task.target_id
            and self.world.model_server == "sim"
            and now >= task.loaded_at
            and "never-healthy" not in self.world.faults
        ):
            self._start_server(task)

    def health(self, task: _Task, now: float) -> None:
        """ECS's part of target health: the load balancer's verdict is logged, and past the service's
        grace period a task whose target is unhealthy is replaced (a new one follows)."""
        if task.phase != "RUNNING" or not task.target_id:
            return
        tg = self._tg(task)
        state = self.world.load_balancers.health(tg, task.target_id)
        if state == "healthy" and not task.healthy:
            task.healthy = True
            self.world.log("target-healthy", f"{task.profile}: {task.target_id}")
        elif state == "unhealthy":
            task.healthy = False
            if now - task.running_at >= task.grace_real_s:
                self._begin_stop(task, ELB_UNHEALTHY_REASON.format(target_group=tg), "ServiceSchedulerInitiated", now)
                self.world.log("task-unhealthy", f"{task.profile}: {task.arn} replaced after failed ELB health checks")


def streamed_model(task: Any) -> str | None:
    """The s3:// snapshot the task's model container streams (load_format runai_streamer), else None."""
    command = list(task_container_definition(task).get("command") or [])
    streams = any(command[i : i + 2] == list(STREAMER_ARGS) for i in range(len(command) - 1))
    model = command[command.index("--model") + 1] if "--model" in command[:-1] else ""
    return model if streams and model.startswith("s3://") else None
