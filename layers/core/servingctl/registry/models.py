"""Pydantic models of the registry document that Terraform publishes to SSM Parameter Store
(one parameter per pool and per profile: registry/layout.py).

The JSON Schema exported from `Registry` (registry/schema.json) is the contract with the Terraform
side: both the controller and the Terraform tests check documents against it.
"""

from __future__ import annotations

from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

SCHEMA_VERSION: Literal[1] = 1
# The registry holds at most this many profiles and pools (one SSM parameter each, registry/layout.py).
# The bound is what the controller is tested at: every sweep reconciles and decides each profile in
# one Lambda run, and a cold start reads every parameter (GetParametersByPath, 10 a page).
MAX_PROFILES = 50
MAX_POOLS = 50
# Replicas of one profile: each is a task on an instance of its own (the task reserves the
# instance's GPUs), so the bound is also the pool's group MaxSize Terraform sets for it.
MAX_REPLICAS = 16

Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
ClockTime = Annotated[str, StringConstraints(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


InstanceType = Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+\.[a-z0-9]+$")]


class AlternateInstance(_Strict):
    """An instance type of the pool's GPU shape the start falls back to, with its launch template."""

    instance_type: InstanceType = Field(description="EC2 instance type, e.g. g7e.4xlarge")
    launch_template_id: str = Field(pattern=r"^lt-[0-9a-z]+$", description="launch template of this type")


class WarmPool(_Strict):
    """The ASG's warm pool: Stopped instances a start takes before launching new ones."""

    pool_state: Literal["Stopped"] = Field(default="Stopped", description="state of the instances in the pool")
    min_size: int = Field(default=0, ge=0, le=1, description="0: one stopped instance while the pool rests; 1: also a spare")
    reuse_on_scale_in: bool = Field(
        default=False, description="the stop returns the instance to the pool (its volume keeps weights and caches)"
    )
    prepare: bool = Field(
        default=False,
        description="a launch lifecycle hook holds each new pool instance in Warmed:Pending:Wait while its user data "
        "pulls the image, syncs the weights and fills the compile cache (a start from it skips all three)",
    )
    prepare_timeout_s: int = Field(default=3600, ge=30, le=7200, description="the hook's heartbeat timeout (ABANDON after it)")
    max_group_prepared_capacity: int | None = Field(
        default=None, ge=1, le=16, description="instances in the group and the pool together (null: the group's MaxSize)"
    )


class PoolVolume(_Strict):
    """The gp3 root volume of the pool's instances (image layers and model cache)."""

    size_gib: int = Field(ge=100, le=16384)
    throughput_mibps: int = Field(ge=125, le=1000)
    iops: int = Field(ge=3000, le=16000)


class ComputePool(_Strict):
    """One GPU shape: launch templates + ASG (optionally with a warm pool) + ECS capacity provider."""

    asg_name: str = Field(min_length=1, description="Auto Scaling group name")
    asg_arn: str = Field(pattern=r"^arn:aws[a-z-]*:autoscaling:", description="Auto Scaling group ARN")
    capacity_provider: str = Field(min_length=1, description="ECS capacity provider name")
    instance_type: str = Field(pattern=r"^[a-z0-9-]+\.[a-z0-9]+$", description="EC2 instance type, e.g. g7e.12xlarge")
    gpu_count: int = Field(ge=1, le=16)
    price_key: str | None = Field(default=None, description="key in the price catalog; the instance type when absent")
    gpu_memory_gib: int | None = Field(default=None, ge=1, description="total GPU memory of the instance type")
    launch_template_id: str | None = Field(
        default=None, pattern=r"^lt-[0-9a-z]+$", description="launch template of instance_type (the ASG's own)"
    )
    alternates: list[AlternateInstance] = Field(
        default_factory=list,
        max_length=3,
        description="instance types of the same GPU count and memory, tried in order when instance_type has no capacity",
    )
    volume: PoolVolume | None = Field(default=None, description="the instances' root volume (warm pool cost)")
    warm_pool: WarmPool | None = Field(default=None, description="the ASG's warm pool; none when absent")

    @model_validator(mode="after")
    def _alternates_are_other_types(self) -> ComputePool:
        types = [a.instance_type for a in self.alternates]
        if self.instance_type in types or len(set(types)) != len(types):
            raise ValueError(f"alternates must be distinct instance types other than instance_type {self.instance_type}: {types}")
        if types and self.launch_template_id is None:
            raise ValueError("launch_template_id is required with alternates: the start switches back to it")
        return self

    def options(self) -> list[tuple[str, str | None]]:
        """(instance type, launch template id) in the order a start tries them."""
        return [(self.instance_type, self.launch_template_id)] + [
            (a.instance_type, a.launch_template_id) for a in self.alternates
        ]


class RoutingHeader(_Strict):
    """The ALB listener rule routes requests carrying this header to the profile's target group."""

    name: str = Field(default="X-LLM-Profile", min_length=1)
    value: str = Field(min_length=1)


class ServingOptions(_Strict):
    """vLLM serving options, kept for the benchmark reproducibility record."""

    image: str = Field(min_length=1, description="container image of the model server")
    vllm_version: str | None = None
    model_id: str = Field(min_length=1, description="model repository id, e.g. nvidia/DeepSeek-V4-Flash-NVFP4")
    revision: str | None = Field(default=None, description="pinned model revision (commit)")
    tensor_parallel_size: int = Field(default=1, ge=1, le=16)
    max_num_seqs: int = Field(default=4, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    kv_cache_dtype: str | None = None
    speculative_tokens: int = Field(default=0, ge=0, le=8)
    cudagraph_capture_sizes: list[int] = Field(default_factory=list)
    load_format: Literal["sync", "runai_streamer"] = Field(
        default="sync",
        description="sync: the prefetch syncs the weights to the volume, vLLM loads them there; "
        "runai_streamer: vLLM streams them from S3 with the Run:ai model streamer (no prefetch)",
    )
    args: list[str] = Field(default_factory=list, description="the full vLLM command line as deployed")

    @model_validator(mode="after")
    def _capture_sizes_cover_batches(self) -> ServingOptions:
        # The reference lost 80 % of its throughput when size 8 was missing under MTP at 4 seqs.
        if self.cudagraph_capture_sizes:
            needed = self.max_num_seqs * (1 + self.speculative_tokens)
            if max(self.cudagraph_capture_sizes) < needed:
                raise ValueError(f"cudagraph_capture_sizes must reach max_num_seqs x (1 + speculative_tokens) = {needed}")
        return self


class Period(_Strict):
    """A running period (Instance Scheduler's model): times are local to the schedule's time zone."""

    begin_time: ClockTime | None = Field(default=None, description="HH:MM; start of day when absent")
    end_time: ClockTime | None = Field(default=None, description="HH:MM, exclusive; end of day when absent")
    weekdays: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS))
    month_days: list[Annotated[int, Field(ge=1, le=31)]] | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> Period:
        # begin == end would be a period of no minute at all: the sweep would stop the profile at
        # every run. A whole day is begin absent and end absent; overnight is end before begin.
        if self.end_time is not None and (self.begin_time or "00:00") == self.end_time:
            raise ValueError(
                f"begin_time and end_time are both {self.end_time}: the period would never run; "
                "omit both for the whole day, or give an end after the begin (before it runs overnight)"
            )
        return self


class Schedule(_Strict):
    """When a profile may run; outside every period the sweep stops it."""

    timezone: str = Field(default="UTC", description="IANA time zone, e.g. Asia/Tokyo")
    periods: list[Period] = Field(min_length=1)
    override: Literal["running", "stopped"] | None = Field(
        default=None, description="running: never stop for the schedule; stopped: always stop"
    )
    enforced: bool = Field(
        default=False,
        description="true: the end of a period stops the profile even while requests run (after the drain); "
        "false: running requests and a keepalive defer it",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r}") from exc
        return value


class IdleSettings(_Strict):
    """Stop a READY profile that served no request through its target group for window_minutes."""

    enabled: bool = True
    window_minutes: int = Field(default=30, ge=5, le=24 * 60)


class AutoStopSettings(_Strict):
    """How the sweep stops a profile: the warning before, the drain after a hard limit, the hard limits."""

    warning_minutes: int = Field(
        default=15, ge=1, le=24 * 60, description='minutes before a planned stop that the sweep publishes "Profile stopping soon"'
    )
    drain_minutes: int = Field(
        default=10,
        ge=0,
        le=120,
        description="after a hard limit, minutes running requests may still finish before the stop (0: stop at once)",
    )
    max_runtime_minutes: int | None = Field(
        default=None,
        ge=5,
        le=31 * 24 * 60,
        description="hard limit: minutes READY after which the profile is stopped whatever runs",
    )
    max_session_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="hard limit: a session's accrued cost (uptime x the catalog's hourly price) at which it is stopped",
    )


