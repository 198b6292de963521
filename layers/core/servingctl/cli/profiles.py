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
from servingctl.cli.client import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Client,
    add_api_arguments,
    api_command,
)
from servingctl.cli.interrupt import interrupted, unanswered
from servingctl.cli.main import summary
from servingctl.cli.starts import eta_text, phase_line

if TYPE_CHECKING:
    from rich.console import RenderableType

FOLLOW_INTERVAL_S = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add start, stop, status, keepalive and wait."""
    start = subparsers.add_parser("start", help=summary("start"))
    start.add_argument("name", help="profile name from the registry")
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
    stop.add_argument("name", help="profile name from the registry")
    stop.add_argument("--wait", action="store_true", help="follow the phases until STOPPED or failure")
    _poll_argument(stop)
    add_api_arguments(stop)
    stop.set_defaults(func=api_command(_stop))

    status = subparsers.add_parser("status", help=summary("status"))
    status.add_argument("name", nargs="?", help="profile name (all profiles when absent)")
    add_api_arguments(status)
    status.set_defaults(func=api_command(_status))

    keepalive = subparsers.add_parser("keepalive", help=summary("keepalive"))
    keepalive.add_argument("name", help="profile name from the registry")
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
    body = {"poll": poll} if poll else {}
    problem = _checked(body, StopRequest, START_FLAGS, {})
    if problem:
        return _usage(args, problem)
    return _submit(args, client, "stop", body)


def _submit(args: argparse.Namespace, client: Client, action: str, body: dict[str, Any]) -> int:
    """POST the start or stop, then answer, print the execution to follow, or follow it (--wait)."""
    try:
        ref = client.post(f"/profiles/{args.name}/{action}", body, idempotent=True)
    except KeyboardInterrupt:
        return unanswered(f"the {action} of {args.name}", f"servingctl status {args.name}")
    if ref.get("already"):
        print(json.dumps(ref) if args.json else render.paragraph(ref["message"]))
        return EXIT_OK
    if not args.wait:
        if args.json:
            print(json.dumps(ref))
        else:
            how = "was already running: joined" if ref["joined"] else "submitted"
            print(
                f"{ref['profile']}: {ref['action']} {how} ({ref['execution_id']})\n"
                f"  follow it: servingctl wait {ref['execution_id']}   (or: servingctl status {ref['profile']})"
            )
        return EXIT_OK
    return _follow_command(args, client, ref["execution_id"], ref["profile"], ref["action"])


def _wait(args: argparse.Namespace, client: Client) -> int:
    if not args.execution.startswith(("start-", "stop-", "arn:")):  # a benchmark run
        from servingctl.cli.benchmarks import attach

        return attach(args, client, args.execution, client.get(f"/benchmarks/{args.execution}")["profile"])
    progress = client.get(f"/executions/{args.execution}")
    return _follow_command(args, client, progress["execution_id"], progress["profile"], progress["action"])


def _follow_command(args: argparse.Namespace, client: Client, execution_id: str, profile: str, action: str) -> int:
    """Follow until the execution ends; Ctrl-C leaves it running and says how to come back."""
    try:
        final = follow(client, execution_id, plain=args.json or not sys.stdout.isatty(), quiet=args.json)
    except KeyboardInterrupt:
        return interrupted(client, action, execution_id, profile)
    if args.json:
        print(json.dumps(final))
    return EXIT_OK if final["status"] == "SUCCEEDED" else EXIT_FAILED


def _line(phase: dict[str, Any]) -> str:
    return f"[{phase['offset_s']:8.1f} s] {phase['name']}"


def follow(
    client: Client, execution_id: str, *, plain: bool, quiet: bool = False, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Poll the execution until it ends, showing phases as they pass; returns the last progress."""
    if plain:
        shown, shown_marks, last_eta = 0, 0, None
        while True:
            progress = client.get(f"/executions/{execution_id}")
            phases = _with_offsets(progress)
            start = _timeline(client, progress)
            # One time axis (since the execution started) for the flow's steps and the timeline's phases.
            lines = [(phase["offset_s"], _line(phase)) for phase in phases[shown:]]
            eta = None
            if start is not None:
                lines += [phase_line(p, datetime.fromisoformat(progress["started_at"])) for p in start["phases"][shown_marks:]]
                eta = eta_text(start, datetime.now(UTC))
                if not (start["phases"][shown_marks:] or last_eta is None):
                    eta = None  # said again with each new phase only: the ETA moves with the phases
                last_eta = eta or last_eta
                shown_marks = len(start["phases"])
            if not quiet:
                for _, line in sorted(lines, key=lambda pair: pair[0]):
                    print(line, flush=True)
                if eta:
                    print(render.note(eta, prefix=" " * 14), flush=True)
            shown = len(phases)
            if progress["status"] != "RUNNING":
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
            progress = client.get(f"/executions/{execution_id}")
            live.update(_view(progress, _timeline(client, progress)))
            if progress["status"] != "RUNNING":
                break
            sleep(FOLLOW_INTERVAL_S)
    console.print(_summary(progress), highlight=False)
    return progress


