"""Every touch of moto's internals that the local twin needs, pinned to moto 5.2.5.

moto emulates the AWS APIs but not AWS's behaviour over time: its Lambda without Docker echoes the
payload, target health is always `healthy`, an ECS service reports running = desired at once, a
ListTasks call ignores serviceName, an ASG launches InService instances synchronously and
DescribeScalingActivities is always empty, DescribeWarmPool lists no instance (moto keeps only the
warm pool's configuration); its Step Functions interpreter does not map the
PascalCase Parameters of `states:` Tasks (startExecution.sync:2) to boto3's names, and its
`ecs:runTask.sync` does not map them either, nor fail with AmazonECS.Unknown when RunTask answers
with Failures; and its StopExecution leaves the execution RUNNING until the state in flight ends,
where AWS answers ABORTED at once (the Task's result is then dropped); its DynamoDB, serving
requests in threads, lets a read see an item half-written by UpdateItem (DynamoDB writes an item
atomically). Its Step Functions also lacks AWS's quotas and read consistency: no execution ends at
25,000 history events, States.ALL catches States.DataLimitExceeded, a state's input after Parameters
is never measured, a payload of exactly 256 KiB is refused, and ListExecutions/DescribeExecution
always answer the latest state (the executions-lag fault makes them lag as AWS documents they may).
The twin's world
simulator plays those parts instead, through the accessors below. Nothing else in servingctl imports moto internals: when moto changes,
`check_moto()` (and tests/unit/local/test_moto_patches.py) fail loudly here, in one place.
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import random
import threading
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any

import botocore.session
import moto
from botocore import xform_name
from moto.autoscaling.models import Activity, AutoScalingBackend, FakeAutoScalingGroup, autoscaling_backends
from moto.autoscaling.responses import AutoScalingResponse
from moto.awslambda_simple.models import LambdaSimpleBackend, lambda_simple_backends
from moto.core.responses import ActionResult
from moto.dynamodb.responses import DynamoHandler
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import InstanceBackend
from moto.ecs.models import EC2ContainerServiceBackend, Service, Task, ecs_backends
from moto.elbv2.models import ELBv2Backend, FakeHealthStatus, FakeTargetGroup, elbv2_backends
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.s3.models import S3Backend, s3_backends
from moto.stepfunctions.parser.api import ExecutionFailedEventDetails, HistoryEventType, TaskFailedEventDetails
from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import StatesErrorNameType
from moto.stepfunctions.parser.asl.component.state import state as sfn_state
from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_lambda as sfn_state_task_lambda
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service as sfn_state_task_service
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventHistoryContext, EventManager
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.exceptions import ExecutionDoesNotExist
from moto.stepfunctions.responses import StepFunctionResponse
from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
from moto.stepfunctions.parser.asl.component.state.fail import state_fail
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEvent, FailureEventException
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.resource import ResourceCondition
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_ecs import StateTaskServiceEcs
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import StateTaskServiceSfn
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.api import ExecutionStatus
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication, Execution as SfnExecution
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

MOTO_VERSION = "5.2.5"

# attribute -> the parameter names its signature must have; check_moto() compares both.
PATCHED: dict[str, tuple[object, str, tuple[str, ...]]] = {
    "LambdaSimpleBackend.invoke": (
        LambdaSimpleBackend, "invoke", ("self", "function_name", "qualifier", "body", "headers", "response_headers")
    ),
    "FakeTargetGroup.health_for": (FakeTargetGroup, "health_for", ("self", "target", "ec2_backend")),
    "EC2ContainerServiceBackend.update_service": (
        EC2ContainerServiceBackend, "update_service", ("self", "service_properties")
    ),
    "EC2ContainerServiceBackend.run_task": (
        EC2ContainerServiceBackend,
        "run_task",
        ("self", "cluster_str", "task_definition_str", "count", "overrides", "started_by", "tags", "launch_type",
         "networking_configuration", "group", "platform_version", "capacity_provider_strategy"),
    ),
    "StateTaskServiceEcs._build_sync_resolver": (
        StateTaskServiceEcs, "_build_sync_resolver", ("self", "env", "resource_runtime_part", "normalised_parameters", "state_credentials")
    ),
    "EC2ContainerServiceBackend.list_tasks": (
        EC2ContainerServiceBackend,
        "list_tasks",
        ("self", "cluster_str", "container_instance", "family", "started_by", "service_name", "desiredStatus"),
    ),
    "FakeAutoScalingGroup.set_desired_capacity": (FakeAutoScalingGroup, "set_desired_capacity", ("self", "new_capacity")),
    "AutoScalingResponse.describe_scaling_activities": (AutoScalingResponse, "describe_scaling_activities", ("self",)),
    "AutoScalingResponse.describe_warm_pool": (AutoScalingResponse, "describe_warm_pool", ("self",)),
    "AmazonStateLanguageParser.parse": (AmazonStateLanguageParser, "parse", ("definition",)),
    "StateTaskServiceSfn._normalise_parameters": (
        StateTaskServiceSfn, "_normalise_parameters", ("self", "parameters", "boto_service_name", "service_action_name")
    ),
    "StateTaskServiceSfn._normalise_response": (
        StateTaskServiceSfn, "_normalise_response", ("self", "response", "boto_service_name", "service_action_name")
    ),
    "StateTaskServiceEcs._eval_service_task": (
        StateTaskServiceEcs, "_eval_service_task", ("self", "env", "resource_runtime_part", "normalised_parameters", "state_credentials")
    ),
    "SfnExecution.stop": (SfnExecution, "stop", ("self", "stop_date", "error", "cause")),
    "DynamoHandler.call_action": (DynamoHandler, "call_action", ("self",)),
    "state_fail.CustomErrorName": (state_fail, "CustomErrorName", ("error_name",)),
    "iteration_worker.CustomErrorName": (iteration_worker, "CustomErrorName", ("error_name",)),
    "BaseExecutionWorkerCommunication._reflect_execution_status": (
        BaseExecutionWorkerCommunication, "_reflect_execution_status", ("self",)
    ),
    "ExecutionWorker._get_evaluation_environment": (ExecutionWorker, "_get_evaluation_environment", ("self",)),
    "ErrorEqualsDecl._eval_body": (ErrorEqualsDecl, "_eval_body", ("self", "env")),
    "StateTask._eval_parameters": (StateTask, "_eval_parameters", ("self", "env")),
    "state.is_within_size_quota": (sfn_state, "is_within_size_quota", ("value",)),
    "state_task_service.is_within_size_quota": (sfn_state_task_service, "is_within_size_quota", ("value",)),
    "state_task_lambda.is_within_size_quota": (sfn_state_task_lambda, "is_within_size_quota", ("value",)),
    "StepFunctionResponse.describe_execution": (StepFunctionResponse, "describe_execution", ("self",)),
    "StepFunctionResponse.list_executions": (StepFunctionResponse, "list_executions", ("self",)),
}
# Internals read or called (not replaced) by the accessors below.
USED: dict[str, tuple[object, str, tuple[str, ...]]] = {
    "FakeAutoScalingGroup.replace_autoscaling_group_instances": (
        FakeAutoScalingGroup, "replace_autoscaling_group_instances", ("self", "count_needed", "propagated_tags")
    ),
    "Activity.__init__": (
        Activity,
        "__init__",
        ("self", "description", "cause", "auto_scaling_group", "activity_id", "start_time", "end_time", "status_code"),
    ),
    "Task.__init__": (
        Task,
        "__init__",
        (
            "self", "cluster", "task_definition", "container_instance_arn", "resource_requirements", "backend",
            "group", "launch_type", "overrides", "started_by", "tags", "networking_configuration",
            "platform_version", "capacity_provider_name",
        ),
    ),
    "EC2ContainerServiceBackend._calculate_task_resource_requirements": (
        EC2ContainerServiceBackend, "_calculate_task_resource_requirements", ("task_definition",)
    ),
    "FakeHealthStatus.__init__": (
        FakeHealthStatus, "__init__", ("self", "instance_id", "port", "health_port", "status", "reason", "description")
    ),
    "ThreadedMotoServer._server_entry": (ThreadedMotoServer, "_server_entry", ("self",)),
    # A warm pool's instances stop and start in EC2.
    "InstanceBackend.start_instances": (InstanceBackend, "start_instances", ("self", "instance_ids")),
    "InstanceBackend.stop_instances": (InstanceBackend, "stop_instances", ("self", "instance_ids")),
    "Preprocessor.visit": (Preprocessor, "visit", ("self", "tree")),
    "LambdaSimpleBackend.get_function": (LambdaSimpleBackend, "get_function", ("self", "function_name_or_arn", "qualifier")),
    "S3Backend.get_object": (
        S3Backend, "get_object", ("self", "bucket_name", "key_name", "version_id", "part_number", "return_delete_marker")
    ),
    "EventManager.add_event": (
        EventManager, "add_event", ("self", "context", "event_type", "event_details", "timestamp", "update_source_event_id")
    ),
    "EventHistoryContext.__init__": (EventHistoryContext, "__init__", ("self", "previous_event_id")),
}
_ORIGINALS: dict[str, Callable[..., Any]] = {}
_lock = threading.RLock()

# definition -> ANTLR parse tree: moto parses the whole definition again for every execution.
_parse_trees: dict[str, Any] = {}
# Lambda invoke router: (function_name, payload bytes) -> (payload bytes, function error or None).
LambdaRouter = Callable[[str, bytes], tuple[bytes, str | None]]
_lambda_router: LambdaRouter | None = None
# Called with each task RunTask placed (servingctl.local.ecs.tasks runs the ones it knows).
TaskRunner = Callable[[Task], None]
_task_runner: TaskRunner | None = None
# (target group ARN, target id) -> (state, reason, description), written by the world simulator.
_target_health: dict[tuple[str, str], tuple[str, str | None, str | None]] = {}
# ASG name -> scaling activities, newest first, written by the world simulator.
_activities: dict[str, list[Activity]] = {}
# ASG name -> instance id -> (moto's instance state, Warmed:* lifecycle state): the warm pool's
# instances, kept out of the group's instance list as AWS keeps them, written by the world simulator.
_warm: dict[str, dict[str, tuple[Any, str]]] = {}


class MotoVersionError(RuntimeError):
    """The installed moto is not the one these patches were written against."""


def check_moto() -> None:
    """Raise MotoVersionError unless moto is 5.2.5 and every patched/used attribute has its signature."""
    if moto.__version__ != MOTO_VERSION:
        raise MotoVersionError(f"servingctl.local.moto_patches is pinned to moto {MOTO_VERSION}, found {moto.__version__}")
    for label, (owner, attr, params) in {**PATCHED, **USED}.items():
        func = _ORIGINALS.get(label) or getattr(owner, attr, None)
        if func is None:
            raise MotoVersionError(f"moto {moto.__version__}: {label} is gone")
        found = tuple(inspect.signature(func).parameters)
        if found != params:
            raise MotoVersionError(f"moto {moto.__version__}: {label} has parameters {found}, expected {params}")


def apply() -> None:
    """Install every patch once (idempotent); check_moto() first."""
    with _lock:
        if _ORIGINALS:
            return
        check_moto()
        replacements = {
            "LambdaSimpleBackend.invoke": _lambda_invoke,
            "FakeTargetGroup.health_for": _health_for,
            "EC2ContainerServiceBackend.update_service": _update_service,
            "EC2ContainerServiceBackend.list_tasks": _list_tasks,
            "EC2ContainerServiceBackend.run_task": _run_task,
            "StateTaskServiceEcs._build_sync_resolver": _ecs_build_sync_resolver,
            "FakeAutoScalingGroup.set_desired_capacity": _set_desired_capacity,
            "AutoScalingResponse.describe_scaling_activities": _describe_scaling_activities,
            "AutoScalingResponse.describe_warm_pool": _describe_warm_pool,
            "AmazonStateLanguageParser.parse": staticmethod(_parse_definition),
            "StateTaskServiceSfn._normalise_parameters": _sfn_normalise_parameters,
            "StateTaskServiceSfn._normalise_response": _sfn_normalise_response,
            "StateTaskServiceEcs._eval_service_task": _ecs_eval_service_task,
            "SfnExecution.stop": _stop_execution,
            "DynamoHandler.call_action": _dynamodb_call_action,
            "state_fail.CustomErrorName": _CarriedErrorName,
            "iteration_worker.CustomErrorName": _CarriedErrorName,
            "BaseExecutionWorkerCommunication._reflect_execution_status": _reflect_execution_status,
            "ExecutionWorker._get_evaluation_environment": _evaluation_environment,
            "ErrorEqualsDecl._eval_body": _error_equals,
            "StateTask._eval_parameters": _task_parameters,
            "state.is_within_size_quota": within_payload_quota,
            "state_task_service.is_within_size_quota": within_payload_quota,
            "state_task_lambda.is_within_size_quota": within_payload_quota,
            "StepFunctionResponse.describe_execution": _describe_execution,
            "StepFunctionResponse.list_executions": _list_executions,
        }
        for label, new in replacements.items():
            owner, attr, _ = PATCHED[label]
            _ORIGINALS[label] = getattr(owner, attr)
            setattr(owner, attr, new)


def is_applied() -> bool:
    """True once apply() has run."""
    return bool(_ORIGINALS)


def reset_world_state() -> None:
    """Forget target health, scaling activities and read lag (moto's own reset does not know them)."""
    set_execution_lag(None)
    _target_health.clear()
    _activities.clear()
    _warm.clear()


def set_lambda_router(router: LambdaRouter | None) -> None:
    """Route Lambda Invoke to router (None: moto's echo again)."""
    global _lambda_router
    _lambda_router = router


def set_task_runner(runner: TaskRunner | None) -> None:
    """Hand every task RunTask places to runner (None: tasks stay as moto made them)."""
    global _task_runner
    _task_runner = runner


# ---- the patches --------------------------------------------------------------------------------
def _lambda_invoke(
    self: LambdaSimpleBackend, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
) -> bytes | None:
    """Run the real handler through the router; Lambda marks handler errors with X-Amz-Function-Error."""
    if _lambda_router is None:
        return _ORIGINALS["LambdaSimpleBackend.invoke"](self, function_name, qualifier, body, headers, response_headers)
    self.get_function(function_name, qualifier)  # ResourceNotFoundException like Lambda for unknown names
    raw = body if isinstance(body, bytes) else (body or "").encode()
    payload, function_error = _lambda_router(function_name.split(":")[-1], raw)
    if function_error:
        response_headers["x-amz-function-error"] = function_error
    response_headers["x-amz-executed-version"] = "$LATEST"
    return payload


def _health_for(self: FakeTargetGroup, target: dict[str, Any], ec2_backend: Any) -> FakeHealthStatus:
    """Registered targets report what the world decided (initial until it says otherwise)."""
    registered = self.targets.get(target["Id"])
    if registered is None:
        return _ORIGINALS["FakeTargetGroup.health_for"](self, target, ec2_backend)
    state, reason, description = _target_health.get(
        (self.arn, target["Id"]), ("initial", "Elb.RegistrationInProgress", "Target registration is in progress")
    )
    return FakeHealthStatus(registered["Id"], registered["Port"], self.health_check_port, state, reason, description)


def _update_service(self: EC2ContainerServiceBackend, service_properties: dict[str, Any]) -> Service:
    """Change the desired count (and the health-check grace period, which moto drops) only:
    running/pending counts follow the world's tasks, not the request."""
    cluster = self._get_cluster(service_properties.get("cluster", "default"))
    service = self._get_service(cluster.name, service_properties["service"].split("/")[-1])
    running, pending = service.running_count, service.pending_count
    result = _ORIGINALS["EC2ContainerServiceBackend.update_service"](self, service_properties)
    service.running_count, service.pending_count = running, pending
    if service_properties.get("health_check_grace_period_seconds") is not None:
        service.health_check_grace_period_seconds = int(service_properties["health_check_grace_period_seconds"])
    for deployment in service.deployments:
        deployment["desiredCount"] = service.desired_count
    return result


def _list_tasks(
    self: EC2ContainerServiceBackend,
    cluster_str: str | None = None,
    container_instance: str | None = None,
    family: str | None = None,
    started_by: str | None = None,
    service_name: str | None = None,
    desiredStatus: str | None = None,  # noqa: N803 (moto's name)
) -> list[Task]:
    """Filter on serviceName (the task group) and default desiredStatus to RUNNING, like ECS."""
    tasks = _ORIGINALS["EC2ContainerServiceBackend.list_tasks"](
        self, cluster_str, container_instance, family, started_by, None, desiredStatus or "RUNNING"
    )
    if service_name:
        tasks = [t for t in tasks if t.group == f"service:{service_name.split('/')[-1]}"]
    return tasks


def _run_task(self: EC2ContainerServiceBackend, *args: Any, **kwargs: Any) -> list[Task]:
    """RunTask as moto does it, then the twin's runner starts what it knows how to run."""
    tasks: list[Task] = _ORIGINALS["EC2ContainerServiceBackend.run_task"](self, *args, **kwargs)
    if _task_runner is not None:
        for task in tasks:
            _task_runner(task)
    return tasks


def _set_desired_capacity(self: FakeAutoScalingGroup, new_capacity: int | None) -> None:
    """Record the desired capacity only: the world launches and terminates instances over time."""
    self.desired_capacity = self.min_size if new_capacity is None else new_capacity


def _describe_scaling_activities(self: AutoScalingResponse) -> ActionResult:
    """Return the activities the world recorded for the group, newest first."""
    name = self._get_param("AutoScalingGroupName")
    with _lock:
        found = list(_activities.get(name, [])) if name else [a for acts in _activities.values() for a in acts]
    return ActionResult({"Activities": found[: int(self._get_param("MaxRecords") or 100)]})


def _describe_warm_pool(self: AutoScalingResponse) -> ActionResult:
    """The warm pool's configuration (moto's) and its instances with their Warmed:* states (the world's)."""
    name = self._get_param("AutoScalingGroupName")
    config = self.autoscaling_backend.describe_warm_pool(group_name=name)
    with _lock:
        warm = list(_warm.get(name, {}).values())
    instances = [
        {"InstanceId": state.instance.id, "InstanceType": state.instance.instance_type, "AvailabilityZone": state.availability_zone,
         "LifecycleState": lifecycle, "HealthStatus": "Healthy"}
        for state, lifecycle in warm
    ]
    return ActionResult({"WarmPoolConfiguration": config, "Instances": instances})


def _parse_definition(definition: str) -> tuple[Any, Any]:
    """Parse each definition once (the slow ANTLR part); build fresh evaluation components every time."""
    tree = _parse_trees.get(definition)
    if tree is None:
        _, tree = _ORIGINALS["AmazonStateLanguageParser.parse"](definition)
        _parse_trees[definition] = tree
    return Preprocessor().visit(tree), tree


def _sfn_operation(task: StateTaskServiceSfn, service: str | None, action: str | None) -> Any:
    """botocore's model of the Step Functions operation a states:* Task calls."""
    model = botocore.session.get_session().get_service_model(task._get_boto_service_name(service))
    operations = {xform_name(name): name for name in model.operation_names}
    return model.operation_model(operations[task._get_boto_service_action(action)])


def _sfn_normalise_parameters(
    self: StateTaskServiceSfn, parameters: dict[str, Any], boto_service_name: str | None = None, service_action_name: str | None = None
) -> None:
    """AWS's PascalCase Parameters (StateMachineArn, Name, Input) to boto3's names, as Step Functions
    does: moto 5.2.5 left this step out, so `states:startExecution.sync:2` failed with KeyError."""
    _ORIGINALS["StateTaskServiceSfn._normalise_parameters"](self, parameters, boto_service_name, service_action_name)
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
        return _ORIGINALS["StateTaskServiceEcs._eval_service_task"](
            self, env, resource_runtime_part, normalised_parameters, state_credentials
        )
    ecs = boto_client_for(region=resource_runtime_part.region, service="ecs", state_credentials=state_credentials)
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
            event_details=EventDetails(
                taskFailedEventDetails=TaskFailedEventDetails(
                    error=error, cause=cause, resource=task._get_sfn_resource(), resourceType=task._get_sfn_resource_type(),
                )
            ),
        )
    )


