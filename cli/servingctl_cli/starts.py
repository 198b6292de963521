"""`servingctl starts NAME`: a profile's latest starts with per-phase durations, p50/p90 and a chart
(PNG), and the timeline lines `start --wait` and `status` show while a start runs.

Exit codes: 0 shown, 1 the API refused (the reason is printed), 2 bad usage, 3 no API.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from servingctl import render
from servingctl_cli.client import EXIT_OK, Client, add_api_arguments, answer_as, api_command
from servingctl_cli.main import summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from servingctl.api.models import StartHistory, StartTimeline, TimelinePhase

CHART = "starts-{profile}.png"
# Phases under this share of all starts' time are drawn grey as "other" (a chart of 19 slivers reads badly).
CHART_MIN_SHARE = 0.02


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add starts."""
    starts = subparsers.add_parser("starts", help=summary("starts"))
    starts.add_argument("name", help="profile name from the registry")
    starts.add_argument("--limit", type=int, default=20, metavar="N", help="the latest N starts (1..100, default 20)")
    starts.add_argument("--chart", metavar="PNG", help=f"where the chart goes (default {CHART.format(profile='NAME')})")
    add_api_arguments(starts)
    starts.set_defaults(func=api_command(_starts))


def _starts(args: argparse.Namespace, client: Client) -> int:
    from servingctl.api.models import StartHistory

    path = f"/profiles/{args.name}/starts"
    answer = client.get(path, {"limit": args.limit})
    history = answer_as(StartHistory, answer, f"GET {path}")
    if args.json:
        print(json.dumps(answer))  # the API's answer as it came
        return EXIT_OK
    if not history.starts:
        print(f"{args.name}: no start recorded yet")
        return EXIT_OK
    print(history_text(history))
    chart = Path(args.chart or CHART.format(profile=args.name))
    chart.parent.mkdir(parents=True, exist_ok=True)
    chart_figure(history).savefig(chart, dpi=100)
    print(f"chart: {chart}")
    return EXIT_OK


def history_text(history: StartHistory) -> str:
    """The starts (outcome, total, slowest phase; a failed one's error under it) and each phase's
    p50, p90 and latest duration."""
    starts = history.starts
    ready = sum(s.outcome == "READY" for s in starts)
    rows = []
    for start in starts:
        phases = start.phases
        slowest = max(phases, key=lambda p: p.seconds, default=None)
        total = phases[-1].since_request_s if phases else 0.0
        rows.append(
            (
                render.when(start.requested_at, short=True),
                start.outcome,
                f"{total:.1f}",
                f"{slowest.label} {slowest.seconds:.1f} s" if slowest else "-",
            )
        )
    errors = [f"error: {s.error}" if s.error else None for s in starts]
    table = render.columns_with_notes(("requested UTC", "outcome", "total s", "slowest phase"), rows, errors, right=(2,))
    last = {p.mark: p.seconds for p in starts[-1].phases}
    order = [p.mark for s in starts for p in s.phases]
    marks = sorted(set(order), key=order.index)
    phase_rows = [
        (_seconds(history.p50_s.get(m)), _seconds(history.p90_s.get(m)), _seconds(last.get(m)), history.labels.get(m, m))
        for m in marks
    ]
    per_phase = render.table(("p50 s", "p90 s", "last s", "phase (ends at its mark)"), phase_rows, right=(0, 1, 2))
    title = render.note(f"{history.profile}: {len(starts)} start(s), {ready} READY (p50/p90 over the READY ones)")
    return f"{title}\n{table}\n\n{per_phase}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def chart_figure(history: StartHistory) -> Figure:
    """One horizontal bar per start, its phases stacked in order (the small ones grey, as "other")."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    starts = history.starts
    total: dict[str, float] = defaultdict(float)
    for start in starts:
        for phase in start.phases:
            total[phase.mark] += phase.seconds
    whole = sum(total.values()) or 1.0
    big = [m for m in total if total[m] / whole >= CHART_MIN_SHARE]
    fig = Figure(figsize=(9.0, 1.6 + 0.45 * len(starts)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colours = {m: f"C{i % 10}" for i, m in enumerate(big)}
    for y, start in enumerate(starts):
        left = 0.0
        for phase in start.phases:
            mark = phase.mark if phase.mark in colours else "other"
            ax.barh(
                y,
                phase.seconds,
                left=left,
                color=colours.get(mark, "lightgrey"),
                edgecolor="white",
                linewidth=0.5,
                label=history.labels.get(mark, mark),
            )
            left += phase.seconds
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_yticks(range(len(starts)), [f"{render.when(s.requested_at, short=True)} {s.outcome}" for s in starts])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the start was requested")
    ax.set_title(f"Starts of {history.profile}: time per phase")
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def phase_line(phase: TimelinePhase, since: datetime) -> tuple[float, str]:
    """One completed phase as (seconds after since, line): when, what, how long, what past starts took."""
    offset = (phase.at - since).total_seconds()
    past = f" (p50 {phase.p50_s:.1f} s)" if phase.p50_s is not None else ""
    return offset, f"[{offset:8.1f} s]   {phase.label} {phase.seconds:.1f} s{past}"


def eta_text(start: StartTimeline, now: datetime) -> str | None:
    """What a running start waits for and when past starts say it and READY come; None without history."""
    if start.outcome != "STARTING" or not start.waiting_for:
        return None
    text = f"now: {start.waiting_for}"
    if start.waiting_expected_at:
        due = (start.waiting_expected_at - now).total_seconds()
        text += f" (ends in ~{max(0.0, due):.0f} s)" if due > 0 else " (later than past starts)"
    if start.expected_ready_at:
        left = (start.expected_ready_at - now).total_seconds()
        text += f"; READY in ~{max(0.0, left):.0f} s (p50 of {start.past_starts} past starts)"
    return text