class StartSettings(_Strict):
    """Deadlines of the start flow's wait loops (seconds) and how many task failures to tolerate."""

    capacity_timeout_s: int = Field(default=900, ge=1)
    task_timeout_s: int = Field(default=2400, ge=1)
    health_timeout_s: int = Field(default=2400, ge=1)
    max_task_failures: int = Field(default=3, ge=1)


class FlowLimits(_Strict):
    """Largest deadlines and poll intervals a caller may ask a start or stop for (the API answers 400
    past them, the flows refuse them): no input can make a flow wait, or hold its lock, for days."""

    max_start_deadline_s: int = Field(
        default=7200, ge=60, le=86400, description="largest deadlines.capacity_s, task_s or health_s of a start"
    )
    max_stop_deadline_s: int = Field(
        default=3600, ge=60, le=86400, description="largest deadlines.lock_s, drain_s or terminate_s of a stop"
    )
    max_poll_interval_s: int = Field(
        default=300, ge=1, le=3600, description="largest poll.interval_s and poll.max_interval_s of a start or stop"
    )


class LoadEstimate(_Strict):
    """How long the model takes to load, as Terraform derived it from the checkpoint size and the
    pool's model-cache throughput (ECS replaces a task still unhealthy after the grace period)."""

    weights_gb: float | None = Field(default=None, gt=0, description="checkpoint size in GB (10^9 bytes)")
    cache_throughput_mibps: int = Field(ge=125, le=1000, description="gp3 throughput of the model cache volume")
    cache_iops: int = Field(ge=3000, le=16000, description="gp3 IOPS of the model cache volume")
    weights_pass_s: int | None = Field(
        default=None, ge=0, description="seconds to move the checkpoint through the cache volume once"
    )
    allowance_s: int = Field(ge=0, description="vLLM load, compile and CUDA-graph capture after the weights are read")
    health_check_grace_s: int = Field(
        ge=0, description="the ECS service's health-check grace period: 2 weights passes + allowance_s, or as set"
    )