class _CarriedErrorName(ErrorName):
    """An error carried on by a Fail state's ErrorPath or out of a Map item: a caught States.TaskFailed
    (or States.Timeout) keeps its name, as in Step Functions; moto refused any "States." name there."""


# The error Step Functions reports when a .sync task's container exits with a non-zero code.
ECS_TASK_FAILED = "States.TaskFailed"


def _ecs_build_sync_resolver(
    self: StateTaskServiceEcs, env: Any, resource_runtime_part: Any, normalised_parameters: dict[str, Any], state_credentials: Any
) -> Callable[[], Any]:
    """runTask.sync as Step Functions does it: the task's description (PascalCase) once it STOPPED; a
    container's non-zero exit code fails the state with States.TaskFailed and that description as
    the cause (moto would succeed whatever the exit code)."""
    ecs = boto_client_for(service="ecs", region=resource_runtime_part.region, state_credentials=state_credentials)
    [submitted] = env.stack.pop()["Tasks"]

    def resolver() -> Any:
        described = ecs.describe_tasks(cluster=submitted["ClusterArn"], tasks=[submitted["TaskArn"]])
        if described["tasks"][0]["lastStatus"] != "STOPPED":
            return None
        [task] = _ecs_output(self, ecs, described, "DescribeTasks")["Tasks"]
        if any(c.get("ExitCode") for c in task.get("Containers", [])):
            _fail_task(self, env, ECS_TASK_FAILED, json.dumps(task))
        return task

    return resolver


