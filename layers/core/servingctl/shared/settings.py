"""Execution input of the start/stop flows, validated and merged with the registry's defaults."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servingctl.shared.errors import InvalidInput, ProfileNotFound
from servingctl.registry.models import Registry, ServingProfile

# The lock owner renews its lease at every probe; the lease covers this many of the slowest polls
# plus a margin for one step between probes (a 180 s Lambda and its retries' back-off). A waiter
# takes over at once when the owner's execution is no longer RUNNING; the lease only bounds how long
# a lock outlives an owner nobody can ask about.
LOCK_LEASE_POLLS = 3
LOCK_LEASE_MARGIN_S = 300
# A stop flag outlives the stop's wait for the lock by this much, then lapses on its own.
STOP_FLAG_MARGIN_S = 300


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Poll(_Input):
    """Wait-loop pacing: interval_s * backoff^n, capped at max_interval_s (whole seconds, as Wait needs)."""

    interval_s: int = Field(default=15, ge=1, le=3600)
    max_interval_s: int = Field(default=60, ge=1, le=3600)
    backoff: float = Field(default=1.5, ge=1.0, le=10.0)

    @model_validator(mode="after")
    def _cap_not_below_interval(self) -> Poll:
        if self.max_interval_s < self.interval_s:
            raise ValueError("max_interval_s must be >= interval_s")
        return self


class StartDeadlines(_Input):
    """Seconds each start wait loop may take (registry profile.start settings when absent)."""

    capacity_s: int | None = Field(default=None, ge=1, le=86400)
    task_s: int | None = Field(default=None, ge=1, le=86400)
    health_s: int | None = Field(default=None, ge=1, le=86400)


class StartInput(_Input):
    """Input of start_profile."""

    profile: str = Field(min_length=1)
    allow_shared_pool: bool = False
    lease_minutes: int | None = Field(default=None, ge=5)
    poll: Poll = Field(default_factory=Poll)
    deadlines: StartDeadlines = Field(default_factory=StartDeadlines)
    requested_by: str | None = Field(
        default=None, max_length=2048, description="IAM ARN of who asked (the API's caller, the sweep's role)"
    )


class StopDeadlines(_Input):
    """Seconds each stop wait loop may take."""

    lock_s: int = Field(default=900, ge=1, le=86400)
    drain_s: int = Field(default=900, ge=1, le=86400)
    terminate_s: int = Field(default=900, ge=1, le=86400)


class StopInput(_Input):
    """Input of stop_profile."""

    profile: str = Field(min_length=1)
    poll: Poll = Field(default_factory=Poll)
    deadlines: StopDeadlines = Field(default_factory=StopDeadlines)
    requested_by: str | None = Field(
        default=None, max_length=2048, description="IAM ARN of who asked (the API's caller, the sweep's role)"
    )


class ResolvedDeadlines(_Input):
    """Start deadlines after the registry's defaults were merged in."""

    capacity_s: int
    task_s: int
    health_s: int


class StartSettings(_Input):
    """Everything the start steps need besides the registry."""

    allow_shared_pool: bool
    lease_minutes: int
    poll: Poll
    deadlines: ResolvedDeadlines
    max_task_failures: int
    lock_lease_s: int


class SmokeTarget(_Input):
    """What the in-VPC smoke test calls; carried in the state so that function needs no registry."""

    url: str
    header_name: str
    header_value: str
    model: str
    timeout_s: float = 10.0


class StartConfig(_Input):
    """$.config of start_profile."""

    flow: Literal["start"] = "start"
    profile: str
    pool: str
    settings: StartSettings
    smoke: SmokeTarget
    requested_by: str | None = None


class StopSettings(_Input):
    """Everything the stop steps need besides the registry."""

    poll: Poll
    deadlines: StopDeadlines
    lock_lease_s: int


class StopConfig(_Input):
    """$.config of stop_profile."""

    flow: Literal["stop"] = "stop"
    profile: str
    pool: str
    settings: StopSettings
    already_stopped: bool = False
    requested_by: str | None = None


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the (nested) model a validation error location points into."""
    for part in loc:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return sorted(model.model_fields)
        model = annotation
    return sorted(model.model_fields)


def invalid_input(exc: ValidationError, model: type[BaseModel]) -> InvalidInput:
    """One message naming every bad field, with the allowed fields or values."""
    problems = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "<input>"
        if err["type"] == "extra_forbidden":
            problems.append(f"{path}: unknown field; allowed fields: {', '.join(_fields_at(model, err['loc'][:-1]))}")
        elif err["type"] == "missing":
            problems.append(f"{path}: required")
        else:
            problems.append(f"{path}: {err['msg']} (got {err.get('input')!r})")
    return InvalidInput("invalid input: " + "; ".join(problems))


M = TypeVar("M", bound=BaseModel)


def parse_input(model: type[M], data: Any) -> M:
    """Validate execution input, raising InvalidInput that names each bad field."""
    if not isinstance(data, dict):
        raise InvalidInput(f"invalid input: expected a JSON object with fields {', '.join(sorted(model.model_fields))}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc, model) from None


def lock_lease_s(poll: Poll) -> int:
    """Seconds a lock lasts after its owner's last renewal: a few of the slowest polls plus one step."""
    return LOCK_LEASE_POLLS * poll.max_interval_s + LOCK_LEASE_MARGIN_S


