"""CloudWatch's moto patch: GetMetricStatistics rounds StartTime down as CloudWatch does, so the
datapoint stamped in the start's own minute is returned (moto compares the exact time and drops it:
an idle window read at 12:05:30 missed a request of 12:00:10, one minute early)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from moto.cloudwatch.models import CloudWatchBackend

from servingctl_twin.patching import Patch, original

# AWS, GetMetricStatistics StartTime: "Start time less than 15 days ago - Round down to the nearest
# whole minute ... between 15 and 63 days ago - ... 5-minute clock interval ... greater than 63 days
# ago - ... 1-hour clock interval"; periods of 1, 5, 10, 20 or 30 s round to that many seconds.
ROUNDING = ((timedelta(days=15), 60), (timedelta(days=63), 300))
HIGH_RESOLUTION_PERIODS = (1, 5, 10, 20, 30)


def rounded_start(start: datetime, period: int, now: datetime) -> datetime:
    """StartTime as CloudWatch reads it, for a request received at now."""
    if period in HIGH_RESOLUTION_PERIODS:
        step = period
    else:
        step = next((seconds for age, seconds in ROUNDING if now - start < age), 3600)
    # Every step divides an hour: round within the hour, keeping the caller's time zone (or none).
    offset = (start.minute * 60 + start.second) % step
    return start.replace(microsecond=0) - timedelta(seconds=offset)


def _get_metric_statistics(
    self: CloudWatchBackend,
    namespace: str,
    metric_name: str,
    start_time: datetime,
    end_time: datetime,
    period: int,
    stats: list[str],
    dimensions: list[dict[str, str]],
    unit: str | None = None,
) -> Any:
    """moto's statistics from the start time CloudWatch rounds to."""
    now = datetime.now(UTC)
    start = rounded_start(start_time, period, now if start_time.tzinfo else now.replace(tzinfo=None))
    return original("CloudWatchBackend.get_metric_statistics")(
        self, namespace, metric_name, start, end_time, period, stats, dimensions, unit
    )


PATCHES = [
    # StartTime rounded down (to the minute under 15 days): the start's minute is included.
    Patch(
        "CloudWatchBackend.get_metric_statistics",
        CloudWatchBackend,
        "get_metric_statistics",
        ("self", "namespace", "metric_name", "start_time", "end_time", "period", "stats", "dimensions", "unit"),
        _get_metric_statistics,
    ),
]