# ---- the server ---------------------------------------------------------------------------------
RequestHook = Callable[[dict[str, Any]], tuple[int, dict[str, str], bytes] | None]


class MotoServer(ThreadedMotoServer):
    """moto's threaded server with a hook that may answer a request first (faults like throttling)."""

    def __init__(self, host: str, port: int, request_hook: RequestHook | None = None) -> None:
        super().__init__(ip_address=host, port=port, verbose=False)
        self.request_hook = request_hook

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)

        def hooked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            answer = self.request_hook(environ) if self.request_hook else None
            if answer is None:
                token = _request_environ.set(environ)  # who asks (lagging reads)
                try:
                    return app(environ, start_response)
                finally:
                    _request_environ.reset(token)
            status, headers, body = answer
            start_response(f"{status} {HTTPStatus(status).phrase}", [*headers.items(), ("Content-Length", str(len(body)))])
            return [body]

        self._server = make_server(self._ip_address, self._port, hooked, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


# ---- accessors used by the world simulator ------------------------------------------------------
@dataclass(frozen=True)
class Backends:
    """moto's backends of one account and region."""

    ecs: EC2ContainerServiceBackend
    autoscaling: AutoScalingBackend
    elbv2: ELBv2Backend


def backends(account_id: str, region: str) -> Backends:
    """The ECS, Auto Scaling and ELBv2 backends of account_id/region."""
    return Backends(ecs_backends[account_id][region], autoscaling_backends[account_id][region], elbv2_backends[account_id][region])


def asg(b: Backends, name: str) -> FakeAutoScalingGroup:
    """The Auto Scaling group called name."""
    return b.autoscaling.autoscaling_groups[name]


def asg_tags(b: Backends, name: str) -> dict[str, str]:
    """The Auto Scaling group's tags, key -> value."""
    return {tag["Key"]: tag["Value"] for tag in asg(b, name).tags}


def object_exists(account_id: str, bucket: str, key: str) -> bool:
    """True when the S3 bucket of account_id holds an object under key (current version)."""
    return s3_backends[account_id]["aws"].get_object(bucket, key) is not None


def function_configuration(account_id: str, region: str, name: str) -> tuple[float, int, dict[str, str]]:
    """(Timeout, MemorySize, environment variables) of the Lambda function as configured now."""
    function = lambda_simple_backends[account_id][region].get_function(name)
    return float(function.timeout), int(function.memory_size), dict(function.environment_vars)


def asg_instances(b: Backends, name: str) -> list[tuple[str, str, bool]]:
    """(instance id, lifecycle state, protected from scale-in) of every instance of the group."""
    return [(s.instance.id, s.lifecycle_state, bool(s.protected_from_scale_in)) for s in asg(b, name).instance_states]


def launch_instance(b: Backends, name: str, *, protected: bool) -> str:
    """Launch one instance into the group in lifecycle state Pending; return its id."""
    group = asg(b, name)
    before = {s.instance.id for s in group.instance_states}
    group.replace_autoscaling_group_instances(1, group.get_propagated_tags())
    state = next(s for s in group.instance_states if s.instance.id not in before)
    state.lifecycle_state = "Pending"
    state.protected_from_scale_in = protected
    return state.instance.id


def warm_pool(b: Backends, name: str) -> Any:
    """The group's warm pool configuration (min_size, pool_state, instance_reuse_policy), None without one."""
    return asg(b, name).warm_pool


def warm_instances(name: str) -> dict[str, str]:
    """Instance id -> Warmed:* lifecycle state of the group's warm pool instances."""
    with _lock:
        return {i: lifecycle for i, (_, lifecycle) in _warm.get(name, {}).items()}


def launch_into_warm_pool(b: Backends, name: str) -> str:
    """Launch one instance of the group's launch template into its warm pool (Warmed:Pending); return its id."""
    instance_id = launch_instance(b, name, protected=False)
    to_warm_pool(b, name, instance_id)
    return instance_id


def to_warm_pool(b: Backends, name: str, instance_id: str) -> None:
    """Move an instance out of the group into its warm pool, Warmed:Pending (reuse on scale-in, or a new one)."""
    group = asg(b, name)
    state = next(s for s in group.instance_states if s.instance.id == instance_id)
    group.instance_states = [s for s in group.instance_states if s is not state]
    with _lock:
        _warm.setdefault(name, {})[instance_id] = (state, "Warmed:Pending")


def set_warm_lifecycle(b: Backends, name: str, instance_id: str, lifecycle_state: str) -> None:
    """Move a warm pool instance to a Warmed:* state; Warmed:Stopped stops it in EC2."""
    with _lock:
        state, _ = _warm[name][instance_id]
        _warm[name][instance_id] = (state, lifecycle_state)
    if lifecycle_state == "Warmed:Stopped":
        b.autoscaling.ec2_backend.stop_instances([instance_id])


def take_from_warm_pool(b: Backends, name: str, instance_id: str) -> None:
    """The group takes a warm instance into service: EC2 starts it, lifecycle Pending."""
    with _lock:
        state, _ = _warm[name].pop(instance_id)
    b.autoscaling.ec2_backend.start_instances([instance_id])
    state.lifecycle_state = "Pending"
    asg(b, name).instance_states.append(state)


def terminate_warm_instance(b: Backends, name: str, instance_id: str) -> None:
    """Terminate a warm pool instance in EC2 and forget it."""
    with _lock:
        _warm[name].pop(instance_id, None)
    b.autoscaling.ec2_backend.terminate_instances([instance_id])


def launch_template_id(b: Backends, name: str) -> str:
    """Id of the launch template the group's next launch uses."""
    return str(asg(b, name).ec2_launch_template.id)


def launch_template_data(b: Backends, name: str) -> dict[str, Any]:
    """The LaunchTemplateData of the latest version of the group's launch template."""
    return dict(asg(b, name).ec2_launch_template.latest_version().data or {})


def set_agent_connected(b: Backends, cluster: str, container_instance_arn: str, connected: bool) -> None:
    """The ECS agent of a container instance (dis)connects: it stops with a stopped instance and reconnects at start."""
    for instance in b.ecs.container_instances.get(cluster, {}).values():
        if instance.container_instance_arn == container_instance_arn:
            instance.agent_connected = connected


def set_lifecycle(b: Backends, name: str, instance_id: str, lifecycle_state: str) -> None:
    """Move one instance of the group to lifecycle_state (InService, Terminating, ...)."""
    for state in asg(b, name).instance_states:
        if state.instance.id == instance_id:
            state.lifecycle_state = lifecycle_state


def terminate_instance(b: Backends, name: str, instance_id: str) -> None:
    """Remove the instance from the group and terminate it in EC2."""
    group = asg(b, name)
    group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]
    b.autoscaling.ec2_backend.terminate_instances([instance_id])


