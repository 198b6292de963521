"""Sweep decisions over lease, idle and schedule cases, time zones and DST, with a frozen clock."""

import json
from datetime import UTC, datetime, timedelta
from importlib import resources

import pytest

from servingctl.control.sweep import decide
from servingctl.registry import Schedule, parse_registry
from servingctl.registry.schedule import should_run

BASE = json.loads(resources.files("servingctl_twin").joinpath("reference_registry.json").read_text())["profiles"][
    "deepseek-v4-flash"
]


def profile(**changes):
    doc = dict(BASE) | changes
    return parse_registry(
        {
            "region": "us-east-1",
            "pools": {
                "g7e-2gpu": {
                    "asg_name": "a",
                    "asg_arn": "arn:aws:autoscaling:x",
                    "capacity_provider": "c",
                    "instance_type": "g7e.12xlarge",
                    "gpu_count": 2,
                }
            },
            "profiles": {"p": doc},
        }
    ).profile("p")


OFFICE_TOKYO = {
    "timezone": "Asia/Tokyo",
    "periods": [{"begin_time": "09:00", "end_time": "19:00", "weekdays": ["mon", "tue", "wed", "thu", "fri"]}],
}
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
    keep = run(
        profile(schedule=OFFICE_TOKYO | {"override": "running"}),
        now=datetime(2026, 12, 5, 3, tzinfo=UTC),
        lease_in=timedelta(hours=-1),
        requests=0,
    )
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


# ---- request-aware auto-stop: gauges, hard limits and their drain, holds, keepalive, warnings ----
BUSY = {"running": 2, "waiting": 1}
QUIET = {"running": 0, "waiting": 0}


def at_lease_end(p, delta, **observed):
    """The decision `delta` after the lease ended (negative: before it), ready for a long time."""
    return decide(
        "p",
        p,
        now=NOW,
        ready_since=NOW - timedelta(hours=3),
        lease_deadline=NOW - delta,
        requests_in_idle_window=observed.pop("requests", 5),
        **observed,
    )


def test_running_requests_keep_a_lease_expired_profile_and_it_stops_once_they_finished():
    p = profile()
    busy = at_lease_end(p, timedelta(hours=2), load=BUSY)
    assert (busy.stop, busy.reason, busy.active_requests) == (False, "requests-running", 3)
    assert "deferred: 3 request(s)" in busy.detail
    assert at_lease_end(p, timedelta(0), load={"running": 0, "waiting": 1}).reason == "requests-running"  # queued counts
    done = at_lease_end(p, timedelta(hours=2), load=QUIET)
    assert (done.stop, done.reason) == (True, "lease-expired")
    # Gauges unreadable: the lease decides as before.
    assert at_lease_end(p, timedelta(seconds=1), load=None).stop is True


def test_lease_end_at_the_limit_and_one_second_before():
    p = profile()
    assert at_lease_end(p, timedelta(0), load=QUIET).stop is True
    assert at_lease_end(p, timedelta(seconds=-1), load=QUIET).stop is False


def test_idle_needs_both_no_request_count_and_no_running_request():
    p = profile(idle={"enabled": True, "window_minutes": 30})
    long_stream = run(p, requests=0, ready_for=timedelta(hours=2))
    assert long_stream.stop is True  # what RequestCount alone would do
    kept = decide(
        "p",
        p,
        now=NOW,
        ready_since=NOW - timedelta(hours=2),
        lease_deadline=NOW + timedelta(hours=1),
        requests_in_idle_window=0,
        load={"running": 1, "waiting": 0},
    )
    assert (kept.stop, kept.reason) == (False, "requests-running")


def test_idle_window_at_the_limit_and_one_second_before_counts_from_the_last_request():
    p = profile(idle={"enabled": True, "window_minutes": 30})

    def idle(since_last):
        return decide(
            "p",
            p,
            now=NOW,
            ready_since=NOW - timedelta(hours=5),
            lease_deadline=NOW + timedelta(hours=1),
            requests_in_idle_window=4,
            last_request_at=NOW - since_last,
            load=QUIET,
        )

    assert (idle(timedelta(minutes=30)).stop, idle(timedelta(minutes=30)).reason) == (True, "idle")
    assert idle(timedelta(minutes=30) - timedelta(seconds=1)).stop is False
    # A keepalive restarts the window like a request.
    kept = decide(
        "p",
        p,
        now=NOW,
        ready_since=NOW - timedelta(hours=5),
        lease_deadline=NOW + timedelta(hours=1),
        requests_in_idle_window=0,
        kept_alive_at=NOW - timedelta(minutes=29),
        load=QUIET,
    )
    assert kept.stop is False and kept.next_stop.reason == "idle"


