"""`servingctl start | stop | status | keepalive`: profiles through the REST API (cli.client).

--wait follows the execution (GET /executions/{id}) and shows each phase as it passes with the
elapsed time: a rich live table on a terminal, one plain line per phase otherwise. Exit codes:
0 done, 1 the flow failed or the API refused (the reason is printed), 2 bad usage, 3 no API.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from servingctl.cli.client import EXIT_FAILED, EXIT_OK, Client, add_api_arguments, api_command

FOLLOW_INTERVAL_S = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add start, stop, status and keepalive."""
    start = subparsers.add_parser("start", help="start a serving profile (202: the start runs in Step Functions)")
    start.add_argument("name", help="profile name from the registry")
    start.add_argument("--wait", action="store_true", help="follow the phases until READY or failure")
    start.add_argument("--allow-shared-pool", action="store_true", help="start even when another profile holds the pool")
    start.add_argument("--lease", type=_positive_int, metavar="MINUTES", help="minutes before auto-shutdown may stop it")
    _poll_argument(start)
    add_api_arguments(start)
    start.set_defaults(func=api_command(_start))

    stop = subparsers.add_parser("stop", help="stop a serving profile (preempts a running start)")
    stop.add_argument("name", help="profile name from the registry")
    stop.add_argument("--wait", action="store_true", help="follow the phases until STOPPED or failure")
    _poll_argument(stop)
    add_api_arguments(stop)
    stop.set_defaults(func=api_command(_stop))

    status = subparsers.add_parser("status", help="every profile's phase, or one profile in detail")
    status.add_argument("name", nargs="?", help="profile name (all profiles when absent)")
    add_api_arguments(status)
    status.set_defaults(func=api_command(_status))

    keepalive = subparsers.add_parser("keepalive", help="extend a READY profile's lease")
    keepalive.add_argument("name", help="profile name from the registry")
    keepalive.add_argument("--minutes", type=_positive_int, help="lease from now (default: the profile's default lease)")
    add_api_arguments(keepalive)
    keepalive.set_defaults(func=api_command(_keepalive))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _poll_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-interval", type=_positive_int, metavar="SECONDS",
                        help="seconds between the flow's checks (default 15; the local twin suggests its own)")


def _poll(args: argparse.Namespace, client: Client) -> dict[str, Any] | None:
    """Wait-loop pacing for the execution: --poll-interval, else the twin's suggestion, else the API's default."""
    if args.poll_interval:
        return {"interval_s": args.poll_interval, "max_interval_s": max(args.poll_interval, 4 * args.poll_interval), "backoff": 1.5}
    return client.poll


def _start(args: argparse.Namespace, client: Client) -> int:
    body: dict[str, Any] = {"allow_shared_pool": args.allow_shared_pool}
    if args.lease is not None:
        body["lease_minutes"] = args.lease
    poll = _poll(args, client)
    if poll:
        body["poll"] = poll
    ref = client.post(f"/profiles/{args.name}/start", body, idempotent=True)
    return _after_submit(args, client, ref)


def _stop(args: argparse.Namespace, client: Client) -> int:
    poll = _poll(args, client)
    ref = client.post(f"/profiles/{args.name}/stop", {"poll": poll} if poll else {}, idempotent=True)
    return _after_submit(args, client, ref)


def _after_submit(args: argparse.Namespace, client: Client, ref: dict[str, Any]) -> int:
    if not args.wait:
        if args.json:
            print(json.dumps(ref))
        else:
            how = "joined the running" if ref["joined"] else "started"
            print(f"{ref['profile']}: {how} {ref['action']} {ref['execution_id']} "
                  f"(follow: servingctl {ref['action']} {ref['profile']} --wait, or status {ref['profile']})")
        return EXIT_OK
    final = follow(client, ref["execution_id"], plain=args.json or not Console().is_terminal, quiet=args.json)
    if args.json:
        print(json.dumps(final))
    return EXIT_OK if final["status"] == "SUCCEEDED" else EXIT_FAILED


def _line(phase: dict[str, Any]) -> str:
    return f"[{phase['offset_s']:8.1f} s] {phase['name']}"


