"""Schedule evaluation (Instance Scheduler's model): is a moment inside any running period?

Times are wall-clock times in the schedule's IANA zone, so a period keeps its local meaning across
DST changes. A period whose end is before its begin runs overnight (begin day's weekday applies).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from servingctl.registry.models import WEEKDAYS, Period, Schedule


def _clock(value: str) -> time:
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def _day_matches(period: Period, day: datetime) -> bool:
    if WEEKDAYS[day.weekday()] not in period.weekdays:
        return False
    return period.month_days is None or day.day in period.month_days


def in_period(period: Period, local: datetime) -> bool:
    """True when the local wall-clock moment falls inside the period (end time exclusive)."""
    begin = _clock(period.begin_time) if period.begin_time else time(0, 0)
    now = local.time().replace(tzinfo=None)
    if period.end_time is None:
        return now >= begin and _day_matches(period, local)
    end = _clock(period.end_time)
    if begin <= end:
        return begin <= now < end and _day_matches(period, local)
    if now >= begin:  # overnight period, evening part: today started it
        return _day_matches(period, local)
    if now < end:  # overnight period, morning part: yesterday started it
        return _day_matches(period, local - timedelta(days=1))
    return False


def should_run(schedule: Schedule, moment: datetime) -> bool:
    """True when the schedule wants the profile running at moment (an aware datetime)."""
    if schedule.override == "running":
        return True
    if schedule.override == "stopped":
        return False
    local = moment.astimezone(ZoneInfo(schedule.timezone))
    return any(in_period(p, local) for p in schedule.periods)
