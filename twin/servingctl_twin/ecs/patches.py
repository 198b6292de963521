"""ECS's moto patches and the accessors the world's ECS part moves tasks and services with.

moto's ECS reports running = desired at once, its ListTasks ignores serviceName, its UpdateService drops
the health-check grace period, and a task it places gets an address outside its subnet; here the
service scheduler's counts follow the world's tasks, and RunTask hands its tasks to the site's runner.
"""

from __future__ import annotations

import ipaddress
import random
import uuid
from datetime import UTC, datetime
from typing import Any, Protocol

from moto.ec2.models import ec2_backends
from moto.ecs.models import EC2ContainerServiceBackend, Service, Task

from servingctl_twin.patching import Backends, Patch, original, part_of, set_missing


class TaskRunner(Protocol):
    """What runs the tasks RunTask placed (servingctl_twin.ecs.tasks runs the ones it knows)."""

    def __call__(self, task: Task) -> None:
        """RunTask placed the task."""

    def stop_task(self, task: Task, reason: str) -> bool:
        """StopTask of a task it runs (False: not one of its running tasks)."""


class Placement:
    """A site's ECS: the runner RunTask hands each placed task to (None: tasks stay as moto made them)."""

    runner: TaskRunner | None = None


def _update_service(self: EC2ContainerServiceBackend, service_properties: dict[str, Any]) -> Service:
    """Change the desired count (and the health-check grace period, which moto drops) only:
    running/pending counts follow the world's tasks, not the request."""
    cluster = self._get_cluster(service_properties.get("cluster", "default"))
    service = self._get_service(cluster.name, service_properties["service"].split("/")[-1])
    running, pending = service.running_count, service.pending_count
    result = original("EC2ContainerServiceBackend.update_service")(self, service_properties)
    service.running_count, service.pending_count = running, pending
    if service_properties.get("health_check_grace_period_seconds") is not None:
        set_missing(service, health_check_grace_period_seconds=int(service_properties["health_check_grace_period_seconds"]))
    for deployment in service.deployments:
        deployment["desiredCount"] = service.desired_count
    return result


def _list_tasks(
    self: EC2ContainerServiceBackend,
    cluster_str: str | None = None,
    container_instance: str | None = None,
    family: str | None = None,
    started_by: str | None = None,
    service_name: str | None = None,
    desiredStatus: str | None = None,
) -> list[Task]:
    """Filter on serviceName (the task group) and default desiredStatus to RUNNING, like ECS."""
    tasks = original("EC2ContainerServiceBackend.list_tasks")(
        self, cluster_str, container_instance, family, started_by, None, desiredStatus or "RUNNING"
    )
    if service_name:
        tasks = [t for t in tasks if t.group == f"service:{service_name.split('/')[-1]}"]
    return tasks


def _run_task(self: EC2ContainerServiceBackend, *args: Any, **kwargs: Any) -> list[Task]:
    """RunTask as moto does it, then the site's runner starts what it knows how to run."""
    tasks: list[Task] = original("EC2ContainerServiceBackend.run_task")(self, *args, **kwargs)
    placement = part_of(self.region_name, Placement)
    if placement is not None and placement.runner is not None:
        for task in tasks:
            placement.runner(task)
    return tasks


def _stop_task(self: EC2ContainerServiceBackend, cluster_str: str, task_str: str, reason: str) -> Task:
    """StopTask as ECS does it: the container gets SIGTERM (docker stop) and the task is STOPPING
    until it exits, then STOPPED with stopCode UserInitiated and the reason given (moto marks it
    STOPPED at once and its process, which moto never ran, would run on)."""
    task: Task = original("EC2ContainerServiceBackend.stop_task")(self, cluster_str, task_str, reason)
    placement = part_of(self.region_name, Placement)
    if placement is not None and placement.runner is not None:
        placement.runner.stop_task(task, reason)
    return task


def services(b: Backends) -> list[Service]:
    """Every ECS service (all clusters)."""
    return list(b.ecs.services.values())


def service_tasks(b: Backends, service: Service) -> list[Task]:
    """Every task of the service, stopped ones included."""
    group = f"service:{service.name}"
    return [t for t in b.ecs.tasks.get(service.cluster_name, {}).values() if t.group == group]


def create_service_task(b: Backends, service: Service, container_instance_arn: str, capacity_provider: str) -> Task:
    """Place a new task of the service on the container instance, in PROVISIONING, with an awsvpc ENI."""
    cluster = b.ecs.clusters[service.cluster_name]
    if service.task_definition is None:
        raise LookupError(f"ECS service {service.name} has no task definition")
    task_definition = b.ecs.describe_task_definition(service.task_definition)
    network = getattr(service, "network_configuration", None)
    task = Task(
        cluster,
        task_definition,
        container_instance_arn,
        b.ecs._calculate_task_resource_requirements(task_definition),
        backend=b.ecs,
        group=f"service:{service.name}",
        started_by=f"ecs-svc/{uuid.uuid4().int % 10**19}",
        networking_configuration=network,
        capacity_provider_name=capacity_provider,
        launch_type="EC2",
    )
    task.status = "PROVISIONING"
    task.desired_status = "RUNNING"
    set_missing(task, created_at=datetime.now(UTC))
    _address_in_subnet(task)
    b.ecs.tasks.setdefault(cluster.name, {})[task.task_arn] = task
    return task


