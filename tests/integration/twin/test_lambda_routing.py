"""Lambda invokes on the twin run the real handler code in-process, from Step Functions and the Invoke API.

Uses a throwaway repository root with one probe state machine and one handler, so the routing is
checked independently of the control plane's handlers.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator

import pytest

from servingctl_twin.twin import SSM_PATH, Twin, function_name

PROBE_ASL = {
    "Comment": "probe: call profile_steps with the input's action",
    "StartAt": "CallHandler",
    "States": {
        "CallHandler": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "${ProfileStepsFunctionArn}", "Payload": {"action.$": "$.action"}},
            "ResultSelector": {"result.$": "$.Payload"},
            "Retry": [
                {"ErrorEquals": ["Lambda.TooManyRequestsException"], "IntervalSeconds": 1, "MaxAttempts": 2, "BackoffRate": 1}
            ],
            "Catch": [{"ErrorEquals": ["PoolBusy"], "ResultPath": "$.caught", "Next": "NotePoolBusy"}],
            "End": True,
        },
        "NotePoolBusy": {"Type": "Pass", "End": True},
    },
}
HANDLER = textwrap.dedent(
    """
    import os
    import boto3


    class PoolBusy(Exception):
        pass


    def lambda_handler(event, context):
        action = event["action"]
        if action == "pool-busy":
            raise PoolBusy("pool g7e-2gpu is held by nemotron-nano")
        if action == "boom":
            raise ValueError("unexpected: no such thing")
        tables = boto3.client("dynamodb").list_tables()["TableNames"]
        return {
            "tables": tables,
            "table_env": os.environ["SERVINGCTL_TABLE"],
            "registry_env": os.environ["SERVINGCTL_REGISTRY"],
            "function": context.function_name,
            "remaining_ms": context.get_remaining_time_in_millis(),
        }
    """
)


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    root = tmp_path_factory.mktemp("repo")
    (root / "statemachine").mkdir()
    (root / "statemachine" / "probe.asl.json").write_text(json.dumps(PROBE_ASL))
    (root / "functions" / "profile_steps").mkdir(parents=True)
    (root / "functions" / "profile_steps" / "app.py").write_text(HANDLER)
    with Twin(repo_root=root, time_scale=50) as running:
        yield running


def test_step_functions_invoke_runs_the_real_handler_with_the_function_environment(twin: Twin) -> None:
    result = twin.run("probe", {"action": "describe"})
    assert result.status == "SUCCEEDED", result.describe
    answer = result.output["result"]
    assert answer["tables"] == [twin.table_name]  # the handler reached the twin's DynamoDB through AWS_ENDPOINT_URL
    assert answer["table_env"] == twin.table_name
    assert answer["registry_env"] == f"ssm:{SSM_PATH}"  # the registry from SSM by its path, as deployed
    assert answer["function"] == function_name("profile_steps")
    assert 0 < answer["remaining_ms"] <= 180_000  # profile_steps' timeout in template.yaml


def test_a_handler_exception_becomes_the_step_functions_error_name(twin: Twin) -> None:
    caught = twin.run("probe", {"action": "pool-busy"})
    assert caught.status == "SUCCEEDED"
    assert caught.output["caught"]["Error"] == "PoolBusy"
    assert json.loads(caught.output["caught"]["Cause"])["errorMessage"] == "pool g7e-2gpu is held by nemotron-nano"

    failed = twin.run("probe", {"action": "boom"})
    assert failed.status == "FAILED"
    assert failed.error == "ValueError"
    assert "unexpected: no such thing" in failed.cause


def test_direct_invoke_api_runs_the_handler_and_flags_function_errors(twin: Twin) -> None:
    lam = twin.client("lambda")
    ok = lam.invoke(FunctionName=function_name("profile_steps"), Payload=json.dumps({"action": "describe"}))
    assert "FunctionError" not in ok
    assert json.loads(ok["Payload"].read())["tables"] == [twin.table_name]

    bad = lam.invoke(FunctionName=function_name("profile_steps"), Payload=json.dumps({"action": "boom"}))
    assert bad["FunctionError"] == "Unhandled"
    assert json.loads(bad["Payload"].read())["errorType"] == "ValueError"

    # No handler file for sweep in this repository: Lambda's import error, not an echo of the payload.
    missing = lam.invoke(FunctionName=function_name("sweep"), Payload=b"{}")
    assert missing["FunctionError"] == "Unhandled"
    assert json.loads(missing["Payload"].read())["errorType"] == "Runtime.ImportModuleError"


def test_throttle_once_is_retried_by_the_state_machine(twin: Twin) -> None:
    twin.set_faults("throttle-once")
    try:
        result = twin.run("probe", {"action": "describe"})
    finally:
        twin.set_faults()
    assert result.status == "SUCCEEDED", result.describe
    assert [e.detail for e in twin.world.events_of("throttled")] == ["lambda:Invoke"]
    failures = [e["taskFailedEventDetails"]["error"] for e in result.history if "taskFailedEventDetails" in e]
    assert failures == ["Lambda.TooManyRequestsException"]
