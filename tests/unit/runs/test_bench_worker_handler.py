"""The bench_worker handler on its sample events (lambda:invoke payloads captured from a run on the
twin), over moto's DynamoDB and S3: plan records the run, a failed finish keeps it with the reason,
and bad events raise errors named for the state machine."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

from servingctl.runs.worker import ACTIONS
from servingctl.shared.errors import InvalidInput
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.store.dynamodb import create_table
from servingctl_twin.twin import publish_parameters

ROOT = Path(__file__).resolve().parents[3]
EVENTS = ROOT / "events/bench_worker"


def _event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / f"{name}.json").read_text())


def _context() -> SimpleNamespace:
    return SimpleNamespace(
        function_name="servingctl-bench-worker",
        memory_limit_in_mb=1769,
        aws_request_id="req-1",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:servingctl-bench-worker",
        get_remaining_time_in_millis=lambda: 900_000,
    )


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    for key, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "SERVINGCTL_REGISTRY": "ssm:/servingctl/registry",
        "SERVINGCTL_TABLE": "servingctl",
        "SERVINGCTL_BUCKET": "records",
        "POWERTOOLS_SERVICE_NAME": "servingctl",
        "POWERTOOLS_METRICS_NAMESPACE": "servingctl",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SERVINGCTL_BENCH_ECS_TASK_DEFINITION", raising=False)
    with mock_aws():
        create_table("servingctl", boto3.resource("dynamodb"))
        boto3.client("s3").create_bucket(Bucket="records")
        # Read from SSM by its path, as deployed.
        publish_parameters(
            boto3.client("ssm"),
            json.loads((ROOT / "twin/servingctl_twin/reference_registry.json").read_text()),
            "/servingctl/registry",
        )
        parameters.clear_caches()
        spec = importlib.util.spec_from_file_location("handler_bench_worker", ROOT / "functions/bench_worker/app.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


@pytest.mark.parametrize("name", sorted(p.stem for p in EVENTS.glob("*.json")))
def test_sample_events_are_invoke_payloads_of_known_actions(name: str) -> None:
    sample = _event(name)
    assert {"action", "state", "execution"} <= set(sample) <= {"action", "state", "execution", "started_at", "outcome"}
    assert sample["action"] in ACTIONS and sample["execution"].startswith("arn:aws:states:")


def test_every_action_has_a_sample_event() -> None:
    assert {_event(p.stem)["action"] for p in EVENTS.glob("*.json")} == set(ACTIONS)


def test_plan_then_a_failed_finish_record_the_run_and_its_reason(handler: ModuleType) -> None:
    plan = handler.lambda_handler(_event("plan"), _context())
    finish = _event("finish_failed")
    assert plan["run_id"] == finish["state"]["plan"]["run_id"]  # the same execution names the same run
    assert plan["scenarios"] == finish["state"]["plan"]["scenarios"] and plan["start"] is True
    runs = DynamoBenchmarkStore("servingctl")
    assert runs.get_run(plan["run_id"]).status.value == "PLANNED"
    answer = handler.lambda_handler(finish, _context())
    assert answer == {
        "run_id": plan["run_id"],
        "status": "FAILED",
        "scenarios_written": [],
        "error": "ConnectionResetError: the worker lost the model server",
    }
    assert runs.get_run(plan["run_id"]).error == "ConnectionResetError: the worker lost the model server"


def test_bad_events_raise_errors_the_state_machine_names(handler: ModuleType) -> None:
    with pytest.raises(InvalidInput, match="action: unknown 'measure'"):
        handler.lambda_handler(_event("plan") | {"action": "measure"}, _context())
    with pytest.raises(InvalidInput, match="mode: Input should be 'burst', 'sustained' or 'rate'"):
        handler.lambda_handler(_event("plan") | {"state": {"profile": "deepseek-v4-flash", "mode": "fast"}}, _context())
