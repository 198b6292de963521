"""The faults the local twin can inject (names shared by the CLI and the world), and the answers AWS
gives under them before moto sees the request (RequestFaults: throttling, Fargate without capacity,
a failed step).

The world's parts (servingctl_twin.autoscaling, ecs, ...) read the active faults for what AWS does
over time under them; the twin's own agents (its world, its harness), which name themselves with
WORLD_AGENT in their User-Agent, are never faulted.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servingctl_twin.world import World

# The User-Agent token of the twin's own agents (its world, its harness): never faulted, never lagged.
WORLD_AGENT = "servingctl-world"

# The launch failures capacity-unavailable=TYPE:CLASS plays, each worded as AWS does (servingctl_twin.autoscaling.groups).
LAUNCH_FAILURES: dict[str, str] = {
    "insufficient-capacity": "InsufficientInstanceCapacity, the default",
    "vcpu-limit": "VcpuLimitExceeded: the On-Demand vCPU quota, L-DB2E81BA for G types",
    "instance-limit": "InstanceLimitExceeded",
    "unsupported": "the type is not offered in the zone",
    "launch-template": "the launch template's instance profile is invalid",
    "ami": "the launch template's AMI does not exist",
}
FAULTS: dict[str, str] = {
    "capacity-unavailable": "every instance launch fails with InsufficientInstanceCapacity; Fargate RunTask places nothing "
    "(capacity-unavailable=TYPE: only launches and warm starts of that instance type fail; =TYPE:CLASS: with AWS's "
    "message of that class: " + ", ".join(f"{name} ({meaning})" for name, meaning in LAUNCH_FAILURES.items()) + ")",
    "task-crash": "every task stops soon after RUNNING: Essential container in task exited",
    "never-healthy": "the target never passes its health check",
    "protected-instance": "instances launch protected from scale-in",
    "smoke-test-hangs": "every smoke_test invocation hangs until the function's Timeout: Lambda kills it (Sandbox.Timedout)",
    "bench-task-exits": "every ECS benchmark task's container exits with code 1 at once (a broken image)",
    "smoke-fails-once": "the first GET /v1/models of each task answers 503 (simulator model server only)",
    "throttle-once": "the first call of each of a few APIs answers a throttling error",
    "roll-back-fails": "every RollBack of start_profile fails (its DynamoDB writes answer an internal error)",
    "prepare-stop-fails-once": "the next PrepareStop of stop_profile fails (its DynamoDB read answers an internal error)",
    "executions-lag": "ListExecutions and DescribeExecution lag as AWS says they may (eventually consistent): an execution "
    "started less than 5 s ago is missing (DescribeExecution: ExecutionDoesNotExist), one closed less than that ago "
    "still RUNNING; Step Functions' own reads (.sync) and status-change events do not lag (executions-lag=SECONDS: that lag)",
}

# Faults that may name what they apply to after "=": the pattern of the argument and what it is.
FAULT_ARGUMENTS: dict[str, tuple[str, str]] = {
    "capacity-unavailable": (
        r"^[a-z0-9-]+\.[a-z0-9]+(:(" + "|".join(LAUNCH_FAILURES) + "))?$",
        "an EC2 instance type, optionally :CLASS (" + ", ".join(LAUNCH_FAILURES) + "), e.g. g7e.2xlarge:vcpu-limit",
    ),
    "executions-lag": (r"^\d+(\.\d+)?$", "seconds, e.g. 5 or 2.5"),
}

# The executions-lag fault's lag when it names none (seconds of the twin's clock).
EXECUTIONS_LAG_S = 5.0


def check_fault(raw: str) -> str:
    """The fault as given when known (NAME, or NAME=ARG where the fault takes one); ValueError naming the allowed values."""
    name, sep, argument = raw.partition("=")
    if name not in FAULTS or (sep and name not in FAULT_ARGUMENTS):
        allowed = list(FAULTS) + [f"{n}=<{meaning}>" for n, (_, meaning) in FAULT_ARGUMENTS.items()]
        raise ValueError(f"fault: unknown {raw!r}; allowed values: {allowed}")
    if sep and not re.match(FAULT_ARGUMENTS[name][0], argument):
        raise ValueError(f"fault {name}: {argument!r} is not {FAULT_ARGUMENTS[name][1]}")
    return raw


def execution_lag_s(faults: frozenset[str]) -> float | None:
    """The read lag the executions-lag fault asks for (None when it is off)."""
    for fault in faults:
        name, sep, argument = fault.partition("=")
        if name == "executions-lag":
            return float(argument) if sep else EXECUTIONS_LAG_S
    return None


def check_faults(faults: Sequence[str], model_server: str) -> None:
    """ValueError naming an unknown fault, or one the model server cannot play."""
    for fault in faults:
        check_fault(fault)
    if "smoke-fails-once" in faults and model_server != "sim":
        raise ValueError("fault: smoke-fails-once needs the simulator model server (model_server 'sim')")


# (service signing name, operation) throttled once under throttle-once; each maps to its error shape.
THROTTLED = {
    ("lambda", "Invoke"): "TooManyRequestsException",
    ("ecs", "UpdateService"): "ThrottlingException",
    ("ecs", "DescribeTasks"): "ThrottlingException",
    ("autoscaling", "UpdateAutoScalingGroup"): "Throttling",
    ("autoscaling", "SetDesiredCapacity"): "Throttling",
    ("elasticloadbalancing", "DescribeTargetHealth"): "Throttling",
}

# profile_steps actions failed by a fault (fault -> action), answered as Lambda answers a handler that raised.
FAILED_STEPS = {"roll-back-fails": "roll_back", "prepare-stop-fails-once": "prepare_stop"}
STEP_FAILURE = (
    "An error occurred (InternalServerError) when calling the {operation} operation (reached max retries: 4): "
    "Internal server error"
)

# RunTask's failure reason when Fargate has no capacity for the task (ECS's words).
FARGATE_CAPACITY_UNAVAILABLE = "Capacity is unavailable at this time. Please try again later or in a different availability zone"


class RequestFaults:
    """The world's faults at the door of the moto server (a site's request hook)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.throttled: set[tuple[str, str]] = set()  # operations throttle-once has throttled

    def request_hook(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """Answer what AWS would under the active faults before moto does: Fargate RunTask without
        capacity (capacity-unavailable), the first call of each THROTTLED operation (throttle-once)."""
        if WORLD_AGENT in environ.get("HTTP_USER_AGENT", ""):
            return None
        if "capacity-unavailable" in self.world.faults:
            answer = self._no_fargate_capacity(environ)
            if answer is not None:
                return answer
        if self.world.faults & set(FAILED_STEPS):
            answer = self._failed_step(environ)
            if answer is not None:
                return answer
        if "throttle-once" not in self.world.faults:
            return None
        key = _operation(environ)
        if key not in THROTTLED:
            return None
        with self.world.lock:
            if key in self.throttled:
                return None
            self.throttled.add(key)
            self.world.log("throttled", f"{key[0]}:{key[1]}")
        code = THROTTLED[key]
        request_id = str(uuid.uuid4())
        if key[0] == "lambda":
            return (
                429,
                {"Content-Type": "application/json", "x-amzn-ErrorType": code, "x-amzn-RequestId": request_id},
                json.dumps(
                    {"Type": "User", "message": "Rate Exceeded.", "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded"}
                ).encode(),
            )
        if key[0] == "ecs":
            return (
                400,
                {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": request_id},
                json.dumps({"__type": code, "message": "Rate exceeded"}).encode(),
            )
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>Rate exceeded</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return 400, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body.encode()

    def _failed_step(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """A profile_steps invoke of a step a fault fails: Lambda's answer for a handler that raised
        (200, X-Amz-Function-Error: Unhandled, the error in the payload); "-once" faults then clear."""
        if _operation(environ) != ("lambda", "Invoke"):
            return None
        try:
            action = json.loads(_body(environ) or b"{}").get("action")
        except ValueError:
            return None
        with self.world.lock:
            fault = next((f for f in self.world.faults if FAILED_STEPS.get(f) == action), None)
            if fault is None:
                return None
            if fault.endswith("-once"):
                self.world.faults = self.world.faults - {fault}
            self.world.log("step-failed", f"{action} ({fault})")
        operation = "UpdateItem" if action == "roll_back" else "GetItem"
        error = {
            "errorMessage": STEP_FAILURE.format(operation=operation),
            "errorType": "ClientError",
            "requestId": str(uuid.uuid4()),
            "stackTrace": [],
        }
        headers = {
            "Content-Type": "application/json",
            "X-Amz-Function-Error": "Unhandled",
            "X-Amz-Executed-Version": "$LATEST",
            "x-amzn-RequestId": str(uuid.uuid4()),
        }
        return 200, headers, json.dumps(error).encode()

    def _no_fargate_capacity(self, environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes] | None:
        """RunTask on Fargate places nothing: a 200 answer with Failures, as ECS gives when Fargate has
        no capacity (the caller must look at Failures; Step Functions' .sync fails AmazonECS.Unknown)."""
        if _operation(environ) != ("ecs", "RunTask"):
            return None
        request = json.loads(_body(environ) or b"{}")
        if request.get("launchType") != "FARGATE":
            return None
        self.world.log("run-task-failed", f"{request.get('taskDefinition')}: no Fargate capacity")
        failure = {"arn": request.get("cluster", ""), "reason": FARGATE_CAPACITY_UNAVAILABLE}
        body = json.dumps({"tasks": [], "failures": [failure]}).encode()
        return 200, {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": str(uuid.uuid4())}, body


def _body(environ: dict[str, Any]) -> bytes:
    """The request body, put back for moto to read again."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _operation(environ: dict[str, Any]) -> tuple[str, str]:
    """(signing service, operation) of a request to the moto server."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    auth = environ.get("HTTP_AUTHORIZATION", "")
    scope = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", auth)
    service = scope.group(1) if scope else ""
    if target:
        return service, target.rsplit(".", 1)[-1]
    if re.match(r"^/2015-03-31/functions/[^/]+/invocations$", environ.get("PATH_INFO", "")):
        return "lambda", "Invoke"
    if environ.get("REQUEST_METHOD") == "POST" and service in ("autoscaling", "elasticloadbalancing"):
        body = _body(environ)
        action = re.search(rb"(?:^|&)Action=([A-Za-z]+)", body)
        return service, action.group(1).decode() if action else ""
    return service, ""