def _address_in_subnet(task: Task) -> None:
    """Give the task's ENI an address of its subnet, as AWS does (moto draws one from 10.0.0.0/8 at
    random): the twin's subnets are loopback ranges, so the task's model server can listen there."""
    attachments: list[dict[str, Any]] = task.attachments
    details = {d["name"]: d for a in attachments for d in a.get("details", [])}
    if "networkInterfaceId" not in details:
        return
    ec2 = ec2_backends[task._account_id][task.region_name]
    eni = ec2.get_network_interface(details["networkInterfaceId"]["value"])
    network = ipaddress.IPv4Network(eni.subnet.cidr_block)
    taken = {e.private_ip_address for e in ec2.enis.values() if e is not eni}
    free = [str(h) for h in network.hosts() if str(h) not in taken]
    eni.private_ip_address = random.choice(free)
    details["privateIPv4Address"]["value"] = eni.private_ip_address


def task_container_definition(task: Task) -> dict[str, Any]:
    """The task definition's (first) container definition, as registered (camelCase)."""
    definition: dict[str, Any] = task._backend.describe_task_definition(task.task_definition_arn).container_definitions[0]
    return definition


def task_ip(task: Task) -> str | None:
    """The private IPv4 address of the task's ENI (awsvpc), None without one."""
    attachments: list[dict[str, Any]] = task.attachments
    for attachment in attachments:
        for detail in attachment.get("details", []):
            if detail["name"] == "privateIPv4Address":
                return str(detail["value"])
    return None


def set_task_status(
    task: Task, last_status: str, *, stopped_reason: str | None = None, stop_code: str | None = None, exit_code: int | None = None
) -> None:
    """Move the task (and its container) to last_status; STOPPED records the reason like ECS."""
    task.status = last_status
    now = datetime.now(UTC)
    for container in task.containers:
        container.last_status = last_status
        if exit_code is not None:
            container.exitCode = exit_code
    if last_status == "RUNNING":
        set_missing(task, started_at=now)
    if last_status in ("DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"):
        task.desired_status = "STOPPED"
        if stopped_reason is not None:
            task.stopped_reason = stopped_reason
        if stop_code is not None:
            set_missing(task, stop_code=stop_code)
        if last_status == "STOPPED":
            set_missing(task, stopped_at=now)


def set_service_counts(service: Service, *, running: int, pending: int) -> None:
    """Set the service's running and pending counts (and its primary deployment's)."""
    service.running_count, service.pending_count = running, pending
    for deployment in service.deployments:
        deployment["runningCount"], deployment["pendingCount"] = running, pending
        deployment["desiredCount"] = service.desired_count


def set_agent_connected(b: Backends, cluster: str, container_instance_arn: str, connected: bool) -> None:
    """The ECS agent of a container instance (dis)connects: it stops with a stopped instance and reconnects at start."""
    for instance in b.ecs.container_instances.get(cluster, {}).values():
        if instance.container_instance_arn == container_instance_arn:
            instance.agent_connected = connected


PATCHES = [
    # UpdateService changes the desired count (and keeps the grace period); counts follow the world's tasks.
    Patch(
        "EC2ContainerServiceBackend.update_service",
        EC2ContainerServiceBackend,
        "update_service",
        ("self", "service_properties"),
        _update_service,
    ),
    # ListTasks filters on serviceName and lists RUNNING tasks unless asked otherwise.
    Patch(
        "EC2ContainerServiceBackend.list_tasks",
        EC2ContainerServiceBackend,
        "list_tasks",
        ("self", "cluster_str", "container_instance", "family", "started_by", "service_name", "desiredStatus"),
        _list_tasks,
    ),
    # RunTask's tasks run (the benchmark task's process) as the site's runner plays them.
    Patch(
        "EC2ContainerServiceBackend.run_task",
        EC2ContainerServiceBackend,
        "run_task",
        (
            "self",
            "cluster_str",
            "task_definition_str",
            "count",
            "overrides",
            "started_by",
            "tags",
            "launch_type",
            "networking_configuration",
            "group",
            "platform_version",
            "capacity_provider_strategy",
        ),
        _run_task,
    ),
    # StopTask stops the runner's process: STOPPING until it exits, then STOPPED (UserInitiated).
    Patch(
        "EC2ContainerServiceBackend.stop_task",
        EC2ContainerServiceBackend,
        "stop_task",
        ("self", "cluster_str", "task_str", "reason"),
        _stop_task,
    ),
    Patch(
        "Task.__init__",
        Task,
        "__init__",
        (
            "self",
            "cluster",
            "task_definition",
            "container_instance_arn",
            "resource_requirements",
            "backend",
            "group",
            "launch_type",
            "overrides",
            "started_by",
            "tags",
            "networking_configuration",
            "platform_version",
            "capacity_provider_name",
        ),
    ),
    Patch(
        "EC2ContainerServiceBackend._calculate_task_resource_requirements",
        EC2ContainerServiceBackend,
        "_calculate_task_resource_requirements",
        ("task_definition",),
    ),
]
