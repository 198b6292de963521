"""Execution names of the start/stop flows: <action>-<profile>-<token>, and finding a profile's running one.

Step Functions returns the running execution instead of starting a second one when StartExecution
is called again with the same name and input, so whoever starts a flow (the API, the sweep) derives
the token from what should make the call "the same one". A closed execution's name is never used
again (Step Functions refuses it for 90 days): start_fresh moves on to the next attempt's name.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from types_boto3_stepfunctions import SFNClient
    from types_boto3_stepfunctions.type_defs import ExecutionListItemTypeDef

Action = Literal["start", "stop"]
TOKEN_CHARS = 10  # "start-" + a 63-character profile name + "-" + 10 stays within Step Functions' 80
# Names start_fresh tries before giving up: one more per closed execution of the same intent.
MAX_ATTEMPTS = 20


def name_prefix(action: Action, profile: str) -> str:
    """Execution names of a profile's starts or stops begin with this."""
    return f"{action}-{profile}-"


def execution_name(action: Action, profile: str, *parts: str) -> str:
    """<action>-<profile>-<token>, the token a hash of parts (the same parts give the same name)."""
    return name_prefix(action, profile) + hashlib.sha256("|".join(parts).encode()).hexdigest()[:TOKEN_CHARS]


def is_execution_of(name: str, action: Action, profile: str) -> bool:
    """True when an execution name belongs to this profile's starts or stops (not to a longer profile name)."""
    prefix = name_prefix(action, profile)
    return name.startswith(prefix) and "-" not in name[len(prefix) :]


def running_execution(sfn: SFNClient, machine_arn: str, action: Action, profile: str) -> ExecutionListItemTypeDef | None:
    """The profile's RUNNING execution of the machine (a list_executions item), None when there is none."""
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn, statusFilter="RUNNING"):
        for execution in page["executions"]:
            if is_execution_of(execution["name"], action, profile):
                return execution
    return None


def latest_execution(sfn: SFNClient, machine_arn: str, action: Action, profile: str) -> ExecutionListItemTypeDef | None:
    """The profile's newest execution of the machine, whatever its status (a list_executions item)."""
    # ListExecutions answers newest first.
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn):
        for execution in page["executions"]:
            if is_execution_of(execution["name"], action, profile):
                return execution
    return None


def canonical(document: dict[str, Any]) -> str:
    """The one JSON spelling of an execution input (Step Functions compares inputs byte for byte)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def execution_status(sfn: SFNClient, execution_arn: str) -> str:
    """DescribeExecution's status (RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED, ...); MISSING when
    Step Functions does not know the execution (expired from its history, or never existed)."""
    try:
        return str(sfn.describe_execution(executionArn=execution_arn)["status"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ExecutionDoesNotExist":
            return "MISSING"
        raise


def attempt_names(action: Action, profile: str, parts: tuple[str, ...]) -> list[str]:
    """The names one intent may run under, in order: execution_name(parts), then one per attempt."""
    return [execution_name(action, profile, *parts, *((f"attempt {n}",) if n else ())) for n in range(MAX_ATTEMPTS)]


def start_fresh(
    sfn: SFNClient, machine_arn: str, action: Action, profile: str, parts: tuple[str, ...], document: dict[str, Any]
) -> str:
    """Start the flow under the first of attempt_names(parts) not yet used and return its ARN; the
    same running execution is joined (same name and input), a closed one's name is never reused."""
    for name in attempt_names(action, profile, parts):
        try:
            return str(sfn.start_execution(stateMachineArn=machine_arn, name=name, input=canonical(document))["executionArn"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                raise
    raise RuntimeError(
        f"{action} of {profile}: {MAX_ATTEMPTS} executions of the same intent already closed; "
        "look at why they failed (their history) before starting another"
    )
