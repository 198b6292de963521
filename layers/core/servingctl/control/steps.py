"""The action table the profile_steps Lambda dispatches on, with the error mapping every step gets, and
what a step's result announces: its lifecycle event (EventBridge) and its metrics (CloudWatch).

A step gets the execution state as its flow's model (servingctl.control.state) and answers with the
model of what it writes to its ResultPath; the JSON on either side is this module's business."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from servingctl.control import events, flow, start, stop
from servingctl.control.deps import Deps
from servingctl.control.polling import Check
from servingctl.control.state import (
    Closed,
    Current,
    FlowState,
    LockTaken,
    PoolGuard,
    Ready,
    Released,
    Routed,
    ScaledIn,
    ScaledOut,
    StartState,
    StopFlagged,
    StopState,
    Undone,
    Unlocked,
    flow_state,
    parse_state,
)
from servingctl.shared.errors import InvalidInput, action_of, throttling_as_error
from servingctl.shared.flow_inputs import StartConfig, StopConfig

S = TypeVar("S", bound=FlowState)
A = TypeVar("A", bound=BaseModel)


@dataclass(frozen=True)
class Action(Generic[S, A]):
    """One step: the flow state model it reads, the model it answers with, and the step itself."""

    state: type[S]
    answer: type[A]
    step: Callable[[Deps, S, str], A]

    def parse(self, data: Any) -> S:
        """The state as this step's model (a shared step's: its flow's, by $.config.flow)."""
        parsed = flow_state(data) if self.state is FlowState else parse_state(self.state, data)
        assert isinstance(parsed, self.state)
        return parsed

    def run(self, deps: Deps, data: Any, execution: str) -> dict[str, Any]:
        """Validate the state, run the step, and give its answer as the JSON the ResultSelector reads."""
        return self.step(deps, self.parse(data), execution).model_dump(mode="json")


ACTIONS: dict[str, Action[Any, Any]] = {
    # start_profile
    "prepare_start": Action(StartState, StartConfig, start.prepare_start),
    "acquire_lock": Action(StartState, LockTaken, start.acquire_lock),
    "check_current": Action(StartState, Current, start.check_current),
    "guard_pool": Action(FlowState, PoolGuard, flow.guard_pool),
    "scale_out": Action(StartState, ScaledOut, start.scale_out),
    "check_capacity": Action(StartState, Check, start.check_capacity),
    "check_task": Action(StartState, Check, start.check_task),
    "check_targets": Action(StartState, Check, start.check_targets),
    "route_to_model": Action(StartState, Routed, start.route_to_model),
    "record_ready": Action(StartState, Ready, start.record_ready),
    "release_lock": Action(FlowState, Unlocked, flow.release_lock),
    "roll_back": Action(StartState, Undone, start.roll_back),
    # stop_profile (guard_pool and release_lock are shared)
    "prepare_stop": Action(StopState, StopConfig, stop.prepare_stop),
    "request_stop": Action(StopState, StopFlagged, stop.request_stop),
    "await_lock": Action(StopState, Check, stop.await_lock),
    "scale_in_service": Action(StopState, ScaledIn, stop.scale_in_service),
    "check_drained": Action(StopState, Check, stop.check_drained),
    "release_capacity": Action(StopState, Released, stop.release_capacity),
    "check_terminated": Action(StopState, Check, stop.check_terminated),
    "close_session": Action(StopState, Closed, stop.close_session),
    "force_release": Action(StopState, Undone, stop.force_release),
}


# Steps that change what runs -> the lifecycle event they publish (servingctl.control.events).
LIFECYCLE = {
    "scale_out": events.STARTING,
    "record_ready": events.READY,
    "roll_back": events.START_FAILED,
    "close_session": events.STOPPED,
    "force_release": events.STOP_FAILED,
}
# Steps that may find nothing to do: they announce only what they did (result "acted").
ACT_IF_NEEDED = frozenset({"roll_back", "force_release"})


def run_step(event: Any, deps: Deps) -> dict[str, Any]:
    """Run event["action"] on event["state"] for event["execution"]; AWS throttling becomes Throttled."""
    action = action_of(event, ACTIONS)
    execution = event.get("execution")
    if not isinstance(execution, str) or not execution:
        raise InvalidInput("execution: expected the execution ARN ($$.Execution.Id)")
    with throttling_as_error():
        return ACTIONS[action].run(deps, event.get("state"), execution)


def step_profile(event: Any) -> str | None:
    """The profile an event's step is about: $.config's, or the input's before prepare ran."""
    state = event.get("state") if isinstance(event, dict) else None
    if not isinstance(state, dict):
        return None
    config = state.get("config")
    return (config.get("profile") if isinstance(config, dict) else None) or state.get("profile")


def lifecycle_event(event: dict[str, Any], result: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The event (detail type, detail) a step's result announces; None when the step changed nothing."""
    action = event.get("action")
    if action not in LIFECYCLE or (action in ACT_IF_NEEDED and not result.get("acted")):
        return None
    config = event["state"].get("config") or {}
    detail = {
        "profile": step_profile(event),
        "execution": event.get("execution"),
        "requested_by": config.get("requested_by"),
        **result,
    }
    return LIFECYCLE[action], detail


def step_metrics(action: str, result: dict[str, Any]) -> list[tuple[str, str, float]]:
    """The metrics (name, unit, value) a step's result counts: starts and stops that ended, phase times."""
    if action == "record_ready":
        phases = [(f"PhaseSeconds{phase.capitalize()}", "Seconds", seconds) for phase, seconds in result["phase_seconds"].items()]
        return [("StartSucceeded", "Count", 1), *phases]
    if action == "close_session":
        return [("StopSucceeded", "Count", 1)]
    if action in ACT_IF_NEEDED and result.get("acted"):
        return [("StartFailed" if action == "roll_back" else "StopFailed", "Count", 1)]
    return []
