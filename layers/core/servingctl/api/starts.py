"""The start timelines the API shows: one start with what it waits for (GET /profiles/{name}'s
`start`) and the profile's latest starts with per-phase p50/p90 (GET /profiles/{name}/starts)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from servingctl.api.models import StartHistory, StartTimeline, TimelinePhase
from servingctl.control.timeline import (
    HISTORY_STARTS,
    LABELS,
    expected_ready,
    next_mark,
    overheads,
    percentile,
    phase_history,
    spans,
)
from servingctl.store.base import Store
from servingctl.store.models import StartRecord


def _stats(history: Sequence[StartRecord], q: float) -> dict[str, float]:
    return {name: round(percentile(values, q), 3) for name, values in phase_history(history).items()}


def start_timeline(record: StartRecord, history: Sequence[StartRecord], now: datetime) -> StartTimeline:
    """A start's phases with the p50/p90 of past starts, and (while STARTING) the phase in progress
    and when past starts say it and READY end."""
    p50, p90, overhead = _stats(history, 50), _stats(history, 90), overheads(record)
    marks = {m.name: m for m in record.marks}
    phases = [
        TimelinePhase(
            mark=name,
            label=LABELS.get(name, name),
            at=marks[name].at,
            seconds=round(seconds, 3),
            since_request_s=round(since, 3),
            source=marks[name].source,
            overhead_s=round(overhead[name], 3) if name in overhead else None,
            p50_s=p50.get(name),
            p90_s=p90.get(name),
        )
        for name, seconds, since in spans(record)
    ]
    timeline = StartTimeline(
        start_id=record.start_id,
        execution=record.execution,
        outcome=record.outcome,
        requested_at=record.requested_at,
        ended_at=record.ended_at,
        error=record.error,
        phases=phases,
        past_starts=sum(past.outcome == "READY" for past in history),
    )
    if record.outcome == "STARTING":
        waiting = next_mark(record, history)
        if waiting is not None:
            timeline.waiting_for, timeline.waiting_expected_at = LABELS[waiting[0]], waiting[1]
        timeline.expected_ready_at = expected_ready(record, history, now)
    return timeline


def latest_start(store: Store, profile: str, now: datetime) -> StartTimeline | None:
    """The profile's latest start, with the starts before it as its history; None before any start."""
    records = store.list_starts(profile, limit=HISTORY_STARTS + 1)
    return start_timeline(records[-1], records[:-1], now) if records else None


def start_history(store: Store, profile: str, limit: int, now: datetime) -> StartHistory:
    """The latest `limit` starts, each measured against the ones before it, and the p50/p90 of all."""
    records = store.list_starts(profile, limit=limit + HISTORY_STARTS)
    shown = records[-limit:]
    first = len(records) - len(shown)
    return StartHistory(
        profile=profile,
        starts=[start_timeline(r, records[max(0, first + i - HISTORY_STARTS) : first + i], now) for i, r in enumerate(shown)],
        p50_s=_stats(shown, 50),
        p90_s=_stats(shown, 90),
        labels={name: LABELS.get(name, name) for r in shown for name, _, _ in spans(r)},
    )
