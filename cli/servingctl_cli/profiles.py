"""`servingctl start | stop | status | keepalive | wait`: profiles through the REST API (cli.client).

--wait follows the execution (GET /executions/{id}) and shows each phase as it passes with the
elapsed time: a rich live view on a terminal, one plain line per phase otherwise. A start also
shows its timeline (GET /profiles/{name}'s `start`): each phase as it completes, and what it waits
for now with the ETA past starts give. Ctrl-C leaves
the execution running and says so in one line: where it runs, what it costs, how to re-attach
(`servingctl wait ID`) and how to stop it. Exit codes: 0 done, 1 the flow failed or the API
refused (the reason is printed), 2 bad usage, 3 no API, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from servingctl import render
from servingctl_cli.client import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    MISMATCH_STATUS,
    ApiError,
    Client,
    add_api_arguments,
    answer_as,
    answers_as,
    api_command,
)
from servingctl_cli.completion import remember_profiles
from servingctl_cli.interrupt import interrupted, unanswered
from servingctl_cli.main import summary
from servingctl_cli.starts import eta_text, phase_line

if TYPE_CHECKING:
    from rich.console import RenderableType

    # The API's models load with the command that reads them: `--help` stays fast.
    from servingctl.api.models import ExecutionProgress, PhaseMark, ProfileDetail, ProfileSummary, StartTimeline

FOLLOW_INTERVAL_S = 1.0
DEFAULT_NAME = "profile name from the registry (default: $SERVINGCTL_PROFILE, else the config file's profile)"
WATCH_S = (1, 3600)  # --watch's bounds in seconds: at most one request a second, at least one an hour


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add start, stop, status, keepalive and wait."""
    start = subparsers.add_parser("start", help=summary("start"))
    start.add_argument("name", nargs="?", help=DEFAULT_NAME)
    start.set_defaults(default_profile=True)
    start.add_argument("--wait", action="store_true", help="follow the phases until READY or failure")
    start.add_argument("--allow-shared-pool", action="store_true", help="start even when another profile holds the pool")
    start.add_argument(
        "--lease",
        type=_whole,
        metavar="MINUTES",
        help="minutes before auto-shutdown may stop it (bounded by the profile's max_lease_minutes)",
    )
    _poll_argument(start)
    add_api_arguments(start)
    start.set_defaults(func=api_command(_start))

    stop = subparsers.add_parser("stop", help=summary("stop"))
    stop.add_argument("name", nargs="?", help=DEFAULT_NAME)
    stop.set_defaults(default_profile=True)
    stop.add_argument("--wait", action="store_true", help="follow the phases until STOPPED or failure")
    stop.add_argument(
        "--no-wake",
        action="store_true",
        help="a wake-on-request profile stays stopped: requests do not wake it until the next start",
    )
    _poll_argument(stop)
    add_api_arguments(stop)
    stop.set_defaults(func=api_command(_stop))

    status = subparsers.add_parser("status", help=summary("status"))
    status.add_argument("name", nargs="?", help="profile name (all profiles when absent)")
    status.add_argument(
        "--watch",
        nargs="?",
        const=2,
        type=_watch_seconds,
        metavar="SECONDS",
        help=f"print it again every SECONDS ({WATCH_S[0]} to {WATCH_S[1]}, default 2) until Ctrl-C",
    )
    add_api_arguments(status)
    status.set_defaults(func=api_command(_status))

    keepalive = subparsers.add_parser("keepalive", help=summary("keepalive"))
    keepalive.add_argument("name", nargs="?", help=DEFAULT_NAME)
    keepalive.set_defaults(default_profile=True)
    keepalive.add_argument("--minutes", type=_whole, help="lease from now (default: the profile's default lease)")
    add_api_arguments(keepalive)
    keepalive.set_defaults(func=api_command(_keepalive))

    wait = subparsers.add_parser("wait", help=summary("wait"))
    wait.add_argument(
        "execution",
        metavar="EXECUTION",
        help="what start, stop or bench --profile printed: an execution name (start-... / stop-...), its ARN, or a run id",
    )
    wait.add_argument("--output", metavar="DIR", help="a benchmark run's files go here (default servingctl-runs/RUN_ID)")
    add_api_arguments(wait)
    wait.set_defaults(func=api_command(_wait))


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _watch_seconds(text: str) -> int:
    seconds = _whole(text)
    if not WATCH_S[0] <= seconds <= WATCH_S[1]:
        raise argparse.ArgumentTypeError(f"{seconds} must be from {WATCH_S[0]} to {WATCH_S[1]} seconds")
    return seconds