class WakeRouting(_Strict):
    """Where the profile's listener rule forwards: the model's target group when READY, the waker's
    (a Lambda target group that answers 503 with Retry-After and starts the profile) otherwise."""

    listener_rule_arn: str = Field(pattern=r"^arn:aws[a-z-]*:elasticloadbalancing:.*:listener-rule/")
    waker_target_group_arn: str = Field(pattern=r"^arn:aws[a-z-]*:elasticloadbalancing:.*:targetgroup/")
    monthly_budget_usd: float | None = Field(
        default=None, gt=0, le=1_000_000, description="no wake once the profile's ledger cost this month reaches it"
    )


class ServingProfile(_Strict):
    """One model served by one ECS service on one compute pool behind the internal ALB."""

    cluster: str = Field(min_length=1, description="ECS cluster name")
    service: str = Field(min_length=1, description="ECS service name")
    pool: Name = Field(description="name of a compute pool in this registry")
    target_group_arn: str = Field(pattern=r"^arn:aws[a-z-]*:elasticloadbalancing:")
    load_balancer_arn: str = Field(pattern=r"^arn:aws[a-z-]*:elasticloadbalancing:")
    endpoint_url: str = Field(pattern=r"^https?://", description="base URL of the internal ALB")
    routing_header: RoutingHeader
    model: str = Field(min_length=1, description="served model name clients send in requests")
    serving: ServingOptions
    schedule: Schedule | None = None
    idle: IdleSettings = Field(default_factory=IdleSettings)
    default_lease_minutes: int = Field(default=120, ge=5, le=7 * 24 * 60)
    max_lease_minutes: int = Field(default=12 * 60, ge=5, le=31 * 24 * 60)
    start: StartSettings = Field(default_factory=StartSettings)
    autostop: AutoStopSettings = Field(default_factory=AutoStopSettings)
    limits: FlowLimits = Field(default_factory=FlowLimits)
    load: LoadEstimate | None = Field(default=None, description="derived model load time; absent in older registries")
    min_replicas: int = Field(
        default=1, ge=1, le=MAX_REPLICAS, description="tasks a start brings up and waits healthy for (one instance each)"
    )
    max_replicas: int = Field(
        default=1, ge=1, le=MAX_REPLICAS, description="tasks ECS service auto scaling may add under load while READY"
    )

    @model_validator(mode="after")
    def _replica_bounds(self) -> ServingProfile:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must not exceed max_replicas ({self.max_replicas})")
        return self

    wake_on_request: bool = Field(
        default=False, description="while not READY, requests reach the waker, which starts the profile (scale to zero)"
    )
    wake: WakeRouting | None = Field(
        default=None, description="the listener rule and waker target group; required by wake_on_request"
    )

    @model_validator(mode="after")
    def _wake_routed(self) -> ServingProfile:
        if self.wake_on_request and self.wake is None:
            raise ValueError(
                "wake_on_request needs wake (listener_rule_arn, waker_target_group_arn): the rule to point at the waker"
            )
        return self

    @model_validator(mode="after")
    def _lease_bounds(self) -> ServingProfile:
        if self.default_lease_minutes > self.max_lease_minutes:
            raise ValueError("default_lease_minutes must not exceed max_lease_minutes")
        start, largest = self.start, self.limits.max_start_deadline_s
        for name in ("capacity_timeout_s", "task_timeout_s", "health_timeout_s"):
            if getattr(start, name) > largest:
                raise ValueError(
                    f"start.{name} ({getattr(start, name)}) must not exceed limits.max_start_deadline_s ({largest}): "
                    "the default would be refused"
                )
        runtime = self.autostop.max_runtime_minutes
        if runtime is not None and runtime < self.default_lease_minutes:
            raise ValueError(
                f"autostop.max_runtime_minutes ({runtime}) "
                f"must not be below default_lease_minutes ({self.default_lease_minutes}): "
                "every start would be cut before its lease"
            )
        return self


class Registry(_Strict):
    """The whole registry document."""

    schema_version: Literal[1] = SCHEMA_VERSION
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    pools: dict[Name, ComputePool] = Field(max_length=MAX_POOLS)
    profiles: dict[Name, ServingProfile] = Field(max_length=MAX_PROFILES)

    @model_validator(mode="after")
    def _profiles_name_known_pools(self) -> Registry:
        for name, profile in self.profiles.items():
            if profile.pool not in self.pools:
                raise ValueError(f"profiles.{name}.pool: unknown pool {profile.pool!r}; known pools: {sorted(self.pools)}")
        return self

    def profile(self, name: str) -> ServingProfile:
        """Return the profile called name or raise KeyError naming the known ones."""
        try:
            return self.profiles[name]
        except KeyError:
            raise KeyError(f"unknown profile {name!r}; known profiles: {sorted(self.profiles)}") from None

    def pool_of(self, profile_name: str) -> ComputePool:
        """Return the compute pool a profile runs on."""
        return self.pools[self.profile(profile_name).pool]

    def profiles_on_pool(self, pool_name: str) -> list[str]:
        """Return the names of every profile that runs on pool_name."""
        return sorted(n for n, p in self.profiles.items() if p.pool == pool_name)