def record_activity(
    b: Backends, name: str, *, description: str, cause: str, status_code: str, status_message: str | None = None
) -> None:
    """Add a scaling activity (Successful, Failed, InProgress...) to the group's history."""
    now = datetime.now(timezone.utc)
    activity = Activity(description, cause, asg(b, name), start_time=now, end_time=now, status_code=status_code)
    activity.status_message = status_message  # serialised as StatusMessage
    activity.progress = 100
    activity.details = "{}"
    with _lock:
        _activities.setdefault(name, []).insert(0, activity)


def services(b: Backends) -> list[Service]:
    """Every ECS service (all clusters)."""
    return list(b.ecs.services.values())


def service_tasks(b: Backends, service: Service) -> list[Task]:
    """Every task of the service, stopped ones included."""
    group = f"service:{service.name}"
    return [t for t in b.ecs.tasks.get(service.cluster_name, {}).values() if t.group == group]


def create_service_task(b: Backends, service: Service, container_instance_arn: str, capacity_provider: str) -> Task:
    """Place a new task of the service on the container instance, in PROVISIONING, with an awsvpc ENI."""
    cluster = b.ecs.clusters[service.cluster_name]
    task_definition = b.ecs.describe_task_definition(service.task_definition)
    network = getattr(service, "network_configuration", None)
    task = Task(
        cluster,
        task_definition,
        container_instance_arn,
        b.ecs._calculate_task_resource_requirements(task_definition),
        backend=b.ecs,
        group=f"service:{service.name}",
        started_by=f"ecs-svc/{uuid.uuid4().int % 10**19}",
        networking_configuration=network,
        capacity_provider_name=capacity_provider,
        launch_type="EC2",
    )
    task.status = "PROVISIONING"
    task.desired_status = "RUNNING"
    task.created_at = datetime.now(timezone.utc)
    _address_in_subnet(task)
    b.ecs.tasks.setdefault(cluster.name, {})[task.task_arn] = task
    return task


