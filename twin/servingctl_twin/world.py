"""The world simulator: plays AWS's part over time in the local twin, with delays scaled down.

A small composer: one background thread steps each service's part in turn, on one clock (simulated
seconds, time_scale times real ones) and one event log. The parts own what AWS does on its own after an
API call, each in its service's folder:
- servingctl_twin.autoscaling.groups: instances launching and terminating, warm pools, failed launches;
- servingctl_twin.ecs.scheduler: the capacity provider, the service scheduler, the tasks, their targets
  and model server processes;
- servingctl_twin.applicationautoscaling.service_scaling: ECS service auto scaling (target tracking);
- servingctl_twin.cloudwatch.logs: the containers' log streams;
- servingctl_twin.faults.RequestFaults: AWS's answers under the active faults (the site's request hook).
What the load balancers do with their targets is servingctl_twin.elbv2's (the twin starts them).
Reads and writes go through the public APIs where they can express it, and through each service's
`patches` accessors where they cannot; the world's state is its own (two twins' worlds share nothing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from servingctl.registry.models import Registry
from servingctl_twin.applicationautoscaling.service_scaling import ServiceScaling
from servingctl_twin.autoscaling.groups import AutoScaling
from servingctl_twin.cloudwatch.logs import ContainerLogs
from servingctl_twin.ecs.scheduler import Scheduler
from servingctl_twin.elbv2.load_balancers import LoadBalancers
from servingctl_twin.faults import WORLD_AGENT, RequestFaults, check_faults, execution_lag_s
from servingctl_twin.patching import Backends, Site
from servingctl_twin.stepfunctions.executions import ReadLag


@dataclass(frozen=True)
class Delays:
    """AWS's delays in simulated seconds (divided by the twin's time scale); defaults make a ~15 min start."""

    scale_out_s: float = 60.0  # capacity provider alarm before it raises an ASG for a waiting task
    # Managed scaling's scale-in: CapacityProviderReservation under its target for 15 minutes (the
    # alarm's 15 datapoints) before the group is lowered to the instances the tasks need.
    provider_scale_in_s: float = 900.0
    # The period of Application Auto Scaling's target tracking alarms (one minute); the policies'
    # cooldowns are scaled with it.
    alarm_period_s: float = 60.0
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
    # A launch hook on the way from the warm pool into service: the user data completes it at once
    # (its boot to the hook call).
    hook_s: float = 10.0
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
        b: Backends,
        registry: Registry,
        *,
        site: Site,
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
        self.endpoint_url = endpoint_url  # where a task's AWS calls go (the streamer's S3 reads)
        self.site = site
        self.load_balancers = load_balancers
        self.model_server = model_server
        check_faults(faults, model_server)
        self.faults: frozenset[str] = frozenset(faults)
        self.time_scale = time_scale
        self.delays = delays or Delays()
        self.logdir = logdir
        self.events: list[Event] = []
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self.error: BaseException | None = None
        config = Config(user_agent_extra=WORLD_AGENT, retries={"mode": "standard", "max_attempts": 3})
        kw: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region_name": registry.region,
            "config": config,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }
        self.ecs, self.elbv2, self.logs = boto3.client("ecs", **kw), boto3.client("elbv2", **kw), boto3.client("logs", **kw)
        self.auto_scaling = AutoScaling(self)
        self.scheduler = Scheduler(self)
        self.service_scaling = ServiceScaling(self, kw)
        self.container_logs = ContainerLogs(self)
        self.request_faults = RequestFaults(self)
        site.request_hook = self.request_faults.request_hook
        self._read_lag = site.part(ReadLag)
        self._read_lag.set(execution_lag_s(self.faults), WORLD_AGENT)

    def start(self) -> None:
        """Start the background thread."""
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="servingctl-world", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and every model server process it started."""
        self._stop.set()
        self._read_lag.set(None)
        self.site.request_hook = None
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self.lock:
            for task in self.scheduler.tasks.values():
                if task.server is not None:
                    task.server.stop(grace_s=5)
                    task.server = None

    def set_faults(self, faults: Sequence[str]) -> None:
        """Replace the active faults (throttle-once throttles each API once more)."""
        check_faults(faults, self.model_server)
        with self.lock:
            self.faults = frozenset(faults)
            self.request_faults.throttled.clear()
        self._read_lag.set(execution_lag_s(self.faults), WORLD_AGENT)

    def sim_now(self) -> float:
        """Simulated seconds since the world started."""
        return (time.monotonic() - self._t0) * self.time_scale

    def events_of(self, kind: str) -> list[Event]:
        """The events of one kind, oldest first."""
        with self.lock:
            return [e for e in self.events if e.kind == kind]

    def model_servers(self) -> dict[str, str]:
        """profile -> URL of its running model server process."""
        with self.lock:
            return {t.profile: t.server.url for t in self.scheduler.tasks.values() if t.server is not None and t.server.running}

    def log(self, kind: str, detail: str) -> None:
        """Record an event at the current simulated time."""
        self.events.append(Event(self.sim_now(), kind, detail))

    def after(self, sim_seconds: float) -> float:
        """The monotonic time sim_seconds of simulated time from now."""
        return time.monotonic() + sim_seconds / self.time_scale

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.lock:
                    self._step()
            except Exception as exc:  # keep AWS's part playing; the error is visible on the world
                if repr(exc) != repr(self.error):
                    self.log("world-error", repr(exc))
                self.error = exc
            self._stop.wait(self.delays.tick_s)

    def _step(self) -> None:
        now = time.monotonic()
        for pool_name, pool in self.registry.pools.items():
            self.scheduler.capacity_provider(pool_name, pool.asg_name, now)
            self.auto_scaling.scale(pool_name, pool.asg_name, now)
            self.auto_scaling.keep_warm_pool(pool_name, pool.asg_name, now)
        for name in self.registry.profiles:
            self.service_scaling.step(name, now)
            self.scheduler.schedule(name, now)
        for task in list(self.scheduler.tasks.values()):
            self.scheduler.advance(task, now)
            self.scheduler.load(task, now)
            self.scheduler.health(task, now)
            self.container_logs.ship(task, now)
