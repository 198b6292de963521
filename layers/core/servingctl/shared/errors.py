"""Errors the steps of every flow raise on purpose (the class name is the Step Functions error name,
Lambda's errorType), and how a Catch's error document reads back as a reason."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

# Error codes AWS services use for "slow down" (after botocore's own retries gave up).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
    }
)


class ControlError(Exception):
    """Base of every error a step raises on purpose."""


class Busy(Exception):
    """A backend of the project kept refusing for contention or load: worth a retry with back-off.

    Defined here, raised below (the store's StoreBusy), so that throttling_as_error needs no backend.
    """


class InvalidInput(ControlError):
    """The execution input is malformed; the message names the field and the allowed values."""


class ProfileNotFound(ControlError):
    """The profile is not in the registry; the message lists the known ones."""


class LockHeld(ControlError):
    """Another execution holds the profile or pool lock."""


class PoolBusy(ControlError):
    """Another profile is active on the pool and sharing was not allowed."""


class CapacityUnavailable(ControlError):
    """The Auto Scaling group failed to launch an instance (AWS's status message attached)."""


class TaskFailed(ControlError):
    """The service's tasks kept stopping; the last stopped reason is attached."""


class DeadlineExceeded(ControlError):
    """A wait loop passed its deadline; the message says what was still missing."""


class SmokeTestFailed(ControlError):
    """/health or /v1/models did not answer as a serving model server should."""


class StopRequested(ControlError):
    """A stop was requested for the profile while it was starting."""


class Throttled(ControlError):
    """An AWS API throttled the step; the state machine retries it with back-off."""


@contextmanager
def throttling_as_error() -> Iterator[None]:
    """Re-raise AWS throttling errors (and a table that kept cancelling a lock transaction for
    conflicts or throttling) as Throttled so the state machines' Retry catches them."""
    try:
        yield
    except Busy as exc:
        raise Throttled(f"DynamoDB: {exc}") from exc
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in THROTTLING_CODES:
            raise Throttled(f"{exc.operation_name}: {error.get('Code')}: {error.get('Message', '')}") from exc
        raise


def action_of(event: Any, actions: Collection[str]) -> str:
    """The action a state machine's Task event names, or InvalidInput naming the allowed ones."""
    if not isinstance(event, dict):
        raise InvalidInput("event: expected an object with fields action, state, execution")
    action = event.get("action")
    if not isinstance(action, str) or action not in actions:
        raise InvalidInput(f"action: unknown {action!r}; allowed: {', '.join(actions)}")
    return action


def error_reason(error: dict[str, Any] | None) -> str:
    """'<Error>: <message>' from a Catch's {Error, Cause} (Lambda causes are JSON with errorMessage)."""
    if not error:
        return "unknown error"
    cause = error.get("Cause") or ""
    try:
        message = json.loads(cause).get("errorMessage", cause)
    except (ValueError, AttributeError):
        message = cause
    return f"{error.get('Error', 'Error')}: {message}".rstrip(": ")