def _address_in_subnet(task: Task) -> None:
    """Give the task's ENI an address of its subnet, as AWS does (moto draws one from 10.0.0.0/8 at
    random): the twin's subnets are loopback ranges, so the task's model server can listen there."""
    details = {d["name"]: d for a in task.attachments for d in a.get("details", [])}
    if "networkInterfaceId" not in details:
        return
    ec2 = ec2_backends[task._account_id][task.region_name]
    eni = ec2.get_network_interface(details["networkInterfaceId"]["value"])
    network = ipaddress.IPv4Network(eni.subnet.cidr_block)
    taken = {e.private_ip_address for e in ec2.enis.values() if e is not eni}
    free = [str(h) for h in network.hosts() if str(h) not in taken]
    eni.private_ip_address = random.choice(free)
    details["privateIPv4Address"]["value"] = eni.private_ip_address


def task_container_definition(task: Task) -> dict[str, Any]:
    """The task definition's (first) container definition, as registered (camelCase)."""
    definition: dict[str, Any] = task._backend.describe_task_definition(task.task_definition_arn).container_definitions[0]
    return definition


def task_ip(task: Task) -> str | None:
    """The private IPv4 address of the task's ENI (awsvpc), None without one."""
    for attachment in task.attachments:
        for detail in attachment.get("details", []):
            if detail["name"] == "privateIPv4Address":
                return str(detail["value"])
    return None


