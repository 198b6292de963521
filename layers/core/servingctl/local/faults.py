"""The faults the local twin's world simulator can inject (names shared by the CLI and the world)."""

import re

# The launch failures capacity-unavailable=TYPE:CLASS plays, each worded as AWS does (servingctl.local.world).
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