def _poll_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--poll-interval",
        type=_whole,
        metavar="SECONDS",
        help="seconds between the flow's checks (default 15; the local twin suggests its own)",
    )


def _usage(args: argparse.Namespace, message: str) -> int:
    """A bad flag, named as typed (exit 2, like argparse's own errors)."""
    print(f"servingctl {args.command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _checked(body: dict[str, Any], model: Any, flags: dict[str, str], unit: dict[str, str]) -> str | None:
    """The request checked with the API's own model before it is sent: the flags' error, or None."""
    from pydantic import ValidationError

    from servingctl.wording import problems

    try:
        model.model_validate(body)
    except ValidationError as exc:
        return "; ".join(
            f"{flags.get(field.split('.')[0], field)} {text}{_unit(text, unit.get(field, ''))}; got {err.get('input')}"
            for (field, text), err in zip(problems(exc.errors()), exc.errors(), strict=False)
        )
    return None


def _unit(text: str, unit: str) -> str:
    """The unit after a bound, singular after 1 ("at least 1 minute")."""
    return unit.removesuffix("s") if text.endswith(" 1") else unit


def _poll(args: argparse.Namespace, client: Client) -> dict[str, Any] | None:
    """Wait-loop pacing for the execution: --poll-interval, else the twin's suggestion, else the API's default."""
    if args.poll_interval:
        return {
            "interval_s": args.poll_interval,
            "max_interval_s": max(args.poll_interval, 4 * args.poll_interval),
            "backoff": 1.5,
        }
    return client.poll


START_FLAGS = {"lease_minutes": "--lease", "poll": "--poll-interval", "allow_shared_pool": "--allow-shared-pool"}


def _start(args: argparse.Namespace, client: Client) -> int:
    from servingctl.api.models import StartRequest

    body: dict[str, Any] = {"allow_shared_pool": args.allow_shared_pool}
    if args.lease is not None:
        body["lease_minutes"] = args.lease
    poll = _poll(args, client)
    if poll:
        body["poll"] = poll
    problem = _checked(body, StartRequest, START_FLAGS, {"lease_minutes": " minutes"})
    if problem:
        return _usage(args, problem)
    return _submit(args, client, "start", body)


def _stop(args: argparse.Namespace, client: Client) -> int:
    from servingctl.api.models import StopRequest

    poll = _poll(args, client)
    body: dict[str, Any] = {"poll": poll} if poll else {}
    if args.no_wake:
        body["no_wake"] = True
    problem = _checked(body, StopRequest, START_FLAGS, {})
    if problem:
        return _usage(args, problem)
    return _submit(args, client, "stop", body)


def _submit(args: argparse.Namespace, client: Client, action: str, body: dict[str, Any]) -> int:
    """POST the start or stop, then answer, print the execution to follow, or follow it (--wait)."""
    from servingctl.api.models import ExecutionRef

    path = f"/profiles/{args.name}/{action}"
    try:
        answer = client.post(path, body, idempotent=True)
    except KeyboardInterrupt:
        return unanswered(f"the {action} of {args.name}", f"servingctl status {args.name}")
    ref = answer_as(ExecutionRef, answer, f"POST {path}")
    if ref.already:
        print(json.dumps(answer) if args.json else render.paragraph(ref.message or f"{ref.profile}: already {ref.phase}"))
        return EXIT_OK
    if ref.execution_id is None:
        raise ApiError(MISMATCH_STATUS, f"POST {path}: the API started an execution but named none")
    if not args.wait:
        if args.json:
            print(json.dumps(answer))
        else:
            how = "was already running: joined" if ref.joined else "submitted"
            print(
                f"{ref.profile}: {ref.action} {how} ({ref.execution_id})\n"
                f"  follow it: servingctl wait {ref.execution_id}   (or: servingctl status {ref.profile})"
            )
        return EXIT_OK
    return _follow_command(args, client, ref.execution_id, ref.profile, ref.action)


def _wait(args: argparse.Namespace, client: Client) -> int:
    if not args.execution.startswith(("start-", "stop-", "arn:")):  # a benchmark run
        from servingctl.api.benchmarks import BenchmarkDetail
        from servingctl_cli.runs import attach

        path = f"/benchmarks/{args.execution}"
        return attach(args, client, args.execution, answer_as(BenchmarkDetail, client.get(path), f"GET {path}").profile)
    progress = _progress(client, args.execution)
    return _follow_command(args, client, progress.execution_id, progress.profile or "", progress.action)


def _progress(client: Client, execution_id: str) -> ExecutionProgress:
    """GET /executions/{execution_id}, read through the API's model."""
    from servingctl.api.models import ExecutionProgress

    path = f"/executions/{execution_id}"
    return answer_as(ExecutionProgress, client.get(path), f"GET {path}")


def _follow_command(args: argparse.Namespace, client: Client, execution_id: str, profile: str, action: str) -> int:
    """Follow until the execution ends; Ctrl-C leaves it running and says how to come back."""
    try:
        final = follow(client, execution_id, plain=args.json or not sys.stdout.isatty(), quiet=args.json)
    except KeyboardInterrupt:
        return interrupted(client, action, execution_id, profile)
    if args.json:
        print(final.model_dump_json())
    return EXIT_OK if final.status == "SUCCEEDED" else EXIT_FAILED


def follow(
    client: Client, execution_id: str, *, plain: bool, quiet: bool = False, sleep: Callable[[float], None] = time.sleep
) -> ExecutionProgress:
    """Poll the execution until it ends, showing phases as they pass; returns the last progress."""
    if plain:
        shown, shown_marks, last_eta = 0, 0, None
        while True:
            progress = _progress(client, execution_id)
            phases = progress.phases
            start = _timeline(client, progress)
            # One time axis (since the execution started) for the flow's steps and the timeline's phases.
            lines = [_line(phase, progress.started_at) for phase in phases[shown:]]
            eta = None
            if start is not None:
                lines += [phase_line(p, progress.started_at) for p in start.phases[shown_marks:]]
                eta = eta_text(start, datetime.now(UTC))
                if not (start.phases[shown_marks:] or last_eta is None):
                    eta = None  # said again with each new phase only: the ETA moves with the phases
                last_eta = eta or last_eta
                shown_marks = len(start.phases)
            if not quiet:
                for _, line in sorted(lines, key=lambda pair: pair[0]):
                    print(line, flush=True)
                if eta:
                    print(render.note(eta, prefix=" " * 14), flush=True)
            shown = len(phases)
            if progress.status != "RUNNING":
                break
            sleep(FOLLOW_INTERVAL_S)
        if not quiet:
            print(render.paragraph(_summary(progress)), flush=True)
        return progress
    from rich.console import Console
    from rich.live import Live

    console = Console()
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            progress = _progress(client, execution_id)
            live.update(_view(progress, _timeline(client, progress)))
            if progress.status != "RUNNING":
                break
            sleep(FOLLOW_INTERVAL_S)
    console.print(_summary(progress), highlight=False)
    return progress


def _line(phase: PhaseMark, started: datetime) -> tuple[float, str]:
    """A flow step as (seconds since the execution started, line)."""
    offset = (phase.started_at - started).total_seconds()
    return offset, f"[{offset:8.1f} s] {phase.name}"


def _timeline(client: Client, progress: ExecutionProgress) -> StartTimeline | None:
    """The start timeline of this execution (a start's only, once it recorded one)."""
    from servingctl.api.models import ProfileDetail

    if progress.action != "start" or not progress.profile:
        return None
    path = f"/profiles/{progress.profile}"
    start = answer_as(ProfileDetail, client.get(path), f"GET {path}").start
    return start if start and start.execution == progress.execution_arn else None


def _view(progress: ExecutionProgress, start: StartTimeline | None = None) -> RenderableType:
    """The live view: a title line, the phases (a start's timeline once it has one, with the ETA),
    and the last check's detail at the terminal's width."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, box=None, padding=(0, 2))
    parts: list[RenderableType] = [
        Text(
            f"{progress.action} {progress.profile}  {progress.status}  {progress.elapsed_s:.1f} s  ({progress.execution_id})",
            style="bold",
        ),
        table,
    ]
    if start is not None and start.phases:
        table.add_column("phase")
        table.add_column("took", justify="right")
        table.add_column("at", justify="right")
        table.add_column("p50", justify="right")
        for phase in start.phases:
            p50 = "-" if phase.p50_s is None else f"{phase.p50_s:.1f} s"
            at = (phase.at - progress.started_at).total_seconds()
            table.add_row("  " + phase.label, f"{phase.seconds:.1f} s", f"{at:.1f} s", p50)
        eta = eta_text(start, datetime.now(UTC))
        if eta and progress.status == "RUNNING":
            parts.append(Text("> " + eta, overflow="fold"))
    else:
        table.add_column("phase")
        table.add_column("elapsed", justify="right")
        phases = progress.phases
        for i, mark in enumerate(phases):
            running = progress.status == "RUNNING" and i == len(phases) - 1
            table.add_row(("> " if running else "  ") + mark.name, f"{mark.elapsed_s:.1f} s")
    if progress.detail:
        parts.append(Text(progress.detail, style="dim", overflow="fold"))
    return Group(*parts)


def _summary(progress: ExecutionProgress) -> str:
    spans = ", ".join(f"{p.name} {p.elapsed_s:.1f} s" for p in progress.phases if p.name not in ("ready", "stopped"))
    if progress.status == "SUCCEEDED":
        done = "READY" if progress.action == "start" else "STOPPED"
        return f"{progress.profile} {done} in {progress.elapsed_s:.1f} s ({spans})"
    reason = f"{progress.error or progress.status}: {progress.cause or 'no cause recorded'}"
    return f"{progress.profile} {progress.action} {progress.status} after {progress.elapsed_s:.1f} s: {reason}"


def _price(value: float | None) -> str:
    return "no price" if value is None else f"{value:.2f}"


def _status(args: argparse.Namespace, client: Client, sleep: Callable[[float], None] = time.sleep) -> int:
    if not args.watch:
        return _status_once(args, client)
    if args.output_format == "yaml":  # YAML is converted once the command ends, and a watch does not end
        return _usage(args, "--watch prints a table or JSON lines (--output table|json), not yaml")
    clear = sys.stdout.isatty() and not args.json  # a terminal is redrawn; a pipe or a log gets each in turn
    try:
        while True:
            if clear:
                print("\x1b[H\x1b[2J", end="")
            elif not args.json:
                print(f"--- {render.when(datetime.now(UTC))}")
            _status_once(args, client)
            if clear:
                print(f"\nevery {args.watch} s; Ctrl-C to stop")
            sys.stdout.flush()
            sleep(args.watch)
    except KeyboardInterrupt:  # how a watch ends: nothing runs on because of it
        return EXIT_OK


def _status_once(args: argparse.Namespace, client: Client) -> int:
    from servingctl.api.models import ProfileDetail, ProfileSummary

    if args.name is None:
        answer = client.get("/profiles")
        profiles = answers_as(ProfileSummary, answer, "GET /profiles")
        remember_profiles([p.name for p in profiles])  # what `servingctl completion` offers
        if args.json:
            print(json.dumps(answer))
        elif not profiles:
            print("no profiles in the registry")
        else:
            rows = [
                (
                    p.name,
                    p.phase.value + sleep_note(p),
                    p.instance_type,
                    _price(p.hourly_usd),
                    render.when(p.lease_deadline, short=True),
                )
                for p in profiles
            ]
            notes = [
                "; ".join(
                    n
                    for n in (
                        p.retired and f"not in the registry: {p.retired} (stopping it)",
                        p.last_error and f"last error: {p.last_error}",
                    )
                    if n
                )
                or None
                for p in profiles
            ]
            print(render.columns_with_notes(("profile", "phase", "type", "USD/h", "lease until UTC"), rows, notes, right=(3,)))
        return EXIT_OK
    path = f"/profiles/{args.name}"
    answer = client.get(path)
    detail = answer_as(ProfileDetail, answer, f"GET {path}")
    if args.json:
        print(json.dumps(answer))
        return EXIT_OK
    print(status_text(detail, local=client.local))
    return EXIT_OK


def sleep_note(profile: ProfileSummary | ProfileDetail) -> str:
    """How a stopped wake-on-request profile comes back: a request wakes it, or (stop --no-wake) only a start."""
    if not profile.wake_on_request or profile.phase.value not in ("STOPPED", "FAILED"):
        return ""
    return " (stopped with --no-wake: requests do not wake it)" if profile.no_wake else " (asleep, wakes on request)"


def _replicas(detail: ProfileDetail) -> str:
    """Replicas running and healthy against the profile's bounds."""
    health = list(detail.target_health.values())
    healthy = sum(state == "healthy" for state in health)
    bounds = detail.min_replicas, detail.max_replicas
    scaling = f"min {bounds[0]}, max {bounds[1]}" + ("" if bounds[1] > 1 else " (no auto scaling)")
    return f"{detail.running_count} running, {healthy} of {len(health)} targets healthy ({scaling})"


def status_text(detail: ProfileDetail, *, local: bool = False) -> str:
    """One profile's status: endpoint and how to reach it (local: the twin's model server, reachable
    from this machine), instances by id, phase, lease, cost so far."""
    phase = detail.phase.value + (" (stop requested)" if detail.stop_requested else "") + sleep_note(detail)
    if detail.phase.value == "READY" and detail.ready_at:
        phase += f" since {render.when(detail.ready_at)}"
    cost = "-"
    if detail.accrued_cost_usd is not None:
        minutes = (detail.uptime_s or 0.0) / 60
        cost = f"{detail.accrued_cost_usd:.2f} USD ({minutes:.1f} min at {render.per_hour(detail.hourly_usd)})"
    elif detail.uptime_s is not None:
        cost = f"unpriced ({detail.uptime_s / 60:.1f} min up; the instance is {render.per_hour(None)})"
    reach = (
        "(the twin's ALB, reachable here)"
        if local
        else f"(internal: from a host in the VPC; `servingctl bench --profile {detail.name}` measures it from there)"
    )
    rows = [
        ("phase", phase),
        *(
            [("registry", f"not in the registry: {detail.retired}; shown from the controller's copy until it is stopped")]
            if detail.retired
            else []
        ),
        ("endpoint", f"{detail.endpoint_url} {reach}"),
        ("header", f"{detail.routing_header} (the ALB routes by it)"),
        ("model", detail.model),
        (
            "instances",
            "\n".join(f"{i.instance_id} {i.lifecycle}" + (" (protected)" if i.protected else "") for i in detail.instances)
            or "none",
        ),
        *_warm_rows(detail),
        ("service", f"desired {detail.desired_count}, running {detail.running_count}, pending {detail.pending_count}"),
        ("replicas", _replicas(detail)),
        ("targets", "\n".join(f"{k} {v}" for k, v in detail.target_health.items()) or "none"),
        ("lease until", render.when(detail.lease_deadline)),
        *_start_rows(detail),
        *_planned_stop_rows(detail),
        ("cost so far", cost),
        ("last error", detail.last_error or "-"),
        ("execution", (detail.execution or "-").rsplit(":", 1)[-1]),
    ]
    rows += [("event", f"{render.when(e.at)}: {e.message}") for e in detail.service_events]
    title = f"{detail.name}  ({detail.instance_type}, pool {detail.pool}, {render.per_hour(detail.hourly_usd)})"
    return title + "\n" + render.details(rows)


def _warm_rows(detail: ProfileDetail) -> list[tuple[str, str]]:
    """The pool's warm (stopped) instances, whether the last start took one, and a capacity fallback's reason."""
    rows = []
    if detail.warm_instances:
        rows.append(
            (
                "warm pool",
                "\n".join(f"{i.instance_id} {i.lifecycle}" for i in detail.warm_instances)
                + "\n(stopped: only the volume is billed)",
            )
        )
    if detail.warm_start is not None:
        rows.append(("last start", "warm (an instance from the warm pool)" if detail.warm_start else "cold (a new instance)"))
    if detail.capacity_note:
        rows.append(("capacity", detail.capacity_note))
    return rows


def _start_rows(detail: ProfileDetail) -> list[tuple[str, str]]:
    """The latest start: while it runs, its current phase and the expected ends; after, how long it took."""
    start = detail.start
    if not start:
        return []
    eta = eta_text(start, datetime.now(UTC))
    if eta:
        # EC2 stamps LaunchTime to the second: a launch may read as just before the request.
        last = start.phases[-1] if start.phases else None
        done = f"{last.label} done at +{max(0.0, last.since_request_s):.0f} s; " if last else ""
        return [("start", done + eta)]
    if start.outcome == "STARTING":
        return [("start", f"requested {render.when(start.requested_at)}; no phase recorded yet")]
    total = start.phases[-1].since_request_s if start.phases else 0.0
    slowest = max(start.phases, key=lambda p: p.seconds, default=None)
    longest = f"; longest phase {slowest.label} {slowest.seconds:.1f} s" if slowest else ""
    return [("start took", f"{start.outcome} after {total:.1f} s{longest} (servingctl starts {detail.name})")]


def _planned_stop_rows(detail: ProfileDetail) -> list[tuple[str, str]]:
    """The sweep's next stop of a READY profile (a warning once it is near), the benchmark run
    holding it, and who last started or stopped it."""
    rows = []
    stop = detail.next_stop
    if stop:
        kind = "hard limit, after a drain" if stop.hard else "waits for running requests"
        soon = "STOPPING SOON: " if detail.stopping_soon else ""
        hint = f"; `servingctl keepalive {detail.name}` extends the lease" if stop.reason in ("lease-expired", "idle") else ""
        rows.append(("next stop", f"{soon}{render.when(stop.at)} ({stop.reason}: {stop.detail}; {kind}){hint}"))
    if detail.held_by:
        until = render.when(detail.held_until)
        rows.append(("held by", f"benchmark run {detail.held_by} until {until} (the sweep's soft stops wait)"))
    for who, label in ((detail.started_by, "started by"), (detail.stopped_by, "stopped by")):
        if who:
            rows.append((label, who))
    return rows


def _keepalive(args: argparse.Namespace, client: Client) -> int:
    body = {"minutes": args.minutes} if args.minutes is not None else {}
    from servingctl.api.models import KeepaliveAnswer, KeepaliveRequest

    problem = _checked(body, KeepaliveRequest, {"minutes": "--minutes"}, {"minutes": " minutes"})
    if problem:
        return _usage(args, problem)
    path = f"/profiles/{args.name}/keepalive"
    answer = client.post(path, body)
    summary = answer_as(KeepaliveAnswer, answer, f"POST {path}")
    if args.json:
        print(json.dumps(answer))
    else:
        print(render.paragraph(summary.message or f"{summary.name}: lease until {render.when(summary.lease_deadline)}"))
    return EXIT_OK
