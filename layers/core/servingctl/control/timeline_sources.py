"""Where a start's marks come from: EC2 LaunchTime, ECS registeredAt, the task's createdAt,
pullStartedAt, pullStoppedAt and startedAt, and the containers' CloudWatch log streams (the
prefetch container's first and last line, vLLM's phase lines) under the task definition's awslogs
settings. Reading is best effort: a source that fails leaves its marks for the next round and never
fails the start.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import BotoCoreError, ClientError

from servingctl.control import aws
from servingctl.control.deps import Deps
from servingctl.control.timeline import merge, vllm_marks
from servingctl.store.models import Mark, StartRecord

if TYPE_CHECKING:
    from types_boto3_ecs.type_defs import TaskTypeDef

log = logging.getLogger(__name__)

# The prefetch container's own lines (infra/terraform/modules/serving-profile: prefetch_command).
PREFETCH_BEGIN, PREFETCH_END = "servingctl prefetch: syncing", "servingctl prefetch: done"
# AWS stamps at its own clock; a mark this far before the request still belongs to the start.
CLOCK_SKEW = timedelta(seconds=2)
_TASK_TIMES: tuple[tuple[str, Literal["createdAt", "pullStartedAt", "pullStoppedAt", "startedAt"]], ...] = (
    ("task_created", "createdAt"),
    ("pull_started", "pullStartedAt"),
    ("pull_stopped", "pullStoppedAt"),
    ("task_started", "startedAt"),
)


def _mark(name: str, at: datetime | None, source: str) -> list[Mark]:
    return [Mark(name=name, at=at, source=source)] if at is not None else []


def _instance_marks(deps: Deps, record: StartRecord, asg_name: str, cluster: str) -> list[Mark]:
    """The newest live instance of the pool: EC2 LaunchTime and ECS registeredAt."""
    live = [
        i.instance_id
        for i in aws.describe_asg(deps.autoscaling, asg_name).instances
        if i.lifecycle not in ("Terminating", "Terminated")
    ]
    if not live:
        return []
    launched = aws.launch_times(deps.ec2, live)
    if not launched:
        return []
    instance_id = max(launched, key=lambda i: launched[i])
    record.instance_id = instance_id
    registered = aws.container_instance_registered_at(deps.ecs, cluster, instance_id)
    return [
        *_mark("instance_launched", launched[instance_id], "ec2:DescribeInstances LaunchTime"),
        *_mark("instance_registered", registered, "ecs:DescribeContainerInstances registeredAt"),
    ]


def _task_marks(deps: Deps, record: StartRecord, cluster: str, service: str) -> tuple[list[Mark], TaskTypeDef | None]:
    """The newest live task of the service and its ECS timestamps."""
    tasks = aws.service_tasks(deps.ecs, cluster, service, "RUNNING")
    if not tasks:
        return [], None
    task = max(tasks, key=lambda t: t.get("createdAt") or datetime.min.replace(tzinfo=UTC))
    if record.task_arn != task["taskArn"]:
        # A replaced task starts its own marks: the stopped one's no longer tell this start's story.
        record.marks = [m for m in record.marks if not _from_task(m.name)]
        record.task_arn, record.log_streams = task["taskArn"], []
    marks = [m for name, key in _TASK_TIMES for m in _mark(name, task.get(key), f"ecs:DescribeTasks {key}")]
    return marks, task


def _from_task(name: str) -> bool:
    return name in dict(_TASK_TIMES) or name.startswith(("vllm_", "prefetch_"))


def _streams(deps: Deps, record: StartRecord, task: TaskTypeDef) -> list[tuple[str, str, bool]]:
    """(log group, stream, is the prefetch container) of the task's awslogs containers, kept on the
    record (a task definition never changes: it is read once per task)."""
    if not record.log_streams:
        containers = deps.ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"][
            "containerDefinitions"
        ]
        task_id = task["taskArn"].rsplit("/", 1)[-1]
        record.log_streams = [
            (options["awslogs-group"], f"{options['awslogs-stream-prefix']}/{c['name']}/{task_id}", not c.get("essential", True))
            for c in containers
            if (c.get("logConfiguration") or {}).get("logDriver") == "awslogs"
            and "awslogs-stream-prefix" in (options := c["logConfiguration"].get("options", {}))
        ]
    return record.log_streams


def _log_marks(deps: Deps, record: StartRecord, task: TaskTypeDef) -> list[Mark]:
    """vLLM's phases from the server container's stream, the prefetch run from its container's."""
    marks: list[Mark] = []
    since = task.get("createdAt")
    for group, stream, prefetch in _streams(deps, record, task):
        events = aws.log_events(deps.logs, group, stream, since)
        if prefetch:
            begin = next((at for at, line in events if PREFETCH_BEGIN in line), None)
            end = next((at for at, line in events if PREFETCH_END in line), None)
            marks += _mark("prefetch_started", begin, "logs:FilterLogEvents (prefetch container)")
            marks += _mark("prefetch_finished", end, "logs:FilterLogEvents (prefetch container)")
        else:
            marks += vllm_marks(events)
    return marks


def observe(deps: Deps, profile: str, pool: str, start_id: str, *extra: Mark) -> StartRecord | None:
    """Read every source, add what is new to the start's record (stamped now) and save it; the
    record (None when the start has none)."""
    record = deps.store.get_start(profile, start_id)
    if record is None:
        return None
    spec, asg_name = deps.profile(profile), deps.pool(pool).asg_name
    before = (record.instance_id, record.task_arn, len(record.marks), len(record.log_streams))
    marks: list[Mark] = list(extra)
    try:
        marks += _instance_marks(deps, record, asg_name, spec.cluster)
        task_marks, task = _task_marks(deps, record, spec.cluster, spec.service)
        marks += task_marks
        if task is not None and deps.logs is not None:
            marks += _log_marks(deps, record, task)
    except (ClientError, BotoCoreError) as exc:
        log.warning("start timeline: a source could not be read: %s", exc)
    fresh = [m for m in marks if m.at >= record.requested_at - CLOCK_SKEW]
    changed = merge(record, fresh, deps.clock.now())
    if changed or before != (record.instance_id, record.task_arn, len(record.marks), len(record.log_streams)):
        deps.store.put_start(record)
    return record


def finish(
    deps: Deps, profile: str, start_id: str, outcome: str, now: datetime, error: str | None = None, *extra: Mark
) -> StartRecord | None:
    """Record the start's outcome (READY or FAILED) with its last marks."""
    record = deps.store.get_start(profile, start_id)
    if record is None:
        return None
    merge(record, extra, now)
    record.outcome, record.ended_at, record.error = outcome, now, error
    return deps.store.put_start(record)
