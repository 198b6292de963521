"""Each instance's span in a session, read from its group's scaling activities (newest first, paged)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from servingctl.control import aws
from servingctl.store.models import InstanceSpan

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Activities:
    """An Auto Scaling client that lists the given activities, newest first, two to a page."""

    def __init__(self, activities: list[dict[str, Any]]) -> None:
        self.activities = sorted(activities, key=lambda a: a["StartTime"], reverse=True)
        self.pages_read = 0

    def get_paginator(self, name: str) -> Activities:
        assert name == "describe_scaling_activities"
        return self

    def paginate(self, **_: Any) -> Any:
        for start in range(0, len(self.activities), 2):
            self.pages_read += 1
            yield {"Activities": self.activities[start : start + 2]}


def _activity(minutes: float, description: str, status: str = "Successful") -> dict[str, Any]:
    at = T0 + timedelta(minutes=minutes)
    return {"StartTime": at, "EndTime": at + timedelta(seconds=30), "Description": description, "StatusCode": status}


def test_each_instance_runs_from_its_launch_to_its_termination() -> None:
    client = Activities(
        [
            _activity(-70, "Launching a new EC2 instance: i-old"),  # before the session: not read
            _activity(-60, "Terminating EC2 instance: i-old"),
            _activity(-50, "Launching a new EC2 instance: i-older"),
            _activity(1, "Launching a new EC2 instance: i-1"),
            _activity(20, "Launching a new EC2 instance.  Status Reason: We currently do not have sufficient capacity", "Failed"),
            _activity(21, "Launching a new EC2 instance from warm pool: i-2"),
            _activity(22, "Launching a new EC2 instance into warm pool: i-refill"),  # stopped in the pool, not in service
            _activity(90, "Terminating EC2 instance: i-2"),
            _activity(100, "Terminating EC2 instance: i-running-before"),
        ]
    )
    spans = aws.instance_spans(client, "asg", since=T0)  # type: ignore[arg-type]
    assert spans == [
        InstanceSpan(instance_id="i-running-before", started_at=T0, stopped_at=T0 + timedelta(minutes=100, seconds=30)),
        InstanceSpan(instance_id="i-1", started_at=T0 + timedelta(minutes=1), stopped_at=None),
        InstanceSpan(instance_id="i-2", started_at=T0 + timedelta(minutes=21), stopped_at=T0 + timedelta(minutes=90, seconds=30)),
    ]
    # Newest first: the pages stop at the first activity older than the session (page 4 of 5).
    assert client.pages_read == 4


def test_a_group_with_no_activity_since_gives_no_span() -> None:
    assert aws.instance_spans(Activities([_activity(-5, "Launching a new EC2 instance: i-1")]), "asg", since=T0) == []  # type: ignore[arg-type]
