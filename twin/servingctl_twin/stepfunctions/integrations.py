"""Step Functions' service integrations as AWS runs them, where moto's interpreter differs: the
PascalCase Parameters and output of `states:` Tasks (startExecution.sync:2), `ecs:runTask.sync` (PascalCase,
AmazonECS.Unknown when RunTask answers with Failures, States.TaskFailed on a non-zero exit code, the
task stopped with its execution), a caught States.* error carried on by a Fail state or a Map item,
and each definition parsed once."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import botocore.session
from botocore import xform_name
from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent, FailureEventException
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import ResourceCondition
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_ecs import StateTaskServiceEcs
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import StateTaskServiceSfn
from moto.stepfunctions.parser.asl.component.state.fail import state_fail
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for

from servingctl_twin.patching import Patch, original


@functools.lru_cache(maxsize=64)
def _parse_tree(definition: str) -> Any:
    """The ANTLR parse tree of a definition (moto parses the whole definition again for every
    execution; the tree is only read)."""
    return original("AmazonStateLanguageParser.parse")(definition)[1]


def _parse_definition(definition: str) -> tuple[Any, Any]:
    """Parse each definition once (the slow ANTLR part); build fresh evaluation components every time."""
    tree = _parse_tree(definition)
    return Preprocessor().visit(tree), tree


def _sfn_operation(task: StateTaskServiceSfn, service: str | None, action: str | None) -> Any:
    """botocore's model of the Step Functions operation a states:* Task calls."""
    model = botocore.session.get_session().get_service_model(task._get_boto_service_name(service))
    operations = {xform_name(name): name for name in model.operation_names}
    return model.operation_model(operations[task._get_boto_service_action(action)])


def _sfn_normalise_parameters(
    self: StateTaskServiceSfn,
    parameters: dict[str, Any],
    boto_service_name: str | None = None,
    service_action_name: str | None = None,
) -> None:
    """AWS's PascalCase Parameters (StateMachineArn, Name, Input) to boto3's names, as Step Functions
    does: moto 5.2.5 left this step out, so `states:startExecution.sync:2` failed with KeyError."""
    original("StateTaskServiceSfn._normalise_parameters")(self, parameters, boto_service_name, service_action_name)
    shape = _sfn_operation(self, boto_service_name, service_action_name).input_shape
    if shape is not None:
        self._to_boto_request(parameters, shape)


def _sfn_normalise_response(
    self: StateTaskServiceSfn, response: Any, boto_service_name: str | None = None, service_action_name: str | None = None
) -> None:
    """boto3's answer back to AWS's PascalCase output (ExecutionArn, Status, Output), as the .sync
    integrations return it."""
    shape = _sfn_operation(self, boto_service_name, service_action_name).output_shape
    if shape is not None:
        self._from_boto_response(response, shape)


# The error Step Functions reports when RunTask answers with Failures under .sync / .waitForTaskToken.
ECS_RUN_TASK_FAILED = "AmazonECS.Unknown"


def _ecs_output(task: StateTaskServiceEcs, ecs: Any, answer: dict[str, Any], operation: str) -> dict[str, Any]:
    """An ECS answer as Step Functions outputs it: PascalCase names (TaskArn, Containers[].ExitCode) and
    times as epoch milliseconds (moto 5.2.5 left ECS answers camelCase, so .sync found no "Tasks")."""
    answer.pop("ResponseMetadata", None)
    task._from_boto_response(answer, ecs.meta.service_model.operation_model(operation).output_shape)
    converted: dict[str, Any] = json.loads(json.dumps(answer, default=lambda t: int(t.timestamp() * 1000)))
    return converted