def set_task_status(
    task: Task, last_status: str, *, stopped_reason: str | None = None, stop_code: str | None = None, exit_code: int | None = None
) -> None:
    """Move the task (and its container) to last_status; STOPPED records the reason like ECS."""
    task.status = last_status
    now = datetime.now(timezone.utc)
    for container in task.containers:
        container.last_status = last_status
        if exit_code is not None:
            container.exitCode = exit_code
    if last_status == "RUNNING":
        task.started_at = now
    if last_status in ("DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"):
        task.desired_status = "STOPPED"
        if stopped_reason is not None:
            task.stopped_reason = stopped_reason
        if stop_code is not None:
            task.stop_code = stop_code
        if last_status == "STOPPED":
            task.stopped_at = now


def set_service_counts(service: Service, *, running: int, pending: int) -> None:
    """Set the service's running and pending counts (and its primary deployment's)."""
    service.running_count, service.pending_count = running, pending
    for deployment in service.deployments:
        deployment["runningCount"], deployment["pendingCount"] = running, pending
        deployment["desiredCount"] = service.desired_count


def set_target_health(target_group_arn: str, target_id: str, state: str, reason: str | None = None, description: str | None = None) -> None:
    """Decide what DescribeTargetHealth reports for a registered target."""
    _target_health[(target_group_arn, target_id)] = (state, reason, description)


def target_ids(b: Backends, target_group_arn: str) -> set[str]:
    """Ids of the targets registered in the target group."""
    return set(b.elbv2.target_groups[target_group_arn].targets)


