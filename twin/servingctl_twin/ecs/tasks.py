"""ECS's part for standalone tasks on the twin: a task of a runnable task definition runs as a local process.

moto records RunTask and nothing more. The twin runs the benchmark task (template.yaml's
BenchTaskDefinition) as ECS would run its container: infra/bench's image command (its Dockerfile's
ENTRYPOINT, with this interpreter and the servingctl package as the image holds them), the task
definition's environment with the RunTask container overrides applied, and the task moving
PROVISIONING -> RUNNING -> STOPPED with the container's exit code and ECS's stop reason. The output
goes to the task's log file (its awslogs stream). With IAM on, the process runs under its task
role (servingctl_twin.iam.task_iam): a call the role does not allow is refused as AWS would, and every
call goes to the twin's recorder once the task stops.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from servingctl_twin import iam
from servingctl_twin.ecs.patches import set_task_status, task_container_definition
from servingctl_twin.iam.task_iam import ENV as TASK_IAM_ENV
from servingctl_twin.iam.task_iam import TaskIam, recorded_calls

# What ECS reports when the essential container exits (whatever its code).
STOPPED_REASON = "Essential container in task exited"
STOP_CODE = "EssentialContainerExited"
# StopTask's: the stop code of a task stopped by a StopTask call, and docker stop's grace before
# SIGKILL (ECS_CONTAINER_STOP_TIMEOUT's default, 30 s).
USER_STOP_CODE = "UserInitiated"
STOP_TIMEOUT_S = 30.0
# The interpreter's own variables a container process needs on this machine (the image has its own).
INHERITED_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL")


def image_command(dockerfile: Path) -> list[str]:
    """The ENTRYPOINT of a Dockerfile (exec form), with `python` as this interpreter."""
    found = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", dockerfile.read_text(), re.M)
    if found is None:
        raise ValueError(f'{dockerfile}: no ENTRYPOINT in exec form (["python", ...])')
    command: list[str] = json.loads(found.group(1))
    return [sys.executable if command[0] == "python" else command[0], *command[1:]]


def container_environment(definition: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, str]:
    """The container's variables: the task definition's, then RunTask's containerOverrides for it."""
    variables = {v["name"]: v["value"] for v in definition.get("environment") or []}
    for override in overrides.get("containerOverrides") or []:
        if override.get("name") == definition["name"]:
            variables |= {v["name"]: v["value"] for v in override.get("environment") or []}
    return variables


class TaskRunner:
    """Runs the tasks of the families it knows (family -> command) as processes; ignores the others."""

    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        runtime_env: Mapping[str, str],
        logdir: Path,
        faults: Callable[[], frozenset[str]] = frozenset,
        roles: Mapping[str, TaskIam] | None = None,
        record: Callable[[iam.Call], None] | None = None,
    ) -> None:
        """`roles` (family -> its task role): run those tasks under IAM, their calls given to `record`."""
        self.commands = {family: list(command) for family, command in commands.items()}
        self.runtime_env = dict(runtime_env)
        self.logdir = logdir
        self.faults = faults
        self.roles = dict(roles or {})
        self.record = record
        self.exit_codes: dict[str, int] = {}  # task ARN -> exit code, once stopped
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._stopped: dict[str, str] = {}  # task ARN -> the reason StopTask gave
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopping = False

    def __call__(self, task: Any) -> None:
        """RunTask placed `task`: run it if its family is one of ours (called inside moto's RunTask)."""
        family = task.task_definition_arn.rsplit("/", 1)[1].split(":")[0]
        if family not in self.commands:
            return
        set_task_status(task, "PROVISIONING")
        thread = threading.Thread(target=self._run, args=(task, family), name=f"ecs-task-{task.id[:8]}", daemon=True)
        with self._lock:
            if self._stopping:
                return
            self._threads.append(thread)
        thread.start()

    def _run(self, task: Any, family: str) -> None:
        definition = task_container_definition(task)
        command = self.commands[family]
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ} | self.runtime_env
        env |= container_environment(definition, task.overrides)
        self.logdir.mkdir(parents=True, exist_ok=True)
        calls = self.logdir / f"{definition['name']}-{task.id}.iam-calls"
        role = self.roles.get(family)
        if "bench-task-exits" in self.faults():  # a broken image: the container exits 1 at once, calling nothing
            command = [sys.executable, "-c", "raise SystemExit(1)"]
        elif role is not None:  # `python -m MODULE ...` run under the task role
            if command[1:2] != ["-m"]:
                raise ValueError(f"{family}: the twin runs a task under its role as `python -m MODULE` only, not {command}")
            command = [command[0], "-m", "servingctl_twin.iam.task_iam", *command[1:]]
            env[TASK_IAM_ENV] = replace(role, calls_path=str(calls)).to_env()
        with open(self.logdir / f"{definition['name']}-{task.id}.log", "ab") as log:
            with self._lock:
                if self._stopping or task.desired_status == "STOPPED":  # stopped (StopTask) before its container started
                    return
                process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                self._processes[task.task_arn] = process
            set_task_status(task, "RUNNING")
            code = process.wait()
        if self.record is not None:
            for call in recorded_calls(calls):
                self.record(call)
        # Docker reports a container ended by a signal as 128 + the signal's number (143 for SIGTERM).
        code = 128 - code if code < 0 else code
        with self._lock:
            self._processes.pop(task.task_arn, None)
            self.exit_codes[task.task_arn] = code
            stopped = self._stopped.pop(task.task_arn, None)
        if stopped is not None:
            set_task_status(task, "STOPPED", stopped_reason=stopped, stop_code=USER_STOP_CODE, exit_code=code)
        else:
            set_task_status(task, "STOPPED", stopped_reason=STOPPED_REASON, stop_code=STOP_CODE, exit_code=code)

    def stop_task(self, task: Any, reason: str) -> bool:
        """StopTask of a running task: STOPPING, its process sent SIGTERM and SIGKILL if it has not
        exited STOP_TIMEOUT_S later (docker stop); STOPPED when the process ends (False: not running here)."""
        with self._lock:
            process = self._processes.get(task.task_arn)
            if process is None:
                return False
            self._stopped[task.task_arn] = reason
        set_task_status(task, "STOPPING", stopped_reason=reason, stop_code=USER_STOP_CODE)
        process.terminate()
        killer = threading.Timer(STOP_TIMEOUT_S, process.kill)
        killer.daemon = True
        killer.start()
        return True

    def stop(self) -> None:
        """Kill every running task's process and wait for their threads."""
        with self._lock:
            self._stopping = True
            processes = list(self._processes.values())
            threads = list(self._threads)
        for process in processes:
            process.kill()
        for thread in threads:
            thread.join(10)