def _ecs_eval_service_task(
    self: StateTaskServiceEcs, env: Any, resource_runtime_part: Any, normalised_parameters: dict[str, Any], state_credentials: Any
) -> None:
    """RunTask that placed nothing (Failures, no Tasks) fails the state with AmazonECS.Unknown and
    the failures as the cause, as Step Functions does for the .sync and callback patterns."""
    is_run_task = self._get_boto_service_action() == "run_task"
    if not is_run_task or self.resource.condition not in (ResourceCondition.Sync, ResourceCondition.WaitForTaskToken):
        original("StateTaskServiceEcs._eval_service_task")(
            self, env, resource_runtime_part, normalised_parameters, state_credentials
        )
        return
    # A botocore client of ECS: its operations are made at run time.
    ecs: Any = boto_client_for(region=resource_runtime_part.region, service="ecs", state_credentials=state_credentials)
    # AWS's PascalCase Parameters (Cluster, TaskDefinition, ...) to boto3's names, as for states: Tasks.
    self._to_boto_request(normalised_parameters, ecs.meta.service_model.operation_model("RunTask").input_shape)
    answer = ecs.run_task(**normalised_parameters)
    if answer.get("failures") or not answer.get("tasks"):
        cause = json.dumps({"Tasks": [], "Failures": answer.get("failures", [])})
        _fail_task(self, env, ECS_RUN_TASK_FAILED, cause)
    [placed] = answer["tasks"]
    described = ecs.describe_tasks(cluster=placed["clusterArn"], tasks=[placed["taskArn"]])
    env.stack.append(_ecs_output(self, ecs, described, "DescribeTasks"))


def _fail_task(task: StateTaskServiceEcs, env: Any, error: str, cause: str) -> None:
    """Fail the Task state with error and cause (a TaskFailed event, as Step Functions records it)."""
    raise FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=CustomErrorName(error) if not error.startswith("States.") else _CarriedErrorName(error),
            event_type=HistoryEventType.TaskFailed,
            event_details=EventDetails(  # type: ignore[typeddict-item]  # moto requires every key; an event has one
                taskFailedEventDetails=TaskFailedEventDetails(
                    error=error,
                    cause=cause,
                    resource=task._get_sfn_resource(),
                    resourceType=task._get_sfn_resource_type(),
                )
            ),
        )
    )


class _CarriedErrorName(ErrorName):
    """An error carried on by a Fail state's ErrorPath or out of a Map item: a caught States.TaskFailed
    (or States.Timeout) keeps its name, as in Step Functions; moto refused any "States." name there."""


# The error Step Functions reports when a .sync task's container exits with a non-zero code.
ECS_TASK_FAILED = "States.TaskFailed"


class _FollowedTask:
    """runTask.sync's follow of the task it started: called until the task STOPPED, stopped with the execution."""

    def __init__(self, task: StateTaskServiceEcs, env: Any, ecs: Any, submitted: dict[str, Any]) -> None:
        self.task, self.env, self.ecs, self.submitted = task, env, ecs, submitted

    def __call__(self) -> Any:
        """The task's description (PascalCase) once it STOPPED (None before); a container's non-zero
        exit code fails the state with States.TaskFailed and that description as the cause."""
        described = self.ecs.describe_tasks(cluster=self.submitted["ClusterArn"], tasks=[self.submitted["TaskArn"]])
        if described["tasks"][0]["lastStatus"] != "STOPPED":
            return None
        [task] = _ecs_output(self.task, self.ecs, described, "DescribeTasks")["Tasks"]
        if any(c.get("ExitCode") for c in task.get("Containers", [])):
            _fail_task(self.task, self.env, ECS_TASK_FAILED, json.dumps(task))
        return task

    def stop(self) -> None:
        """StopTask, as Step Functions does for a .sync task whose execution was stopped (what the
        ecs:StopTask of its .sync policy is for; it can stop only tasks it started). The reason's words
        are the twin's, after the one AWS Batch reports for a job whose execution was aborted."""
        execution = self.env.states.context_object.context_object_data["Execution"]["Id"]
        self.ecs.stop_task(
            cluster=self.submitted["ClusterArn"],
            task=self.submitted["TaskArn"],
            reason=f"The Task state in AWS Step Functions execution {execution} which was managing this resource was aborted",
        )


