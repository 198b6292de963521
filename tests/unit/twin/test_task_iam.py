"""An ECS task's process under its task role on the twin (servingctl_twin.iam.task_iam): the role's
policy decides every call the task's own code makes, once, from any thread, and the twin reads the
decided calls back; the roles come from the translated template's task definitions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from servingctl_twin import iam
from servingctl_twin.iam.task_iam import ENV, TaskIam, recorded_calls

ROOT = Path(__file__).resolve().parents[3]
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/servingctl"
# A task's code: one read it may make and one write it may not, the write from another thread.
TASK_CODE = """
import threading, boto3
from botocore.exceptions import ClientError
client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                      aws_access_key_id="x", aws_secret_access_key="y")
def write():
    try:
        client.put_item(TableName="servingctl", Item={"pk": {"S": "run"}, "sk": {"S": "a"}})
    except ClientError as exc:
        print("refused:", exc.response["Error"]["Code"])
thread = threading.Thread(target=write)
thread.start()
thread.join()
"""


def _run_task(tmp_path: Path, statements: tuple) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "task_code.py"
    module.write_text(TASK_CODE)
    setup = TaskIam("servingctl-bench", statements, "123456789012", "us-east-1", {"servingctl": "pk"}, str(tmp_path / "calls"))
    env = {**os.environ, ENV: setup.to_env(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT / 'layers/core'}"}
    return subprocess.run(
        [sys.executable, "-m", "servingctl_twin.iam.task_iam", "-m", "task_code"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_call_the_task_role_does_not_allow_is_refused_once_and_recorded(tmp_path: Path) -> None:
    reads_only = (("data/Reads", {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": TABLE}),)
    done = _run_task(tmp_path, reads_only)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused: AccessDeniedException"  # answered by the twin, never sent
    [call] = recorded_calls(tmp_path / "calls")  # decided once, though made from a thread
    assert str(call) == f"servingctl-bench: dynamodb.PutItem dynamodb:PutItem on {TABLE}"
    assert "servingctl-bench is not authorized to perform: dynamodb:PutItem" in (call.denied or "")


def test_a_call_the_task_role_allows_is_sent(tmp_path: Path) -> None:
    writes = (("data/Writes", {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": TABLE}),)
    done = _run_task(tmp_path, writes)
    # Allowed, so botocore sends it, to a port where nothing listens: the task's own error, not IAM's.
    assert "EndpointConnectionError" in done.stderr and "refused" not in done.stdout
    [call] = recorded_calls(tmp_path / "calls")
    assert call.denied is None and call.allowed_by == (("data/Writes",),)


def test_the_setup_survives_the_environment_and_no_calls_file_is_no_calls(tmp_path: Path) -> None:
    setup = TaskIam(
        "f",
        (("p/S", {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*"}),),
        "1",
        "r",
        {"t": "pk"},
        "x",
        {"arn:aws:iam::1:role/run": (("q/T", {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}),)},
    )
    assert TaskIam.from_env(setup.to_env()) == setup
    assert list(recorded_calls(tmp_path / "none")) == []


def test_the_bench_task_role_is_read_from_the_translated_template_by_family(cfn: dict) -> None:
    refs = {
        "AWS::StackName": "servingctl",
        "AWS::Region": "us-east-1",
        "AWS::AccountId": "123456789012",
        "AWS::Partition": "aws",
        "BenchImageUri": "servingctl-bench:twin",
    }
    arns = {
        "StateTable": TABLE,
        "RecordsBucket": "arn:aws:s3:::records",
        "RegistryPathArn": "arn:ssm",
        "BenchRunRole": "arn:aws:iam::123456789012:role/run",
    }

    class Refs(dict):
        def __missing__(self, key: str) -> str:
            return arns.get(key.split(".")[0], f"<{key}>")

    policies = iam.task_policies(cfn, Refs(refs))
    assert list(policies) == ["servingctl-bench"]
    policy = policies["servingctl-bench"]
    # No table nor bucket access of its own: only BenchRunRole, assumed with session tags.
    assert policy.allowing(iam.Request("sts:AssumeRole", "arn:aws:iam::123456789012:role/run"))
    assert policy.allowing(iam.Request("sts:TagSession", "arn:aws:iam::123456789012:role/run"))
    assert not policy.allowing(iam.Request("dynamodb:UpdateItem", TABLE, {"dynamodb:LeadingKeys": ("profile#p",)}))
    assert not policy.allowing(iam.Request("s3:PutObject", "arn:aws:s3:::records/runs/r/x.jsonl.gz"))
    assert iam.task_policies(cfn, Refs(refs | {"BenchImageUri": ""})) == {}  # no image: no task definition
