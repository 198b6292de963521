"""Execution names of the start/stop flows: <action>-<profile>-<token>, and finding a profile's running one.

Step Functions returns the running execution instead of starting a second one when StartExecution
is called again with the same name and input, so whoever starts a flow (the API, the sweep) derives
the token from what should make the call "the same one".
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

Action = Literal["start", "stop"]
TOKEN_CHARS = 10  # "start-" + a 63-character profile name + "-" + 10 stays within Step Functions' 80


def name_prefix(action: Action, profile: str) -> str:
    """Execution names of a profile's starts or stops begin with this."""
    return f"{action}-{profile}-"


def execution_name(action: Action, profile: str, *parts: str) -> str:
    """<action>-<profile>-<token>, the token a hash of parts (the same parts give the same name)."""
    return name_prefix(action, profile) + hashlib.sha256("|".join(parts).encode()).hexdigest()[:TOKEN_CHARS]


def is_execution_of(name: str, action: Action, profile: str) -> bool:
    """True when an execution name belongs to this profile's starts or stops (not to a longer profile name)."""
    prefix = name_prefix(action, profile)
    return name.startswith(prefix) and "-" not in name[len(prefix):]


def running_execution(sfn: Any, machine_arn: str, action: Action, profile: str) -> dict[str, Any] | None:
    """The profile's RUNNING execution of the machine (a list_executions item), None when there is none."""
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine_arn, statusFilter="RUNNING"):
        for execution in page["executions"]:
            if is_execution_of(execution["name"], action, profile):
                return execution
    return None


def canonical(document: dict[str, Any]) -> str:
    """The one JSON spelling of an execution input (Step Functions compares inputs byte for byte)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
