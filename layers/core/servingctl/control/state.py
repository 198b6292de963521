"""The execution state of start_profile and stop_profile as models: one model per ResultPath (what a
step writes to $.<key>) and one per flow for the whole state a step reads ($).

tests/unit/control/test_state_contract.py ties them to statemachine/*.asl.json: every ResultPath is a
field of its flow's state, a ResultSelector keeps exactly the fields of the model its step answers
with, and every path the ASL reads names a field that exists.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servingctl.control.polling import Check
from servingctl.shared.errors import InvalidInput, error_reason
from servingctl.shared.flow_inputs import StartConfig, StopConfig, invalid_input
from servingctl.store.models import Session


class Answer(BaseModel):
    """What one step writes to its ResultPath; exactly the fields its ResultSelector keeps."""

    model_config = ConfigDict(extra="forbid")


class StepError(BaseModel):
    """A Catch's {Error, Cause} ($.error, $.rollback_error)."""

    model_config = ConfigDict(extra="forbid")

    Error: str
    Cause: str = ""


class LockTaken(Answer):
    """$.lock of start_profile (acquire_lock): the locks held and the dead owners taken over from."""

    owner: str
    expires_at: str | None
    locks: list[str]
    taken_over_from: list[str]


class Current(Answer):
    """$.current (check_current): the recorded phase; ready when READY with a task running."""

    phase: str
    ready: bool


class PoolGuard(Answer):
    """$.pool (guard_pool): other profiles on the pool; keep it when there are any."""

    others: list[str]
    keep: bool


class Baseline(BaseModel):
    """What failed or stopped before this start, by id: none of it is this start's failure."""

    model_config = ConfigDict(extra="forbid")

    failed_activities: list[str]
    stopped_tasks: list[str]
    warm_instances: list[str]


class ScaledOut(Answer):
    """$.scale (scale_out): when, whether the group was scaled, the session and timeline ids."""

    at: str
    asg_scaled: bool
    session_id: str
    start_id: str
    health_grace_s: int | None
    baseline: Baseline


class Routed(Answer):
    """$.route (route_to_model): whether the listener rule was pointed back at the model."""

    routed: bool
    detail: str


class SmokePassed(Answer):
    """$.smoke (the smoke_test function): what the endpoint served and when its first token came."""

    ok: bool
    first_token_at: str | None
    detail: str
    models: list[str]


class TimelinePhase(BaseModel):
    """One phase of the start's timeline: the mark that ends it, its seconds, seconds since the request."""

    model_config = ConfigDict(extra="forbid")

    mark: str
    seconds: float
    since_request: float


class Fallback(BaseModel):
    """One instance type the capacity wait moved away from, and why (servingctl.control.launch_failures)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    instance_type: str | None
    # "class" is a keyword: `kind` in Python, "class" in the JSON the state and the event carry.
    kind: str | None = Field(alias="class")
    code: str | None
    reason: str | None
    at: str | None


class Ready(Answer):
    """$.record (record_ready): READY, phase times, lease, the timeline, and the capacity it got."""

    phase: str
    phase_seconds: dict[str, float]
    lease_deadline: str | None
    timeline: list[TimelinePhase]
    instance_type: str
    warm_start: bool
    capacity_fallbacks: list[Fallback]


class Unlocked(Answer):
    """$.unlock (release_lock): the locks given back."""

    released: list[str]


class Undone(Answer):
    """$.rollback (roll_back, force_release): whether anything was undone, in words."""

    acted: bool
    detail: str


class StopFlagged(Answer):
    """$.request (request_stop): until when the stop flag holds."""

    requested_until: str | None


class ScaledIn(Answer):
    """$.scale_in (scale_in_service): when the service went to desired 0, and what was done to get there."""

    at: str
    service_desired: int
    detail: str = ""
    to_waker: bool = False


class Released(Answer):
    """$.release (release_capacity): the pool's instances, and those whose protection was cleared."""

    instances: list[str]
    protection_cleared: list[str]


class Closed(Answer):
    """$.session (close_session): STOPPED, and the ledger session as closed (None when none was open)."""

    phase: str
    session: Session | None


class FlowState(BaseModel):
    """What both flows' states hold. The execution input's own fields (profile, poll, ...) pass
    through as extra fields: prepare_start / prepare_stop validate them (InvalidInput naming each)."""

    model_config = ConfigDict(extra="allow")

    config: StartConfig | StopConfig | None = None
    pool: PoolGuard | None = None
    unlock: Unlocked | None = None
    rollback: Undone | None = None
    error: StepError | None = None
    rollback_error: StepError | None = None

    def given(self) -> dict[str, Any]:
        """The execution input as given (everything no step wrote)."""
        return dict(self.model_extra or {})

    def error_reason(self) -> str:
        """'<Error>: <message>' of the failure the flow caught ($.error)."""
        return error_reason(self.error.model_dump() if self.error else None)

    def profile(self) -> str | None:
        """The profile the flow is about: $.config's, or the input's before prepare ran."""
        if self.config is not None:
            return self.config.profile
        named = self.given().get("profile")
        return named if isinstance(named, str) else None


class StartState(FlowState):
    """$ of start_profile."""

    config: StartConfig | None = None
    lock: LockTaken | None = None
    current: Current | None = None
    scale: ScaledOut | None = None
    capacity: Check | None = None
    task: Check | None = None
    targets: Check | None = None
    route: Routed | None = None
    smoke: SmokePassed | None = None
    record: Ready | None = None


class StopState(FlowState):
    """$ of stop_profile."""

    config: StopConfig | None = None
    request: StopFlagged | None = None
    lock: Check | None = None
    scale_in: ScaledIn | None = None
    drain: Check | None = None
    release: Released | None = None
    termination: Check | None = None
    session: Closed | None = None


S = TypeVar("S", bound=BaseModel)


def parse_state(model: type[S], data: Any) -> S:
    """The execution state a step got, as its model; InvalidInput names each bad field."""
    if not isinstance(data, dict):
        raise InvalidInput("state: expected the execution state object ($)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc, model) from None


def flow_state(data: Any) -> FlowState:
    """The state of whichever flow a shared step (guard_pool, release_lock) runs in, by $.config.flow."""
    config = data.get("config") if isinstance(data, dict) else None
    flow = config.get("flow") if isinstance(config, dict) else None
    return parse_state(StopState if flow == "stop" else StartState, data)
