"""Errors of the start/stop steps; the class name is the Step Functions error name (Lambda errorType)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import ClientError

from servingctl.store.base import StoreBusy

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
    except StoreBusy as exc:
        raise Throttled(f"DynamoDB: {exc}") from exc
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in THROTTLING_CODES:
            raise Throttled(f"{exc.operation_name}: {error.get('Code')}: {error.get('Message', '')}") from exc
        raise
