"""`servingctl logs NAME [--follow] [--since 10m]`: a profile's model server output from CloudWatch
Logs, where its task definition's awslogs driver ships it (the log group and stream prefix come from
the deployed task definition). Lines come from FilterLogEvents over the profile's streams, oldest
first; --follow keeps polling for new ones (CloudWatch Logs has no push for FilterLogEvents) until
Ctrl-C. --container picks the model server (vllm, the default), the weights prefetch, or both.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from servingctl_cli.aws import (
    MODEL_CONTAINER,
    PREFETCH_CONTAINER,
    NotDeployed,
    add_aws_arguments,
    connect_aws,
    describe_stack,
    profile_of,
    profile_task,
    read_registry,
)
from servingctl_cli.client import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, Unreachable
from servingctl_cli.main import summary

SINCE = re.compile(r"^(\d+)([smhd])$")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FOLLOW_POLL_S = 2.0  # FilterLogEvents quota: 5 requests per second per account and region
CONTAINERS = {"vllm": (MODEL_CONTAINER,), "prefetch": (PREFETCH_CONTAINER,), "all": (MODEL_CONTAINER, PREFETCH_CONTAINER)}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `logs`."""
    parser = subparsers.add_parser("logs", help=summary("logs"))
    parser.add_argument("name", help="profile name from the registry")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    parser.add_argument("--since", default="10m", help="how far back: 30s, 10m, 2h, 1d, or an ISO time (default 10m)")
    parser.add_argument(
        "--container", choices=sorted(CONTAINERS), default="vllm", help="whose lines (default vllm, the model server)"
    )
    parser.add_argument(
        "--poll", type=float, default=FOLLOW_POLL_S, help=f"seconds between polls with --follow (default {FOLLOW_POLL_S:g})"
    )
    add_aws_arguments(parser)
    parser.set_defaults(func=_logs)


def since_ms(text: str, now: float) -> int:
    """--since as epoch milliseconds: a duration back from now, or an ISO time (UTC when it names no zone)."""
    found = SINCE.match(text.strip())
    if found:
        return int((now - int(found.group(1)) * UNIT_S[found.group(2)]) * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since must be a duration (30s, 10m, 2h, 1d) or an ISO time; got {text!r}") from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def events(logs: Any, group: str, prefixes: tuple[str, ...], start_ms: int) -> Iterator[dict[str, Any]]:
    """Every event of the streams under each prefix from start_ms on, oldest first."""
    found = []
    for prefix in prefixes:
        for page in logs.get_paginator("filter_log_events").paginate(
            logGroupName=group, logStreamNamePrefix=prefix, startTime=start_ms
        ):
            found.extend(page.get("events", []))
    return iter(sorted(found, key=lambda e: (e["timestamp"], e["logStreamName"], e["eventId"])))


def line(event: dict[str, Any]) -> str:
    """One event as printed: UTC time, the container/task the stream names, the message."""
    stamp = datetime.fromtimestamp(event["timestamp"] / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    parts = event["logStreamName"].split("/")  # <prefix>/<container>/<task id>
    source = f"{parts[-2]}/{parts[-1][:8]}" if len(parts) >= 3 else event["logStreamName"]
    return f"{stamp} {source} {event['message'].rstrip()}"


def _logs(args: argparse.Namespace) -> int:
    if args.poll <= 0:
        print(f"servingctl logs: error: --poll must be greater than 0; got {args.poll:g}", file=sys.stderr)
        return EXIT_USAGE
    try:
        start = since_ms(args.since, time.time())
    except ValueError as exc:
        print(f"servingctl logs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        aws = connect_aws(args)
        task = profile_task(aws, profile_of(read_registry(aws, describe_stack(aws, args.stack)), args.name))
    except Unreachable as exc:
        print(f"servingctl logs: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (NotDeployed, ClientError, BotoCoreError) as exc:
        print(f"servingctl logs: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if task.log_group is None:
        print(
            f"servingctl logs: error: task definition {task.family} ships no logs to CloudWatch (no awslogs driver)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    prefixes = tuple(f"{task.stream_prefix}/{c}/" for c in CONTAINERS[args.container])
    logs = aws.client("logs")
    seen: dict[str, int] = {}  # event id -> timestamp of what was printed at `start` (the next poll reads that millisecond again)
    try:
        while True:
            batch = [e for e in events(logs, task.log_group, prefixes, start) if e["eventId"] not in seen]
            for event in batch:
                print(line(event), flush=True)
            if batch:
                start = batch[-1]["timestamp"]
                seen = {i: t for i, t in seen.items() if t == start} | {
                    e["eventId"]: start for e in batch if e["timestamp"] == start
                }
            elif not args.follow and not seen:
                print(f"no log lines in {task.log_group} since {args.since} ({args.container})", file=sys.stderr)
            if not args.follow:
                return EXIT_OK
            time.sleep(args.poll)
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        if code == "ResourceNotFoundException":
            print(
                f"servingctl logs: error: log group {task.log_group} not found (the profile's log group is made by Terraform)",
                file=sys.stderr,
            )
        else:
            print(f"servingctl logs: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("stopped following", file=sys.stderr)
        return EXIT_INTERRUPTED
