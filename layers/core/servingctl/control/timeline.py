"""A start's timeline: the marks a start passes, vLLM's own phases read from its log lines, the
span each phase took, and what past starts say the next mark will take (p50/p90).

Pure: the marks come from servingctl.control.timeline_sources (AWS) and the steps (the controller's
own observations); this module only orders, names and measures them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from servingctl.store.models import Mark, StartRecord, iso

# Every mark a start can pass, in the order a start passes them, with the phase that ends there.
PHASES: tuple[tuple[str, str], ...] = (
    ("requested", "start requested"),
    ("instance_launched", "EC2 launch"),
    ("hook_wait_started", "to the launch lifecycle hook"),
    ("hook_wait_ended", "launch lifecycle hook wait (the warm pool's prepare step)"),
    ("instance_registered", "instance boot and ECS registration"),
    ("task_created", "task placement"),
    ("pull_started", "task provisioning"),
    ("pull_stopped", "image pull"),
    ("prefetch_started", "prefetch container start"),
    ("prefetch_finished", "weights prefetch"),
    ("task_started", "container start"),
    ("vllm_load_started", "vLLM process start"),
    ("vllm_model_initialized", "model init"),
    ("vllm_weights_loaded", "weight loading"),
    ("vllm_model_loaded", "model load (weights on the device)"),
    ("vllm_compiled", "torch.compile"),
    ("vllm_graphs_captured", "CUDA graph capture"),
    ("vllm_engine_ready", "engine ready (KV cache, warmup)"),
    ("vllm_api_ready", "API server up"),
    ("target_healthy", "ALB health checks"),
    ("first_token", "smoke test first token"),
    ("ready", "READY recorded"),
)
ORDER = {name: index for index, (name, _) in enumerate(PHASES)}
LABELS = dict(PHASES)
# Past starts the expectations and the derived deadlines look back on (older ones describe an older
# deployment less well), and how many READY ones it takes before history replaces the fixed guesses.
HISTORY_STARTS = 20
MIN_HISTORY = 3
# A derived wait: the p90 of past starts x FACTOR + MARGIN_S (a slow start is slower than any seen),
# bounded below by MIN_WAIT_S (AWS's own jitter) and above by the caller's limit.
FACTOR, MARGIN_S, MIN_WAIT_S = 1.5, 120, 60
# Each start wait loop's span: from the mark its wait begins at to the mark that ends it.
LOOP_SPANS = {
    "capacity_s": ("requested", "instance_registered"),
    "task_s": ("instance_registered", "task_started"),
    "health_s": ("task_started", "target_healthy"),
}
# ECS's health-check grace period runs from the task's start to a healthy target; Terraform's
# bounds for it (model_load_s) bound the derived one too.
GRACE_SPAN, GRACE_BOUNDS_S = ("task_started", "target_healthy"), (60, 7200)

# vLLM's log lines that end a phase; searched anywhere in a line (the prefix, the logger's time and
# file:line differ by version), first match wins, anything else is ignored. Versions 0.6 to 0.32
# print these words (v0 "Loading model weights took", v1 "Loading weights took"; torch.compile's
# total was "torch.compile takes X s in total", later per range "Compiling a graph ... takes").
# Streamed from S3 (--load-format runai_streamer) 0.32 prints no "took" line: its progress bar at
# 100 % ends the weights.
VLLM_LINES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm_load_started", re.compile(r"Starting to load model|Loading model from scratch")),
    ("vllm_model_initialized", re.compile(r"Initializing model took")),
    ("vllm_weights_loaded", re.compile(r"Loading (?:model )?weights took|Loading safetensors using Runai Model Streamer: 100%")),
    ("vllm_model_loaded", re.compile(r"Model loading took")),
    ("vllm_compiled", re.compile(r"torch\.compile takes? [0-9.]+ ?s in total|Compiling a graph for .* takes [0-9.]+ ?s")),
    ("vllm_graphs_captured", re.compile(r"Graph capturing finished in")),
    ("vllm_engine_ready", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("vllm_api_ready", re.compile(r"Application startup complete|Starting vLLM API server")),
)
VLLM_SOURCE = "logs:FilterLogEvents (vllm container)"


def vllm_marks(events: Iterable[tuple[datetime, str]]) -> list[Mark]:
    """The vLLM phases in a container's log events (time, line): the first line of each kind, at
    the time CloudWatch stamped it; unknown lines are ignored."""
    found: dict[str, Mark] = {}
    for at, line in events:
        for name, pattern in VLLM_LINES:
            # A later compile line (another range) moves the end of torch.compile, never the others.
            if pattern.search(line) and (name not in found or name == "vllm_compiled"):
                found[name] = Mark(name=name, at=at, source=VLLM_SOURCE)
                break
    return sorted(found.values(), key=lambda m: m.at)


# Auto Scaling's lifecycle states of an instance its launch hook holds: preparing in the warm pool
# (Warmed:Pending:Wait), or leaving it or newly launched into the group (Pending:Wait).
HOOK_WAIT_STATES = frozenset({"Warmed:Pending:Wait", "Pending:Wait"})
HOOK_WAIT_SOURCE = "autoscaling:DescribeAutoScalingGroups/DescribeWarmPool LifecycleState, first seen at a poll"


def note_hook_waits(waits: dict[str, list[str | None]], lifecycles: Iterable[tuple[str, str]], now: datetime) -> None:
    """Keep, per instance id, when a poll first saw its launch hook hold it and first saw it past the
    hook (ISO, None until then); lifecycles are (instance id, lifecycle state) of this poll."""
    for instance_id, lifecycle in lifecycles:
        if lifecycle in HOOK_WAIT_STATES:
            waits.setdefault(instance_id, [iso(now), None])
        elif instance_id in waits and waits[instance_id][1] is None:
            waits[instance_id][1] = iso(now)


def hook_wait_marks(waits: dict[str, list[str | None]], instance_ids: Iterable[str]) -> list[Mark]:
    """The start's hook wait as two marks: the first of its instances seen held, and (once every one
    held is past it) the last seen past; none when no instance of the start waited on its hook."""
    held = [waits[i] for i in instance_ids if i in waits]
    if not held:
        return []
    began = min(datetime.fromisoformat(str(start)) for start, _ in held)
    marks = [Mark(name="hook_wait_started", at=began, source=HOOK_WAIT_SOURCE)]
    if all(end is not None for _, end in held):
        ended = max(datetime.fromisoformat(str(end)) for _, end in held)
        marks.append(Mark(name="hook_wait_ended", at=ended, source=HOOK_WAIT_SOURCE))
    return marks


def merge(record: StartRecord, marks: Iterable[Mark], seen_at: datetime) -> bool:
    """Add the marks the record lacks (stamped seen_at) or whose time moved; True when it changed."""
    changed = False
    for mark in marks:
        old = record.mark(mark.name)
        if old is not None and old.at == mark.at:
            continue
        new = mark.model_copy(update={"seen_at": old.seen_at if old and old.seen_at else seen_at})
        record.marks = [m for m in record.marks if m.name != mark.name] + [new]
        changed = True
    if changed:
        record.marks.sort(key=lambda m: (m.at, ORDER.get(m.name, len(ORDER))))
    return changed


def spans(record: StartRecord) -> list[tuple[str, float, float]]:
    """(mark, seconds of the phase that ends there, seconds since requested) for every mark reached,
    in time order; a phase starts at the previous mark reached."""
    rows: list[tuple[str, float, float]] = []
    previous = record.requested_at
    for mark in record.marks:
        if mark.name == "requested":
            continue
        rows.append((mark.name, max(0.0, (mark.at - previous).total_seconds()), (mark.at - record.requested_at).total_seconds()))
        previous = max(previous, mark.at)
    return rows


def overheads(record: StartRecord) -> dict[str, float]:
    """Mark -> seconds from the mark in the world to the controller recording it."""
    return {m.name: max(0.0, (m.seen_at - m.at).total_seconds()) for m in record.marks if m.seen_at is not None}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; ValueError on no values."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def history_offsets(history: Sequence[StartRecord]) -> dict[str, list[float]]:
    """Mark -> seconds after the request at which each past READY start reached it."""
    offsets: dict[str, list[float]] = {}
    for past in history:
        if past.outcome != "READY":
            continue
        for mark in past.marks:
            offsets.setdefault(mark.name, []).append((mark.at - past.requested_at).total_seconds())
    return offsets


def phase_history(history: Sequence[StartRecord]) -> dict[str, list[float]]:
    """Mark -> the seconds its phase took in each past READY start."""
    durations: dict[str, list[float]] = {}
    for past in history:
        if past.outcome == "READY":
            for name, seconds, _ in spans(past):
                durations.setdefault(name, []).append(seconds)
    return durations


def next_mark(record: StartRecord, history: Sequence[StartRecord]) -> tuple[str, datetime | None] | None:
    """The mark this start waits for (the first after the latest reached that past starts reached,
    or the next in order without history) and when past starts (p50) reached it; None when READY."""
    if record.mark("ready") is not None:
        return None
    reached = [ORDER[m.name] for m in record.marks if m.name in ORDER]
    last = max(reached, default=0)
    offsets = history_offsets(history)
    later = [name for name, _ in PHASES[last + 1 :]]
    seen = [name for name in later if name in offsets]
    if not seen:
        return (later[0], None) if later else None
    name = seen[0]
    return name, record.requested_at + timedelta(seconds=percentile(offsets[name], 50))


def expected_ready(record: StartRecord, history: Sequence[StartRecord], now: datetime) -> datetime | None:
    """When past starts (p50 from the request) say READY comes, never before now; None without history."""
    offsets = history_offsets(history).get("ready")
    if not offsets:
        return None
    return max(now, record.requested_at + timedelta(seconds=percentile(offsets, 50)))


def span_seconds(record: StartRecord, begin: str, end: str) -> float | None:
    """Seconds from mark begin to mark end of one start, None when it lacks either."""
    first, last = record.mark(begin), record.mark(end)
    return None if first is None or last is None else max(0.0, (last.at - first.at).total_seconds())


def derived_wait(history: Sequence[StartRecord], span: tuple[str, str], lower: int, upper: int) -> int | None:
    """p90 of the span over past READY starts x FACTOR + MARGIN_S, within lower..upper; None with
    fewer than MIN_HISTORY starts that passed both marks (the caller keeps its fixed guess)."""
    values = [v for r in history if r.outcome == "READY" and (v := span_seconds(r, *span)) is not None]
    if len(values) < MIN_HISTORY:
        return None
    return min(upper, max(lower, math.ceil(percentile(values, 90) * FACTOR + MARGIN_S)))