def test_max_runtime_is_hard_and_drains_running_requests_up_to_the_bound():
    p = profile(autostop={"max_runtime_minutes": 180, "drain_minutes": 10})

    def after_limit(delta, load):
        # READY since 180 min + delta ago; the lease still runs.
        return decide(
            "p",
            p,
            now=NOW,
            ready_since=NOW - timedelta(minutes=180) - delta,
            lease_deadline=NOW + timedelta(hours=9),
            requests_in_idle_window=7,
            load=load,
        )

    assert after_limit(timedelta(seconds=-1), QUIET).stop is False
    assert (after_limit(timedelta(0), QUIET).stop, after_limit(timedelta(0), QUIET).reason) == (True, "max-runtime")
    draining = after_limit(timedelta(minutes=10) - timedelta(seconds=1), BUSY)
    assert (draining.stop, draining.reason, draining.stopping_soon) == (False, "draining", True)
    cut = after_limit(timedelta(minutes=10), BUSY)
    assert (cut.stop, cut.reason) == (True, "max-runtime") and "3 request(s) cut" in cut.detail
    immediate = profile(autostop={"max_runtime_minutes": 180, "drain_minutes": 0})
    assert (
        decide(
            "p",
            immediate,
            now=NOW,
            ready_since=NOW - timedelta(minutes=180),
            lease_deadline=None,
            requests_in_idle_window=7,
            load=BUSY,
        ).stop
        is True
    )


def test_budget_is_a_hard_limit_at_the_session_cost():
    p = profile(autostop={"max_session_usd": 24.0, "drain_minutes": 0})  # 2 h at 12 USD/h

    def cost(session_for):
        return decide(
            "p",
            p,
            now=NOW,
            ready_since=NOW - timedelta(minutes=90),
            lease_deadline=NOW + timedelta(hours=5),
            requests_in_idle_window=3,
            session_started_at=NOW - session_for,
            hourly_usd=12.0,
            load=BUSY,
        )

    assert (cost(timedelta(hours=2)).stop, cost(timedelta(hours=2)).reason) == (True, "budget")
    assert cost(timedelta(hours=2) - timedelta(seconds=1)).stop is False
    no_price = decide(
        "p",
        p,
        now=NOW,
        ready_since=NOW - timedelta(hours=9),
        lease_deadline=NOW + timedelta(hours=5),
        requests_in_idle_window=3,
        session_started_at=NOW - timedelta(hours=9),
        hourly_usd=None,
    )
    assert no_price.stop is False  # without a price the budget cannot be judged: said nowhere as a stop


def test_a_budget_with_replicas_counts_every_instance_spent_and_running():
    p = profile(autostop={"max_session_usd": 24.0, "drain_minutes": 0})

    def with_replicas(spent: float, running: int):
        return decide(
            "p",
            p,
            now=NOW,
            ready_since=NOW - timedelta(minutes=30),
            lease_deadline=NOW + timedelta(hours=5),
            requests_in_idle_window=3,
            session_started_at=NOW - timedelta(minutes=30),  # one instance alone would have 1.5 h left
            hourly_usd=12.0,
            spent_usd=spent,
            running_instances=running,
            load=BUSY,
        )

    # 3 replicas for 30 min: 18 USD spent, 6 USD left at 36 USD/h: 10 minutes
    kept = with_replicas(18.0, 3)
    assert kept.stop is False and kept.next_stop is not None and kept.next_stop.reason == "budget"
    assert kept.next_stop.at == NOW + timedelta(minutes=10)
    assert "18.00 USD spent, 3 instance(s) at 12 USD/h each" in kept.next_stop.detail
    assert (with_replicas(24.0, 3).stop, with_replicas(24.0, 3).reason) == (True, "budget")  # at the limit
    assert with_replicas(24.01, 3).stop is True  # one past it
    assert with_replicas(23.99, 3).stop is False
    assert with_replicas(18.0, 0).next_stop.at == NOW + timedelta(minutes=30)  # scaled in: burns as one


