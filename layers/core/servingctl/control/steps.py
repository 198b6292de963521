"""The action table the profile_steps Lambda dispatches on, with the error mapping every step gets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servingctl.control import flow, start, stop
from servingctl.control.deps import Deps
from servingctl.shared.errors import InvalidInput, throttling_as_error

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


def run_step(event: Any, deps: Deps) -> dict[str, Any]:
    """Run event["action"] on event["state"] for event["execution"]; AWS throttling becomes Throttled."""
    if not isinstance(event, dict):
        raise InvalidInput("event: expected an object with fields action, state, execution")
    action = event.get("action")
    if action not in ACTIONS:
        raise InvalidInput(f"action: unknown {action!r}; allowed: {', '.join(ACTIONS)}")
    state, execution = event.get("state"), event.get("execution")
    if not isinstance(state, dict):
        raise InvalidInput("state: expected the execution state object ($)")
    if not isinstance(execution, str) or not execution:
        raise InvalidInput("execution: expected the execution ARN ($$.Execution.Id)")
    with throttling_as_error():
        return ACTIONS[action](deps, state, execution)