def clear_target_health(target_group_arn: str, target_id: str) -> None:
    """Forget the world's decision for a target (after it is deregistered)."""
    _target_health.pop((target_group_arn, target_id), None)


# moto's UpdateItem creates the item from its key, then applies the expression: a GetItem between the
# two sees an item of keys alone. DynamoDB writes an item atomically; one request at a time does too.
_dynamodb_lock = threading.Lock()


def _dynamodb_call_action(self: DynamoHandler) -> Any:
    with _dynamodb_lock:
        return _ORIGINALS["DynamoHandler.call_action"](self)


def _stop_execution(self: SfnExecution, stop_date: datetime, error: str | None, cause: str | None) -> None:
    """StopExecution as AWS does it: ABORTED at once (moto's interpreter still halts at its next state)."""
    _ORIGINALS["SfnExecution.stop"](self, stop_date, error, cause)
    if self.exec_status == ExecutionStatus.RUNNING:
        self.exec_status = ExecutionStatus.ABORTED
        self.stop_date = stop_date


def _reflect_execution_status(self: BaseExecutionWorkerCommunication) -> None:
    """An execution already closed (ABORTED by StopExecution, FAILED at the history limit) keeps that
    status and stop date when its interpreter ends later."""
    if self.execution.exec_status != ExecutionStatus.RUNNING:
        return
    _ORIGINALS["BaseExecutionWorkerCommunication._reflect_execution_status"](self)


# ---- Step Functions quotas ----------------------------------------------------------------------
# The history quota. AWS, "Avoid reaching the history quota" (docs.aws.amazon.com/step-functions/latest/
# dg/bp-history-limit.html): a hard quota of 25,000 events; at 24,999 events the execution waits for
# the next one: event 25,000 is ExecutionSucceeded (it succeeds) or, whatever else was due, an
# ExecutionFailed event (it fails). The error and cause as AWS records them, no Catch run, event
# 25,000 pointing at 24,999: an AWS history quoted in floci-io/floci#2734, the output in loads/ardere#86.
HISTORY_LIMIT = 25_000
HISTORY_LIMIT_ERROR = "States.Runtime"
HISTORY_LIMIT_CAUSE = f"The execution reached the maximum number of history events ({HISTORY_LIMIT})."
# The payload quota: "Maximum input or output size for a task, state, or execution: 256 KiB of data as
# a UTF-8 encoded string" (Step Functions service quotas); a payload of exactly that size is within it.
PAYLOAD_LIMIT_BYTES = 256 * 1024
DATA_LIMIT_EXCEEDED = "States.DataLimitExceeded"


class _CappedEventManager(EventManager):
    """One execution's history, ended at HISTORY_LIMIT as AWS ends it: event 25,000 is ExecutionFailed
    unless it is ExecutionSucceeded; the execution is FAILED from that moment (DescribeExecution,
    ListExecutions), its interpreter halts at once (Wait states wake up), and nothing is recorded after."""

    def __init__(self, env: Any, execution: SfnExecution, logging_session: Any) -> None:
        super().__init__(cloud_watch_logging_session=logging_session)
        self._env, self._execution = env, execution
        self._count = 0
        self._capped = False
        self._cap_lock = threading.Lock()

    def add_event(
        self, context: Any, event_type: Any, event_details: Any = None, timestamp: Any = None, update_source_event_id: bool = True
    ) -> int:
        """Record the event, or the ExecutionFailed that takes its place at the limit (none past it)."""
        with self._cap_lock:
            if self._capped:
                return HISTORY_LIMIT
            self._count += 1
            if self._count < HISTORY_LIMIT or event_type == HistoryEventType.ExecutionSucceeded:
                return int(super().add_event(context, event_type, event_details, timestamp, update_source_event_id))
            self._capped = True
            details = ExecutionFailedEventDetails(error=HISTORY_LIMIT_ERROR, cause=HISTORY_LIMIT_CAUSE)
            event_id = int(super().add_event(
                EventHistoryContext(previous_event_id=HISTORY_LIMIT - 1), HistoryEventType.ExecutionFailed,
                EventDetails(executionFailedEventDetails=details),
            ))
        execution = self._execution
        execution.error, execution.cause = HISTORY_LIMIT_ERROR, HISTORY_LIMIT_CAUSE
        execution.stop_date = datetime.now(timezone.utc)
        execution.exec_status = ExecutionStatus.FAILED
        self._env.set_error(details)
        return event_id


def _evaluation_environment(self: ExecutionWorker) -> Any:
    """moto's evaluation environment of an execution, its history capped at HISTORY_LIMIT events (the
    Map iterations' frames share the root's event manager, so they count in the same history)."""
    env = _ORIGINALS["ExecutionWorker._get_evaluation_environment"](self)
    execution = self._execution_communication.execution
    env.event_manager = _CappedEventManager(env, execution, self._cloud_watch_logging_session)
    return env


def within_payload_quota(value: Any) -> bool:
    """True when the JSON text of value (value itself when a string) is at most 256 KiB in UTF-8 (moto
    refused a payload of exactly 256 KiB)."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_text)
    return len(text.encode("utf-8")) <= PAYLOAD_LIMIT_BYTES


def _json_text(value: Any) -> str:
    """A value JSON has no type for, as the interpreter writes it ($$.Execution.StartTime: ISO text)."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _task_parameters(self: StateTask, env: Any) -> dict[str, Any]:
    """A Task's effective input after Parameters, over the payload quota, fails the state with
    States.DataLimitExceeded ("When, after Parameters processing, the input of a state is larger than
    the payload size quota", Step Functions' error names); moto never measured it. The cause's wording
    is the twin's: AWS documents the condition, not its text."""
    parameters: dict[str, Any] = _ORIGINALS["StateTask._eval_parameters"](self, env)
    if within_payload_quota(parameters):
        return parameters
    cause = f"The state/task '{self.name}' has an input with a size exceeding the maximum number of bytes service limit."
    raise FailureEventException(
        failure_event=FailureEvent(
            env=env,
            error_name=StatesErrorName(typ=StatesErrorNameType.StatesStatesDataLimitExceeded),
            event_type=HistoryEventType.TaskFailed,
            event_details=EventDetails(taskFailedEventDetails=TaskFailedEventDetails(error=DATA_LIMIT_EXCEEDED, cause=cause)),
        )
    )


