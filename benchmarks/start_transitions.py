"""State transitions per start and the target-healthy -> READY lag, measured on the local twin.

A start of the reference's deepseek-v4-flash profile takes about 15 simulated minutes with the world's
default delays (instance launch and registration, image pull, weights load, two health checks). Time
is compressed by --factor: the world's delays, and the production poll settings and deadlines passed
in the execution input, are all divided by it, so the execution polls exactly as it would in
production and the transition count carries over. Figures come from the execution history (states
entered) and the world's event log (when the ALB target turned healthy) vs the READY time recorded in
DynamoDB.

    .venv/bin/python benchmarks/start_transitions.py [--factor 15] [--profile deepseek-v4-flash] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import boto3

from servingctl.store import DynamoStore
from servingctl_twin.twin import Twin

# Production defaults (the contract's poll settings, the registry's StartSettings deadlines).
POLL = {"interval_s": 15, "max_interval_s": 60, "backoff": 1.5}
DEADLINES = {"capacity_s": 900, "task_s": 2400, "health_s": 2400}
GOAL_TRANSITIONS = 150


def _scaled(values: Mapping[str, float], factor: float, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """Divide every value by factor (whole seconds, at least 1), leaving the keys in keep alone."""
    return {k: v if k in keep else max(1, math.ceil(v / factor)) for k, v in values.items()}


def measure(factor: float, profile: str) -> dict[str, Any]:
    """Run one start and one stop on a fresh twin; return the figures in simulated seconds."""
    if any(POLL[k] % factor for k in ("interval_s", "max_interval_s")):
        raise SystemExit(f"--factor must divide the poll settings {POLL} (Wait takes whole seconds)")
    poll = _scaled(POLL, factor, keep=("backoff",))
    with Twin(time_scale=factor) as twin:
        started = twin.run(
            "start_profile",
            {"profile": profile, "poll": poll, "deadlines": _scaled(DEADLINES, factor)},
            name=f"start-{profile}-bench",
            timeout_s=3600 / factor + 120,
        )
        if started.status != "SUCCEEDED":
            raise SystemExit(f"start {started.status}: {started.error}: {started.cause}")
        resource = boto3.resource(
            "dynamodb", endpoint_url=twin.endpoint_url, region_name=twin.region, aws_access_key_id="x", aws_secret_access_key="x"
        )
        ready_at = DynamoStore(twin.table_name, resource=resource).get_profile(profile).ready_at
        assert twin.world is not None and ready_at is not None
        [healthy] = [e for e in twin.world.events_of("target-healthy") if e.detail.startswith(f"{profile}:")]
        stopped = twin.run(
            "stop_profile", {"profile": profile, "poll": poll}, name=f"stop-{profile}-bench", timeout_s=3600 / factor + 120
        )
        if stopped.status != "SUCCEEDED":
            raise SystemExit(f"stop {stopped.status}: {stopped.error}: {stopped.cause}")
    start_s = (started.describe["stopDate"] - started.describe["startDate"]).total_seconds() * factor
    lag_s = (ready_at.timestamp() - healthy.real) * factor
    entered = started.states_entered()
    return {
        "factor": factor,
        "profile": profile,
        "poll": POLL,
        "simulated_start_s": round(start_s, 1),
        "start_transitions": len(entered),
        "start_history_events": len(started.history),
        "start_lambda_invocations": sum(1 for e in started.history if e["type"] == "TaskScheduled"),
        "checks": {name: entered.count(name) for name in ("CheckCapacity", "CheckTask", "CheckTargets")},
        "stop_transitions": len(stopped.states_entered()),
        "healthy_to_ready_s": round(lag_s, 1),
        "goal_transitions": GOAL_TRANSITIONS,
        "goal_lag_s": POLL["interval_s"],
        "measured_at": datetime.now().isoformat(timespec="seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    """Measure and print the figures; exit 1 when a goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factor", type=float, default=15.0, help="time compression (default 15)")
    parser.add_argument("--profile", default="deepseek-v4-flash")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # the handlers' Powertools logs and metrics
        figures = measure(args.factor, args.profile)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"start of {figures['profile']}: {figures['simulated_start_s'] / 60:.1f} simulated minutes "
            f"(time compressed x{figures['factor']:g}, poll {POLL})"
        )
        print(
            f"  state transitions per start   {figures['start_transitions']:>6}   (goal <= {GOAL_TRANSITIONS}); "
            f"Lambda invocations {figures['start_lambda_invocations']}, checks {figures['checks']}"
        )
        print(
            f"  target healthy -> READY lag   {figures['healthy_to_ready_s']:>6} s "
            f"(goal <= {POLL['interval_s']} s, one poll interval)"
        )
        print(f"  state transitions per stop    {figures['stop_transitions']:>6}")
    ok = figures["start_transitions"] <= GOAL_TRANSITIONS and figures["healthy_to_ready_s"] <= POLL["interval_s"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
