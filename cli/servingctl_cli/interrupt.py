"""What Ctrl-C during a follow leaves running, said in one line, for every command that follows an
execution (start --wait, stop --wait, wait ID, bench --profile): no traceback, exit code 130.

Leaving a follow cancels nothing: the execution goes on in Step Functions and the profile's GPU
instance is billed by the hour. So the line names the execution's ARN, the instance type and its
price, the command that re-attaches (`servingctl wait ID`) and the one that stops it.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from servingctl import render
from servingctl_cli.client import EXIT_INTERRUPTED, ApiError, Client, Unreachable, answer_as, answers_as

if TYPE_CHECKING:
    from servingctl.api.models import ProfileSummary


def interrupted(client: Client, followed: str, wait_id: str, profile: str) -> int:
    """Print what keeps running after Ctrl-C in a follow of a start, a stop or a benchmark run
    (followed: start, stop or bench) and return the exit code 130."""
    print(interrupted_line(client, followed, wait_id, profile), file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def unanswered(what: str, check: str) -> int:
    """Ctrl-C while the request that starts something was on its way: it may have started."""
    print(f"interrupted before the API answered: {what} may have been submitted; check: {check}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def interrupted_line(client: Client, followed: str, wait_id: str, profile: str) -> str:
    """The one line: what goes on, where (ARN), on what at which price, how to re-attach and to stop it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this line short
    try:
        arn, stops_after = _execution(client, followed, wait_id)
        spec = _spec(client, profile)
    finally:
        signal.signal(signal.SIGINT, previous)
    gpu = f"a {spec.instance_type} ({render.per_hour(spec.hourly_usd)})" if spec else "its GPU instance"
    where = f"it keeps running in Step Functions ({arn})"
    if followed == "start":
        what, goes_on, stop = f"start of {profile}", f"{where} and brings up {gpu}", f"stop it: servingctl stop {profile}"
    elif followed == "stop":
        what, goes_on, stop = f"stop of {profile}", f"{where} and releases {gpu}", f"check: servingctl status {profile}"
    else:
        after = "which the run stops when it ends" if stops_after else "which stays up after the run"
        what, goes_on = f"run {wait_id}", f"{where} on {profile}, {gpu}, {after}"
        stop = f"stop the profile: servingctl stop {profile}"
    return f"interrupted: {what} not followed any more; {goes_on}; re-attach: servingctl wait {wait_id}; {stop}"


def _execution(client: Client, followed: str, wait_id: str) -> tuple[str, bool]:
    """The execution's ARN (its name when the API cannot say) and whether it stops the profile at the end."""
    from servingctl.api.benchmarks import BenchmarkDetail
    from servingctl.api.models import ExecutionProgress

    try:
        if followed == "bench":
            path = f"/benchmarks/{wait_id}"
            detail = answer_as(BenchmarkDetail, client.get(path), f"GET {path}")
            return detail.execution_arn or f"bench-{wait_id}", bool(
                detail.request.get("stop")
            )  # the API keeps the input as given
        path = f"/executions/{wait_id}"
        return answer_as(ExecutionProgress, client.get(path), f"GET {path}").execution_arn, False
    except (ApiError, Unreachable):
        return f"bench-{wait_id}" if followed == "bench" else wait_id, False


def _spec(client: Client, profile: str) -> ProfileSummary | None:
    """The profile as GET /profiles lists it (instance type, hourly price); None when the API cannot say."""
    from servingctl.api.models import ProfileSummary

    try:
        return next((p for p in answers_as(ProfileSummary, client.get("/profiles"), "GET /profiles") if p.name == profile), None)
    except (ApiError, Unreachable):
        return None