def _error_equals(self: ErrorEqualsDecl, env: Any) -> None:
    """States.ALL matches every error but States.DataLimitExceeded, "a terminal error that can't be
    caught by the States.ALL error type" (Step Functions' error names): only a Retrier or Catcher that
    names it matches it (moto's States.ALL matched it too)."""
    error_name = env.stack[-1]
    if isinstance(error_name, ErrorName) and error_name.error_name == DATA_LIMIT_EXCEEDED:
        env.stack.pop()
        env.stack.append(any(name.error_name == DATA_LIMIT_EXCEEDED for name in self.error_names))
        return
    _ORIGINALS["ErrorEqualsDecl._eval_body"](self, env)


# ---- eventual consistency of the read APIs ------------------------------------------------------
# ListExecutions and DescribeExecution: "This operation is eventually consistent. The results are best
# effort and may not reflect very recent updates and changes." (Step Functions API reference of each).
# With a lag set (the executions-lag fault), a public read does not see an execution started less than
# the lag ago (DescribeExecution: ExecutionDoesNotExist) and sees one that closed less than the lag ago
# still RUNNING. Step Functions' own reads are not public: the interpreter's (.sync integrations; its
# boto clients sign with access key "ak", moto's boto_client_for) and the twin's AWS-side agents (the
# world, EventBridge's status-change events), which name themselves in their User-Agent.
INTERPRETER_ACCESS_KEY = "ak"
_lag: tuple[timedelta, str] | None = None  # (lag, User-Agent token of the exempt agents)
_request_environ: ContextVar[dict[str, Any] | None] = ContextVar("servingctl_moto_request", default=None)


def set_execution_lag(seconds: float | None, exempt_agent: str = "") -> None:
    """Make public ListExecutions/DescribeExecution lag by seconds (None: consistent again); requests
    whose User-Agent holds exempt_agent, and the interpreter's own, see the latest state."""
    global _lag
    _lag = None if seconds is None else (timedelta(seconds=seconds), exempt_agent)


def _public_lag() -> timedelta | None:
    """The lag the current request sees (None: consistent)."""
    lag, environ = _lag, _request_environ.get()
    if lag is None or environ is None:
        return None
    if f"Credential={INTERPRETER_ACCESS_KEY}/" in environ.get("HTTP_AUTHORIZATION", ""):
        return None
    if lag[1] and lag[1] in environ.get("HTTP_USER_AGENT", ""):
        return None
    return lag[0]


def _utc(moment: datetime) -> datetime:
    """moto stamps StopExecution with a naive UTC time, everything else with an aware one."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _lagged(execution: Any, lag: timedelta, now: datetime) -> tuple[str, datetime | None] | None:
    """(status, stop date) a lagging read shows for the execution; None while it is not visible yet."""
    if now - _utc(execution.start_date) < lag:
        return None
    stopped = execution.stop_date
    if execution.status != ExecutionStatus.RUNNING and stopped is not None and now - _utc(stopped) < lag:
        return ExecutionStatus.RUNNING.value, None
    return str(execution.status), execution.stop_date


def _describe_execution(self: StepFunctionResponse) -> ActionResult:
    """DescribeExecution, lagging under the executions-lag fault."""
    lag = _public_lag()
    if lag is None:
        return _ORIGINALS["StepFunctionResponse.describe_execution"](self)
    arn = self._get_param("executionArn")
    seen = _lagged(self.stepfunction_backend.describe_execution(arn), lag, datetime.now(timezone.utc))
    if seen is None:
        raise ExecutionDoesNotExist("Execution Does Not Exist: '" + arn + "'")
    answer: ActionResult = _ORIGINALS["StepFunctionResponse.describe_execution"](self)
    result = answer.result
    assert isinstance(result, dict)
    if seen[0] == ExecutionStatus.RUNNING.value and result["status"] != ExecutionStatus.RUNNING.value:
        for key in ("stopDate", "output", "outputDetails", "error", "cause"):
            result.pop(key, None)
        result["status"] = seen[0]
    return answer


def _list_executions(self: StepFunctionResponse) -> ActionResult:
    """ListExecutions, lagging under the executions-lag fault (one page: the twin keeps few executions)."""
    lag = _public_lag()
    if lag is None:
        return _ORIGINALS["StepFunctionResponse.list_executions"](self)
    arn, wanted = self._get_param("stateMachineArn"), self._get_param("statusFilter")
    machine = self.stepfunction_backend.describe_state_machine(arn)
    now, items = datetime.now(timezone.utc), []
    for execution in sorted(machine.executions, key=lambda e: e.start_date, reverse=True):
        seen = _lagged(execution, lag, now)
        if seen is None or (wanted and seen[0] != wanted):
            continue
        item = {"executionArn": execution.execution_arn, "name": execution.name, "startDate": execution.start_date,
                "stateMachineArn": machine.arn, "status": seen[0]}
        if seen[1] is not None:
            item["stopDate"] = seen[1]
        items.append(item)
    return ActionResult({"executions": items})