def follow(client: Client, execution_id: str, *, plain: bool, quiet: bool = False,
           sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Poll the execution until it ends, showing phases as they pass; returns the last progress."""
    console = Console(stderr=quiet)
    if plain:
        shown = 0
        while True:
            progress = client.get(f"/executions/{execution_id}")
            phases = _with_offsets(progress)
            for phase in phases[shown:]:
                if not quiet:
                    print(_line(phase), flush=True)
            shown = len(phases)
            if progress["status"] != "RUNNING":
                break
            sleep(FOLLOW_INTERVAL_S)
        if not quiet:
            print(_summary(progress), flush=True)
        return progress
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            progress = client.get(f"/executions/{execution_id}")
            live.update(_table(progress))
            if progress["status"] != "RUNNING":
                break
            sleep(FOLLOW_INTERVAL_S)
    console.print(_summary(progress))
    return progress


def _with_offsets(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Phases with offset_s = seconds from the execution's start to the phase's start."""
    started = datetime.fromisoformat(progress["started_at"])
    return [p | {"offset_s": (datetime.fromisoformat(p["started_at"]) - started).total_seconds()} for p in progress["phases"]]


def _table(progress: dict[str, Any]) -> Table:
    table = Table(title=f"{progress['action']} {progress['profile']}  {progress['status']}  {progress['elapsed_s']:.1f} s",
                  caption=progress.get("detail") or "")
    table.add_column("phase")
    table.add_column("elapsed", justify="right")
    phases = progress["phases"]
    for i, phase in enumerate(phases):
        running = progress["status"] == "RUNNING" and i == len(phases) - 1
        table.add_row(("> " if running else "  ") + phase["name"], f"{phase['elapsed_s']:.1f} s")
    return table


def _summary(progress: dict[str, Any]) -> str:
    spans = ", ".join(f"{p['name']} {p['elapsed_s']:.1f} s" for p in progress["phases"] if p["name"] not in ("ready", "stopped"))
    if progress["status"] == "SUCCEEDED":
        done = "READY" if progress["action"] == "start" else "STOPPED"
        return f"{progress['profile']} {done} in {progress['elapsed_s']:.1f} s ({spans})"
    reason = f"{progress.get('error') or progress['status']}: {progress.get('cause') or 'no cause recorded'}"
    return f"{progress['profile']} {progress['action']} {progress['status']} after {progress['elapsed_s']:.1f} s: {reason}"


def _status(args: argparse.Namespace, client: Client) -> int:
    if args.name is None:
        profiles = client.get("/profiles")
        if args.json:
            print(json.dumps(profiles))
            return EXIT_OK
        table = Table(title="servingctl profiles")
        for column in ("profile", "phase", "instance", "lease until", "last error"):
            table.add_column(column)
        for p in profiles:
            table.add_row(p["name"], p["phase"], p["instance_type"], p["lease_deadline"] or "-", p["last_error"] or "")
        Console().print(table)
        return EXIT_OK
    detail = client.get(f"/profiles/{args.name}")
    if args.json:
        print(json.dumps(detail))
        return EXIT_OK
    cost = "-" if detail["accrued_cost_usd"] is None else f"{detail['accrued_cost_usd']:.2f} USD at {detail['hourly_usd']}/h"
    rows = [
        ("phase", detail["phase"] + (" (stop requested)" if detail["stop_requested"] else "")),
        ("service", f"desired {detail['desired_count']}, running {detail['running_count']}, pending {detail['pending_count']}"),
        ("instances", ", ".join(f"{i['instance_id']} {i['lifecycle']}" for i in detail["instances"]) or "none"),
        ("targets", ", ".join(f"{k} {v}" for k, v in detail["target_health"].items()) or "none"),
        ("uptime", "-" if detail["uptime_s"] is None else f"{detail['uptime_s'] / 60:.1f} min"),
        ("accrued cost", cost),
        ("lease until", detail["lease_deadline"] or "-"),
        ("last error", detail["last_error"] or "-"),
        ("execution", detail["execution"] or "-"),
    ]
    rows += [("event", f"{e['at']}: {e['message']}") for e in detail["service_events"]]
    table = Table(title=f"{detail['name']} ({detail['instance_type']}, pool {detail['pool']})", show_header=False)
    table.add_column("what")
    table.add_column("value")
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
    return EXIT_OK


def _keepalive(args: argparse.Namespace, client: Client) -> int:
    body = {"minutes": args.minutes} if args.minutes else {}
    summary = client.post(f"/profiles/{args.name}/keepalive", body)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['name']}: lease until {summary['lease_deadline']}")
    return EXIT_OK
