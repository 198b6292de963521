"""The state machine files as the template deploys them: every ${...} placeholder is substituted by
the template and nothing else is, the substituted definitions pass npm's asl-validator, and every
Task retries Lambda's transient errors and throttling and catches everything else."""

import json
import re
import subprocess
from pathlib import Path

import pytest
from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parents[3]
PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
LAMBDA_TRANSIENT = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    # Lambda's client timed out before the function answered: the invocation may not have run.
    "Lambda.ClientExecutionTimeoutException",
}
# What a substituted value looks like in AWS, by the type of the resource the template points at.
SAMPLE_ARNS = {
    "AWS::Serverless::Function": "arn:aws:lambda:us-east-1:123456789012:function:servingctl-{id}",
    "AWS::Serverless::StateMachine": "arn:aws:states:us-east-1:123456789012:stateMachine:servingctl-{id}",
}


def _state_machines(template: dict) -> dict[str, dict]:
    return {n: r["Properties"] for n, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::StateMachine"}


def _referenced_resource(value) -> str:
    """Logical id behind a substitution value: !GetAtt X.Arn or !Ref X."""
    return value["Fn::GetAtt"][0] if "Fn::GetAtt" in value else value["Ref"]


def substituted_definition(template: dict, machine: str) -> str:
    """The ASL text with each placeholder replaced by an ARN of the kind the template supplies."""
    props = _state_machines(template)[machine]
    text = (ROOT / props["DefinitionUri"]).read_text()
    for key, value in props["DefinitionSubstitutions"].items():
        target = _referenced_resource(value)
        arn = SAMPLE_ARNS[template["Resources"][target]["Type"]].format(id=target)
        text = text.replace("${" + key + "}", arn)
    return text


# Parametrization needs the names at collection time, before fixtures exist.
MACHINES = sorted(_state_machines(decode(str(ROOT / "template.yaml"))[0]))


def test_the_template_deploys_every_state_machine_file(template):
    deployed = {Path(p["DefinitionUri"]).name for p in _state_machines(template).values()}
    assert deployed == {p.name for p in (ROOT / "statemachine").glob("*.asl.json")}


@pytest.mark.parametrize("machine", MACHINES)
def test_substitutions_and_placeholders_match(template, machine):
    props = _state_machines(template)[machine]
    placeholders = set(PLACEHOLDER.findall((ROOT / props["DefinitionUri"]).read_text()))
    assert placeholders == set(props["DefinitionSubstitutions"])


@pytest.mark.parametrize("machine", MACHINES)
def test_substituted_definition_passes_asl_validator(template, machine, asl_validator, tmp_path):
    path = tmp_path / f"{machine}.asl.json"
    path.write_text(substituted_definition(template, machine))
    result = subprocess.run([str(asl_validator), "--json-path", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_asl_validator_rejects_a_broken_definition(asl_validator, tmp_path):
    path = tmp_path / "broken.asl.json"
    path.write_text(json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "Next": "Nowhere"}}}))
    result = subprocess.run([str(asl_validator), "--json-path", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode != 0


def tasks(states: dict, prefix: str = ""):
    """(path, state) of every Task, including those inside Parallel branches and Map processors."""
    for name, state in states.items():
        if state["Type"] == "Task":
            yield prefix + name, state
        for branch in state.get("Branches", []):
            yield from tasks(branch["States"], f"{prefix}{name}/")
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from tasks(processor["States"], f"{prefix}{name}/")


def task_problems(definition: dict) -> list[str]:
    """Lambda Tasks without a Retry on Lambda's transient errors and Throttled, other Tasks (.sync
    integrations: nested executions, ECS tasks) without any Retry, any Task without Catch States.ALL."""
    problems = []
    for path, task in tasks(definition["States"]):
        retried = {error for rule in task.get("Retry", []) for error in rule["ErrorEquals"]}
        if task["Resource"].startswith("arn:aws:states:::lambda:"):
            missing = (LAMBDA_TRANSIENT | {"Throttled"}) - retried
            if missing:
                problems.append(f"{path}: no Retry for {sorted(missing)}")
        elif not retried:
            problems.append(f"{path}: no Retry")
        if not any("States.ALL" in rule["ErrorEquals"] for rule in task.get("Catch", [])):
            problems.append(f"{path}: no Catch for States.ALL")
    return problems


@pytest.mark.parametrize("asl", sorted(p.name for p in (ROOT / "statemachine").glob("*.asl.json")))
def test_every_task_retries_transient_errors_and_catches_the_rest(asl):
    assert task_problems(json.loads((ROOT / "statemachine" / asl).read_text())) == []


def test_the_task_check_sees_tasks_inside_a_map():
    inner = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "End": True}
    definition = {
        "States": {"Scenarios": {"Type": "Map", "ItemProcessor": {"StartAt": "Run", "States": {"Run": inner}}, "End": True}}
    }
    assert task_problems(definition) == [
        "Scenarios/Run: no Retry for ['Lambda.AWSLambdaException', 'Lambda.ClientExecutionTimeoutException', "
        "'Lambda.SdkClientException', 'Lambda.ServiceException', 'Lambda.TooManyRequestsException', 'Throttled']",
        "Scenarios/Run: no Catch for States.ALL",
    ]


def test_the_task_check_wants_some_retry_on_a_sync_integration():
    nested = {
        "Type": "Task",
        "Resource": "arn:aws:states:::states:startExecution.sync:2",
        "End": True,
        "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "X"}],
    }
    assert task_problems({"States": {"StartProfile": nested}}) == ["StartProfile: no Retry"]
    nested["Retry"] = [{"ErrorEquals": ["StepFunctions.ExecutionLimitExceededException"]}]
    assert task_problems({"States": {"StartProfile": nested}}) == []
