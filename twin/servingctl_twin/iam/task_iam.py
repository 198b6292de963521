"""An ECS task's process on the twin under its task role: `python -m servingctl_twin.iam.task_iam -m
MODULE ARG...` runs MODULE as `python -m` would, every AWS call it makes (from any thread) decided
by the task role's policy as IAM would, a refusal answered with AccessDenied, and each decided call
appended to a file the twin reads into its recorder when the task stops.

On AWS the task's code calls with the task role's credentials; moto accepts anything, so without
this a grant missing from BenchTaskRole would pass on the twin and fail in the cloud. The setup
(the role's statements, the twin's names, the calls file) comes in $SERVINGCTL_TWIN_TASK_IAM.
"""

from __future__ import annotations

import json
import os
import pickle
import runpy
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from servingctl_twin import iam

ENV = "SERVINGCTL_TWIN_TASK_IAM"


@dataclass(frozen=True)
class TaskIam:
    """What a task process needs to decide its calls: its role's policy, the twin's names, where to record."""

    caller: str  # the task definition's family: the name its calls are recorded under
    statements: tuple[tuple[str, iam.Statement], ...]
    account: str
    region: str
    partition_keys: Mapping[str, str]
    calls_path: str  # the file the process appends its calls to (the twin's runner sets one per task)
    # The roles the task may assume (role ARN -> its statements): calls signed with their sessions.
    assumable: Mapping[str, tuple[tuple[str, dict[str, Any]], ...]] = field(default_factory=dict)
    # Their trust policies' statements (role ARN -> statements): the conditions an AssumeRole must meet.
    trusts: Mapping[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    def to_env(self) -> str:
        """The setup as the value of $SERVINGCTL_TWIN_TASK_IAM."""
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, value: str) -> TaskIam:
        """The setup from $SERVINGCTL_TWIN_TASK_IAM."""
        given = json.loads(value)
        return cls(
            **given
            | {
                "statements": tuple((name, statement) for name, statement in given["statements"]),
                "assumable": {
                    arn: tuple((n, st) for n, st in statements) for arn, statements in given.get("assumable", {}).items()
                },
                "trusts": {arn: tuple(statements) for arn, statements in given.get("trusts", {}).items()},
            }
        )


def recorded_calls(path: Path) -> Iterator[iam.Call]:
    """The calls a task process recorded, in order (none when it made none)."""
    if not path.exists():
        return
    with path.open("rb") as calls:
        while True:
            try:
                yield pickle.load(calls)
            except EOFError:
                return


class _TaskEnforcer(iam.Enforcer):
    """The task role's Enforcer inside the task's process: decides here, appends each call to the file."""

    def __init__(self, setup: TaskIam) -> None:
        def no_group(group: str) -> Any:
            raise LookupError(f"the twin's task processes know no Auto Scaling group ({group}): the task role names none")

        names = iam.Names(
            account=setup.account, region=setup.region, partition_keys=setup.partition_keys, asg_arn=no_group, asg_tags=no_group
        )
        policies = {setup.caller: iam.Policy(setup.statements)} | {
            arn: iam.Policy(st, tuple(setup.trusts.get(arn, ()))) for arn, st in setup.assumable.items()
        }
        super().__init__(policies, names, _object_exists)
        self.calls_path = setup.calls_path

    def record(self, call: iam.Call) -> None:
        """Append the call to the twin's file as well."""
        super().record(call)
        with open(self.calls_path, "ab") as calls:
            pickle.dump(call, calls)


def _object_exists(bucket: str, key: str) -> bool:
    """S3's own check of a missing key, made to moto unsigned (not a call of the task's code)."""
    endpoint = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
    return httpx.head(f"{endpoint}/{bucket}/{quote(key)}", timeout=30).status_code == 200


def main(argv: list[str]) -> None:
    """Decide every call of this process as the task role would, then run `-m MODULE ARG...`."""
    if len(argv) < 2 or argv[0] != "-m":
        raise SystemExit("usage: python -m servingctl_twin.iam.task_iam -m MODULE [ARG...]")
    setup = TaskIam.from_env(os.environ.pop(ENV))
    iam.activate(_TaskEnforcer(setup))
    iam.run_as(setup.caller)
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
