"""Execution input and $.config of the start/stop flows as models, and the validation every flow's input
gets (errors naming each bad field); the registry's defaults are merged in by servingctl.control.config."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servingctl.shared.errors import InvalidInput

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
    no_wake: bool = Field(default=False, description="no request wakes the profile until the next start (stop --no-wake)")
    requested_by: str | None = Field(
        default=None, max_length=2048, description="IAM ARN of who asked (the API's caller, the sweep's role)"
    )


class ResolvedDeadlines(_Input):
    """Start deadlines after the registry's defaults (or the profile's start history) were merged in."""

    capacity_s: int
    task_s: int
    health_s: int
    derived: list[str] = Field(default_factory=list, description="the deadlines derived from past starts' timelines")


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
    no_wake: bool = False
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
