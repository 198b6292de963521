"""Sweep decisions over lease, idle and schedule cases, time zones and DST, with a frozen clock."""

import json
from datetime import UTC, datetime, timedelta
from importlib import resources

import pytest

from servingctl.control.schedule import should_run
from servingctl.control.sweep import decide
from servingctl.registry import Schedule, parse_registry

BASE = json.loads(resources.files("servingctl.local").joinpath("reference_registry.json").read_text())["profiles"][
    "deepseek-v4-flash"
]


def profile(**changes):
    doc = dict(BASE) | changes
    return parse_registry(
        {
            "region": "us-east-1",
            "pools": {"g7e-2gpu": {"asg_name": "a", "asg_arn": "arn:aws:autoscaling:x", "capacity_provider": "c",
                                   "instance_type": "g7e.12xlarge", "gpu_count": 2}},
            "profiles": {"p": doc},
        }
    ).profile("p")


OFFICE_TOKYO = {"timezone": "Asia/Tokyo", "periods": [{"begin_time": "09:00", "end_time": "19:00", "weekdays": ["mon", "tue", "wed", "thu", "fri"]}]}
NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)  # Wed 12:00 in Tokyo


def run(p, now=NOW, ready_for=timedelta(hours=1), lease_in=timedelta(hours=1), requests=5):
    return decide("p", p, now=now, ready_since=now - ready_for, lease_deadline=now + lease_in, requests_in_idle_window=requests)


def test_keeps_a_used_profile_inside_its_schedule_and_lease():
    d = run(profile(schedule=OFFICE_TOKYO))
    assert (d.stop, d.reason) == (False, "in-use")


def test_stops_outside_schedule_and_says_when_in_local_time():
    evening = datetime(2026, 12, 2, 11, 30, tzinfo=UTC)  # 20:30 JST
    d = run(profile(schedule=OFFICE_TOKYO), now=evening)
    assert (d.stop, d.reason) == (True, "outside-schedule")
    assert "20:30 JST" in d.detail


def test_weekend_is_outside_a_weekday_schedule():
    saturday_noon_tokyo = datetime(2026, 12, 5, 3, 0, tzinfo=UTC)
    assert run(profile(schedule=OFFICE_TOKYO), now=saturday_noon_tokyo).reason == "outside-schedule"


def test_lease_expiry_stops_and_keepalive_time_keeps():
    assert run(profile(), lease_in=timedelta(seconds=-1)).reason == "lease-expired"
    assert run(profile(), lease_in=timedelta(seconds=1)).stop is False


def test_idle_stops_only_after_a_full_window_with_no_requests():
    p = profile(idle={"enabled": True, "window_minutes": 30})
    assert run(p, requests=0, ready_for=timedelta(minutes=29)).stop is False
    d = run(p, requests=0, ready_for=timedelta(minutes=31))
    assert (d.stop, d.reason) == (True, "idle")
    assert run(p, requests=None, ready_for=timedelta(hours=2)).reason == "idle-unknown"
    assert run(profile(idle={"enabled": False}), requests=0).stop is False


def test_overrides_beat_schedule_lease_and_idle():
    keep = run(profile(schedule=OFFICE_TOKYO | {"override": "running"}), now=datetime(2026, 12, 5, 3, tzinfo=UTC),
               lease_in=timedelta(hours=-1), requests=0)
    assert (keep.stop, keep.reason) == (False, "override-running")
    assert run(profile(schedule=OFFICE_TOKYO | {"override": "stopped"})).reason == "override-stopped"


def test_overnight_period_belongs_to_the_day_it_started():
    night = Schedule(timezone="UTC", periods=[{"begin_time": "22:00", "end_time": "06:00", "weekdays": ["fri"]}])
    assert should_run(night, datetime(2026, 12, 4, 23, 0, tzinfo=UTC))  # Friday 23:00
    assert should_run(night, datetime(2026, 12, 5, 5, 59, tzinfo=UTC))  # Saturday 05:59, started Friday
    assert not should_run(night, datetime(2026, 12, 5, 6, 0, tzinfo=UTC))
    assert not should_run(night, datetime(2026, 12, 5, 23, 0, tzinfo=UTC))  # Saturday night


@pytest.mark.parametrize(
    ("utc", "running"),
    [
        # New York, 2026-03-08 DST starts (02:00 EST -> 03:00 EDT). Period 08:00-18:00 local.
        (datetime(2026, 3, 7, 13, 0, tzinfo=UTC), True),  # Sat 08:00 EST
        (datetime(2026, 3, 7, 12, 59, tzinfo=UTC), False),
        (datetime(2026, 3, 8, 12, 0, tzinfo=UTC), True),  # Sun 08:00 EDT: one UTC hour earlier than the day before
        (datetime(2026, 3, 8, 11, 59, tzinfo=UTC), False),
        (datetime(2026, 3, 8, 21, 59, tzinfo=UTC), True),  # 17:59 EDT
        (datetime(2026, 3, 8, 22, 0, tzinfo=UTC), False),  # 18:00 EDT
        # 2026-11-01 DST ends: 08:00 EST is 13:00 UTC again.
        (datetime(2026, 11, 1, 12, 30, tzinfo=UTC), False),  # 07:30 EST
        (datetime(2026, 11, 1, 13, 0, tzinfo=UTC), True),
    ],
)
def test_schedule_keeps_local_wall_clock_across_dst(utc, running):
    schedule = Schedule(timezone="America/New_York", periods=[{"begin_time": "08:00", "end_time": "18:00"}])
    assert should_run(schedule, utc) is running


def test_month_days_restrict_a_period():
    schedule = Schedule(timezone="UTC", periods=[{"month_days": [1, 15]}])
    assert should_run(schedule, datetime(2026, 12, 15, 10, tzinfo=UTC))
    assert not should_run(schedule, datetime(2026, 12, 16, 10, tzinfo=UTC))