def _ecs_build_sync_resolver(
    self: StateTaskServiceEcs, env: Any, resource_runtime_part: Any, normalised_parameters: dict[str, Any], state_credentials: Any
) -> Callable[[], Any]:
    """runTask.sync as Step Functions does it: the task's description (PascalCase) once it STOPPED; a
    container's non-zero exit code fails the state with States.TaskFailed and that description as
    the cause (moto would succeed whatever the exit code)."""
    ecs: Any = boto_client_for(service="ecs", region=resource_runtime_part.region, state_credentials=state_credentials)
    [submitted] = env.stack.pop()["Tasks"]
    return _FollowedTask(self, env, ecs, submitted)


def _ecs_eval_sync(
    self: StateTaskServiceEcs,
    env: Any,
    sync_resolver: Callable[[], Any] | None,
    timeout_seconds: int | None,
    callback_endpoint: Any,
    heartbeat_endpoint: Any,
) -> Any:
    """Follow the task until it STOPPED; an execution stopped (StopExecution) meanwhile stops the task
    too (moto left it running)."""
    outcome = original("StateTaskServiceEcs._eval_sync")(
        self, env, sync_resolver, timeout_seconds, callback_endpoint, heartbeat_endpoint
    )
    if isinstance(sync_resolver, _FollowedTask) and isinstance(env.program_state(), ProgramStopped):
        sync_resolver.stop()
    return outcome


PATCHES = [
    # Parse each definition once (moto re-parses it for every execution: slow under load).
    Patch(
        "AmazonStateLanguageParser.parse", AmazonStateLanguageParser, "parse", ("definition",), staticmethod(_parse_definition)
    ),
    Patch("Preprocessor.visit", Preprocessor, "visit", ("self", "tree")),
    # states:startExecution.sync:2 takes PascalCase Parameters and outputs PascalCase, as AWS's.
    Patch(
        "StateTaskServiceSfn._normalise_parameters",
        StateTaskServiceSfn,
        "_normalise_parameters",
        ("self", "parameters", "boto_service_name", "service_action_name"),
        _sfn_normalise_parameters,
    ),
    Patch(
        "StateTaskServiceSfn._normalise_response",
        StateTaskServiceSfn,
        "_normalise_response",
        ("self", "response", "boto_service_name", "service_action_name"),
        _sfn_normalise_response,
    ),
    # ecs:runTask.sync: AmazonECS.Unknown on Failures, the task's description once STOPPED, States.TaskFailed on exit code.
    Patch(
        "StateTaskServiceEcs._eval_service_task",
        StateTaskServiceEcs,
        "_eval_service_task",
        ("self", "env", "resource_runtime_part", "normalised_parameters", "state_credentials"),
        _ecs_eval_service_task,
    ),
    Patch(
        "StateTaskServiceEcs._build_sync_resolver",
        StateTaskServiceEcs,
        "_build_sync_resolver",
        ("self", "env", "resource_runtime_part", "normalised_parameters", "state_credentials"),
        _ecs_build_sync_resolver,
    ),
    # ecs:runTask.sync: a stopped execution stops its task.
    Patch(
        "StateTaskServiceEcs._eval_sync",
        StateTaskServiceEcs,
        "_eval_sync",
        ("self", "env", "sync_resolver", "timeout_seconds", "callback_endpoint", "heartbeat_endpoint"),
        _ecs_eval_sync,
    ),
    # A caught States.TaskFailed (or States.Timeout) keeps its name through a Fail state's ErrorPath or out of a Map item.
    Patch("state_fail.CustomErrorName", state_fail, "CustomErrorName", ("error_name",), _CarriedErrorName),
    Patch("iteration_worker.CustomErrorName", iteration_worker, "CustomErrorName", ("error_name",), _CarriedErrorName),
]