def test_schedule_end_waits_for_requests_unless_enforced():
    evening = datetime(2026, 12, 2, 10, 5, tzinfo=UTC)  # 19:05 JST, 5 minutes after the period
    soft = decide(
        "p",
        profile(schedule=OFFICE_TOKYO),
        now=evening,
        ready_since=evening - timedelta(hours=3),
        lease_deadline=evening + timedelta(hours=1),
        requests_in_idle_window=9,
        load=BUSY,
    )
    assert (soft.stop, soft.reason) == (False, "requests-running")
    enforced = profile(schedule=OFFICE_TOKYO | {"enforced": True}, autostop={"drain_minutes": 5})

    def hard(now):
        return decide(
            "p",
            enforced,
            now=now,
            ready_since=now - timedelta(hours=3),
            lease_deadline=now + timedelta(hours=1),
            requests_in_idle_window=9,
            load=BUSY,
        )

    assert hard(evening - timedelta(seconds=1)).reason == "draining"  # 19:04:59: inside the 5-minute drain
    assert (hard(evening).stop, hard(evening).reason) == (True, "outside-schedule")  # 19:05: drain over


def test_keepalive_defers_a_schedule_end_that_is_not_enforced():
    before_end = datetime(2026, 12, 2, 9, 55, tzinfo=UTC)  # 18:55 JST
    p = profile(schedule=OFFICE_TOKYO, idle={"enabled": False})
    d = decide(
        "p",
        p,
        now=before_end,
        ready_since=before_end - timedelta(hours=3),
        lease_deadline=before_end + timedelta(hours=1),
        requests_in_idle_window=2,
        kept_alive_at=before_end,
    )
    assert d.next_stop.at == before_end + timedelta(hours=1) and d.stopping_soon is False
    # Without the keepalive the period's end at 19:00 is 5 minutes away: stopping soon.
    plain = decide(
        "p",
        p,
        now=before_end,
        ready_since=before_end - timedelta(hours=3),
        lease_deadline=before_end + timedelta(hours=1),
        requests_in_idle_window=2,
    )
    assert plain.stopping_soon and plain.next_stop.reason == "outside-schedule"


def test_a_benchmark_hold_keeps_it_past_soft_limits_but_not_hard_ones():
    p = profile(autostop={"max_runtime_minutes": 600, "drain_minutes": 0})
    held = at_lease_end(p, timedelta(hours=1), load=QUIET, held_by="run-1", held_until=NOW + timedelta(seconds=1))
    assert (held.stop, held.reason) == (False, "held") and "run-1" in held.detail
    lapsed = at_lease_end(p, timedelta(hours=1), load=QUIET, held_by="run-1", held_until=NOW)
    assert (lapsed.stop, lapsed.reason) == (True, "lease-expired")
    over = decide(
        "p",
        p,
        now=NOW,
        ready_since=NOW - timedelta(minutes=600),
        lease_deadline=NOW + timedelta(hours=1),
        requests_in_idle_window=3,
        held_by="run-1",
        held_until=NOW + timedelta(hours=1),
    )
    assert (over.stop, over.reason) == (True, "max-runtime")


def test_stopping_soon_at_the_warning_limit_and_one_second_before_it():
    p = profile(autostop={"warning_minutes": 15})
    at_limit = at_lease_end(p, -timedelta(minutes=15), load=QUIET)
    assert (at_limit.stop, at_limit.stopping_soon) == (False, True)
    assert at_limit.next_stop.reason == "lease-expired" and at_limit.next_stop.at == NOW + timedelta(minutes=15)
    assert "stopping soon" in at_limit.detail
    assert at_lease_end(p, -timedelta(minutes=15, seconds=1), load=QUIET).stopping_soon is False
    # A schedule end inside the warning time warns too, at the minute it ends.
    before_end = datetime(2026, 12, 2, 9, 50, tzinfo=UTC)  # 18:50 JST
    d = decide(
        "p",
        profile(schedule=OFFICE_TOKYO),
        now=before_end,
        ready_since=before_end - timedelta(hours=3),
        lease_deadline=before_end + timedelta(hours=2),
        requests_in_idle_window=2,
    )
    assert (
        d.stopping_soon
        and d.next_stop.reason == "outside-schedule"
        and d.next_stop.at == datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    )


def test_new_registry_fields_are_validated_with_the_field_named():
    from servingctl.registry import RegistryError

    for bad, field in (
        ({"warning_minutes": 0}, "warning_minutes"),
        ({"drain_minutes": 121}, "drain_minutes"),
        ({"max_session_usd": 0}, "max_session_usd"),
        ({"max_runtime_minutes": 60}, "max_runtime_minutes"),
    ):
        with pytest.raises((RegistryError, ValueError), match=field):
            profile(autostop=bad)


def test_idle_since_ready_at_the_window_and_one_second_before():
    p = profile(idle={"enabled": True, "window_minutes": 30})
    at = run(p, requests=0, ready_for=timedelta(minutes=30))
    assert (at.stop, at.reason) == (True, "idle")
    assert run(p, requests=0, ready_for=timedelta(minutes=30) - timedelta(seconds=1)).stop is False