def _timeline(client: Client, progress: dict[str, Any]) -> dict[str, Any] | None:
    """The start timeline of this execution (a start's only, once it recorded one)."""
    if progress["action"] != "start" or not progress.get("profile"):
        return None
    start = client.get(f"/profiles/{progress['profile']}").get("start")
    return start if start and start["execution"] == progress["execution_arn"] else None


def _with_offsets(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Phases with offset_s = seconds from the execution's start to the phase's start."""
    started = datetime.fromisoformat(progress["started_at"])
    return [p | {"offset_s": (datetime.fromisoformat(p["started_at"]) - started).total_seconds()} for p in progress["phases"]]


def _view(progress: dict[str, Any], start: dict[str, Any] | None = None) -> RenderableType:
    """The live view: a title line, the phases (a start's timeline once it has one, with the ETA),
    and the last check's detail at the terminal's width."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, box=None, padding=(0, 2))
    parts: list[RenderableType] = [
        Text(
            f"{progress['action']} {progress['profile']}  {progress['status']}  "
            f"{progress['elapsed_s']:.1f} s  ({progress['execution_id']})",
            style="bold",
        ),
        table,
    ]
    if start is not None and start["phases"]:
        table.add_column("phase")
        table.add_column("took", justify="right")
        table.add_column("at", justify="right")
        table.add_column("p50", justify="right")
        for phase in start["phases"]:
            p50 = "-" if phase.get("p50_s") is None else f"{phase['p50_s']:.1f} s"
            at = (datetime.fromisoformat(phase["at"]) - datetime.fromisoformat(progress["started_at"])).total_seconds()
            table.add_row("  " + phase["label"], f"{phase['seconds']:.1f} s", f"{at:.1f} s", p50)
        eta = eta_text(start, datetime.now(UTC))
        if eta and progress["status"] == "RUNNING":
            parts.append(Text("> " + eta, overflow="fold"))
    else:
        table.add_column("phase")
        table.add_column("elapsed", justify="right")
        phases = progress["phases"]
        for i, phase in enumerate(phases):
            running = progress["status"] == "RUNNING" and i == len(phases) - 1
            table.add_row(("> " if running else "  ") + phase["name"], f"{phase['elapsed_s']:.1f} s")
    if progress.get("detail"):
        parts.append(Text(progress["detail"], style="dim", overflow="fold"))
    return Group(*parts)


def _summary(progress: dict[str, Any]) -> str:
    spans = ", ".join(f"{p['name']} {p['elapsed_s']:.1f} s" for p in progress["phases"] if p["name"] not in ("ready", "stopped"))
    if progress["status"] == "SUCCEEDED":
        done = "READY" if progress["action"] == "start" else "STOPPED"
        return f"{progress['profile']} {done} in {progress['elapsed_s']:.1f} s ({spans})"
    reason = f"{progress.get('error') or progress['status']}: {progress.get('cause') or 'no cause recorded'}"
    return f"{progress['profile']} {progress['action']} {progress['status']} after {progress['elapsed_s']:.1f} s: {reason}"


def _price(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _status(args: argparse.Namespace, client: Client) -> int:
    if args.name is None:
        profiles = client.get("/profiles")
        if args.json:
            print(json.dumps(profiles))
        elif not profiles:
            print("no profiles in the registry")
        else:
            rows = [
                (
                    p["name"],
                    p["phase"],
                    p["instance_type"],
                    _price(p.get("hourly_usd")),
                    render.when(p["lease_deadline"], short=True),
                )
                for p in profiles
            ]
            notes = [
                "; ".join(
                    n
                    for n in (
                        p.get("retired") and f"not in the registry: {p['retired']} (stopping it)",
                        p["last_error"] and f"last error: {p['last_error']}",
                    )
                    if n
                )
                or None
                for p in profiles
            ]
            print(render.columns_with_notes(("profile", "phase", "type", "USD/h", "lease until UTC"), rows, notes, right=(3,)))
        return EXIT_OK
    detail = client.get(f"/profiles/{args.name}")
    if args.json:
        print(json.dumps(detail))
        return EXIT_OK
    print(status_text(detail, local=client.local))
    return EXIT_OK


def status_text(detail: dict[str, Any], *, local: bool = False) -> str:
    """One profile's status: endpoint and how to reach it (local: the twin's model server, reachable
    from this machine), instances by id, phase, lease, cost so far."""
    phase = detail["phase"] + (" (stop requested)" if detail["stop_requested"] else "")
    if detail["phase"] == "READY" and detail.get("ready_at"):
        phase += f" since {render.when(detail['ready_at'])}"
    cost = "-"
    if detail["accrued_cost_usd"] is not None:
        cost = (
            f"{detail['accrued_cost_usd']:.2f} USD ({detail['uptime_s'] / 60:.1f} min at {render.per_hour(detail['hourly_usd'])})"
        )
    elif detail.get("uptime_s") is not None:
        cost = f"unpriced ({detail['uptime_s'] / 60:.1f} min up; the instance is {render.per_hour(None)})"
    rows = [
        ("phase", phase),
        *(
            [("registry", f"not in the registry: {detail['retired']}; shown from the controller's copy until it is stopped")]
            if detail.get("retired")
            else []
        ),
        (
            "endpoint",
            f"{detail['endpoint_url']} "
            + (
                "(the twin's ALB, reachable here)"
                if local
                else f"(internal: from a host in the VPC; `servingctl bench --profile {detail['name']}` measures it from there)"
            ),
        ),
        ("header", f"{detail['routing_header']} (the ALB routes by it)"),
        ("model", detail["model"]),
        (
            "instances",
            "\n".join(
                f"{i['instance_id']} {i['lifecycle']}" + (" (protected)" if i["protected"] else "") for i in detail["instances"]
            )
            or "none",
        ),
        *_warm_rows(detail),
        ("service", f"desired {detail['desired_count']}, running {detail['running_count']}, pending {detail['pending_count']}"),
        ("targets", "\n".join(f"{k} {v}" for k, v in detail["target_health"].items()) or "none"),
        ("lease until", render.when(detail["lease_deadline"])),
        *_start_rows(detail),
        *_planned_stop_rows(detail),
        ("cost so far", cost),
        ("last error", detail["last_error"] or "-"),
        ("execution", (detail["execution"] or "-").rsplit(":", 1)[-1]),
    ]
    rows += [("event", f"{render.when(e['at'])}: {e['message']}") for e in detail["service_events"]]
    title = f"{detail['name']}  ({detail['instance_type']}, pool {detail['pool']}, {render.per_hour(detail.get('hourly_usd'))})"
    return title + "\n" + render.details(rows)


def _warm_rows(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """The pool's warm (stopped) instances, whether the last start took one, and a capacity fallback's reason."""
    rows = []
    if detail.get("warm_instances"):
        rows.append(
            (
                "warm pool",
                "\n".join(f"{i['instance_id']} {i['lifecycle']}" for i in detail["warm_instances"])
                + "\n(stopped: only the volume is billed)",
            )
        )
    if detail.get("warm_start") is not None:
        rows.append(("last start", "warm (an instance from the warm pool)" if detail["warm_start"] else "cold (a new instance)"))
    if detail.get("capacity_note"):
        rows.append(("capacity", detail["capacity_note"]))
    return rows


def _start_rows(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """The latest start: while it runs, its current phase and the expected ends; after, how long it took."""
    start = detail.get("start")
    if not start:
        return []
    eta = eta_text(start, datetime.now(UTC))
    if eta:
        # EC2 stamps LaunchTime to the second: a launch may read as just before the request.
        done = (
            f"{start['phases'][-1]['label']} done at +{max(0.0, start['phases'][-1]['since_request_s']):.0f} s; "
            if start["phases"]
            else ""
        )
        return [("start", done + eta)]
    if start["outcome"] == "STARTING":
        return [("start", f"requested {render.when(start['requested_at'])}; no phase recorded yet")]
    total = start["phases"][-1]["since_request_s"] if start["phases"] else 0.0
    slowest = max(start["phases"], key=lambda p: p["seconds"], default=None)
    longest = f"; longest phase {slowest['label']} {slowest['seconds']:.1f} s" if slowest else ""
    return [("start took", f"{start['outcome']} after {total:.1f} s{longest} (servingctl starts {detail['name']})")]


def _planned_stop_rows(detail: dict[str, Any]) -> list[tuple[str, str]]:
    """The sweep's next stop of a READY profile (a warning once it is near), the benchmark run
    holding it, and who last started or stopped it."""
    rows = []
    stop = detail.get("next_stop")
    if stop:
        kind = "hard limit, after a drain" if stop["hard"] else "waits for running requests"
        soon = "STOPPING SOON: " if detail.get("stopping_soon") else ""
        hint = (
            f"; `servingctl keepalive {detail['name']}` extends the lease" if stop["reason"] in ("lease-expired", "idle") else ""
        )
        rows.append(("next stop", f"{soon}{render.when(stop['at'])} ({stop['reason']}: {stop['detail']}; {kind}){hint}"))
    if detail.get("held_by"):
        rows.append(
            (
                "held by",
                f"benchmark run {detail['held_by']} until {render.when(detail.get('held_until'))} (the sweep's soft stops wait)",
            )
        )
    for key, label in (("started_by", "started by"), ("stopped_by", "stopped by")):
        if detail.get(key):
            rows.append((label, detail[key]))
    return rows


def _keepalive(args: argparse.Namespace, client: Client) -> int:
    body = {"minutes": args.minutes} if args.minutes is not None else {}
    from servingctl.api.models import KeepaliveRequest

    problem = _checked(body, KeepaliveRequest, {"minutes": "--minutes"}, {"minutes": " minutes"})
    if problem:
        return _usage(args, problem)
    summary = client.post(f"/profiles/{args.name}/keepalive", body)
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            render.paragraph(summary.get("message") or f"{summary['name']}: lease until {render.when(summary['lease_deadline'])}")
        )
    return EXIT_OK
