"""CloudWatch Logs as the awslogs driver of a task definition fills it: the prefetch container's lines
and the model server's output, shipped in batches to the log group Terraform's serving-profile module names."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servingctl_twin.ecs.scheduler import _Task
    from servingctl_twin.world import World

# Real seconds between two shipments of a container's new output lines to CloudWatch Logs.
LOG_SHIP_S = 0.2


def model_log_group(service: str) -> str:
    """The log group of a profile's containers, as Terraform's serving-profile module names it."""
    return f"/ecs/{service}"


class ContainerLogs:
    """The containers' log streams of the world's tasks."""

    def __init__(self, world: World) -> None:
        self.world = world

    def put(self, task: _Task, container: str, lines: Sequence[str]) -> None:
        """Write lines to the container's stream as the awslogs driver of its task definition would."""
        definition = self.world.b.ecs.describe_task_definition(task.task.task_definition_arn)
        # moto types the definitions' values as objects: they are the JSON RegisterTaskDefinition took.
        containers: list[Mapping[str, Any]] = list(definition.container_definitions)
        settings = next(c for c in containers if c["name"] == container)["logConfiguration"]["options"]
        group, stream = (
            settings["awslogs-group"],
            f"{settings['awslogs-stream-prefix']}/{container}/{task.arn.rsplit('/', 1)[-1]}",
        )
        stamp = int(time.time() * 1000)
        with contextlib.suppress(self.world.logs.exceptions.ResourceAlreadyExistsException):
            self.world.logs.create_log_stream(logGroupName=group, logStreamName=stream)
        self.world.logs.put_log_events(
            logGroupName=group, logStreamName=stream, logEvents=[{"timestamp": stamp, "message": line} for line in lines]
        )

    def ship(self, task: _Task, now: float, final: bool = False) -> None:
        """The model server's new complete output lines to the vllm container's stream."""
        server = task.server
        if server is None or server.log_path is None or (now < task.next_ship and not final):
            return
        task.next_ship = now + LOG_SHIP_S
        with server.log_path.open("rb") as output:
            output.seek(task.log_offset)
            chunk = output.read()
        complete = chunk if final else chunk[: chunk.rfind(b"\n") + 1]
        lines = [line for line in complete.decode("utf-8", "replace").splitlines() if line.strip()]
        task.log_offset += len(complete)
        if lines:
            self.put(task, "vllm", lines)