def _within(problems: list[str], field: str, value: int | None, largest: int, limit: str, profile: str) -> None:
    if value is not None and value > largest:
        problems.append(f"{field}: must be between 1 and {largest} seconds (the {limit} of {profile}); got {value}")


def limit_problems(profile: str, spec: ServingProfile, poll: Poll | None, deadlines: dict[str, int | None]) -> list[str]:
    """What in a start's or stop's poll and deadlines exceeds the profile's registry limits, one
    line per field naming the allowed range (empty when everything is within them)."""
    limits, problems = spec.limits, []
    if poll is not None:
        for name in ("interval_s", "max_interval_s"):
            _within(problems, f"poll.{name}", getattr(poll, name), limits.max_poll_interval_s,
                    "limits.max_poll_interval_s", profile)
    for name, value in deadlines.items():
        stop = name in StopDeadlines.model_fields
        largest = limits.max_stop_deadline_s if stop else limits.max_start_deadline_s
        limit = "limits.max_stop_deadline_s" if stop else "limits.max_start_deadline_s"
        _within(problems, f"deadlines.{name}", value, largest, limit, profile)
    return problems


def _check_limits(profile: str, spec: ServingProfile, poll: Poll, deadlines: BaseModel) -> None:
    problems = limit_problems(profile, spec, poll, deadlines.model_dump())
    if problems:
        raise InvalidInput("invalid input: " + "; ".join(problems))


def resolve_profile(registry: Registry, name: str) -> ServingProfile:
    """The registry's profile, or ProfileNotFound listing the known names."""
    if name not in registry.profiles:
        raise ProfileNotFound(f"profile: unknown profile {name!r}; known profiles: {', '.join(sorted(registry.profiles))}")
    return registry.profiles[name]


def start_config(registry: Registry, data: Any) -> StartConfig:
    """Validate start input and merge the profile's defaults into the flow's config."""
    given = parse_input(StartInput, data)
    profile = resolve_profile(registry, given.profile)
    lease = given.lease_minutes if given.lease_minutes is not None else profile.default_lease_minutes
    if lease > profile.max_lease_minutes:
        raise InvalidInput(f"invalid input: lease_minutes: must be between 5 and {profile.max_lease_minutes} for {given.profile} (got {lease})")
    _check_limits(given.profile, profile, given.poll, given.deadlines)
    deadlines = ResolvedDeadlines(
        capacity_s=given.deadlines.capacity_s or profile.start.capacity_timeout_s,
        task_s=given.deadlines.task_s or profile.start.task_timeout_s,
        health_s=given.deadlines.health_s or profile.start.health_timeout_s,
    )
    return StartConfig(
        profile=given.profile,
        pool=profile.pool,
        settings=StartSettings(
            allow_shared_pool=given.allow_shared_pool,
            lease_minutes=lease,
            poll=given.poll,
            deadlines=deadlines,
            max_task_failures=profile.start.max_task_failures,
            lock_lease_s=lock_lease_s(given.poll),
        ),
        smoke=SmokeTarget(
            url=profile.endpoint_url,
            header_name=profile.routing_header.name,
            header_value=profile.routing_header.value,
            model=profile.model,
        ),
        requested_by=given.requested_by,
    )


def stop_config(registry: Registry, data: Any, already_stopped: bool = False) -> StopConfig:
    """Validate stop input and resolve the profile's pool."""
    given = parse_input(StopInput, data)
    profile = resolve_profile(registry, given.profile)
    _check_limits(given.profile, profile, given.poll, given.deadlines)
    return StopConfig(
        profile=given.profile,
        pool=profile.pool,
        settings=StopSettings(
            poll=given.poll,
            deadlines=given.deadlines,
            lock_lease_s=lock_lease_s(given.poll),
        ),
        already_stopped=already_stopped,
        requested_by=given.requested_by,
    )
