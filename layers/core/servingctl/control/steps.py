"""The action table the profile_steps Lambda dispatches on, with the error mapping every step gets, and
what a step's result announces: its lifecycle event (EventBridge) and its metrics (CloudWatch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servingctl.control import events, flow, start, stop
from servingctl.control.deps import Deps
from servingctl.shared.errors import InvalidInput, action_of, throttling_as_error

Step = Callable[[Deps, dict[str, Any], str], dict[str, Any]]

ACTIONS: dict[str, Step] = {
    # start_profile
    "prepare_start": start.prepare_start,
    "acquire_lock": start.acquire_lock,
    "check_current": start.check_current,
    "guard_pool": flow.guard_pool,
    "scale_out": start.scale_out,
    "check_capacity": start.check_capacity,
    "check_task": start.check_task,
    "check_targets": start.check_targets,
    "record_ready": start.record_ready,
    "release_lock": flow.release_lock,
    "roll_back": start.roll_back,
    # stop_profile (guard_pool and release_lock are shared)
    "prepare_stop": stop.prepare_stop,
    "request_stop": stop.request_stop,
    "await_lock": stop.await_lock,
    "scale_in_service": stop.scale_in_service,
    "check_drained": stop.check_drained,
    "release_capacity": stop.release_capacity,
    "check_terminated": stop.check_terminated,
    "close_session": stop.close_session,
    "force_release": stop.force_release,
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
    state, execution = event.get("state"), event.get("execution")
    if not isinstance(state, dict):
        raise InvalidInput("state: expected the execution state object ($)")
    if not isinstance(execution, str) or not execution:
        raise InvalidInput("execution: expected the execution ARN ($$.Execution.Id)")
    with throttling_as_error():
        return ACTIONS[action](deps, state, execution)


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
