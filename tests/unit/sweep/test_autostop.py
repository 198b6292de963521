"""The sweep over moto: READY profiles stopped on lease expiry and idleness (CloudWatch RequestCount),
kept when in use, dry run reports only, repeated sweeps join their stop, every decision published."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from servingctl.control.autostop import SweepDeps, requests_in_window, sweep
from servingctl.local.twin import REFERENCE_REGISTRY
from servingctl.registry import parse_registry
from servingctl.store import MemoryStore
from servingctl.store.models import Phase

REGION = "us-east-1"
PASS = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Pass", "End": True}}})


class Clock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@pytest.fixture
def deps(monkeypatch: pytest.MonkeyPatch) -> Iterator[SweepDeps]:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        stop = sfn.create_state_machine(name="stop", definition=PASS, roleArn="arn:aws:iam::123456789012:role/x")["stateMachineArn"]
        events, sqs = boto3.client("events", region_name=REGION), boto3.client("sqs", region_name=REGION)
        queue = sqs.create_queue(QueueName="seen")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventPattern=json.dumps({"source": ["servingctl"]}))
        events.put_targets(Rule="all", Targets=[{"Id": "q", "Arn": queue_arn}])
        monkeypatch.setenv("TEST_QUEUE", queue)
        yield SweepDeps(sfn=sfn, cloudwatch=boto3.client("cloudwatch", region_name=REGION), events=events,
                        store=MemoryStore(), registry=parse_registry(REFERENCE_REGISTRY.read_text()),
                        stop_machine_arn=stop, clock=Clock(datetime.now(UTC)))


def _published(deps: SweepDeps) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    messages = sqs.receive_message(QueueUrl=os.environ["TEST_QUEUE"], MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def _ready(deps: SweepDeps, name: str, *, ready_min_ago: float, lease_min: float) -> None:
    now = deps.clock.now()
    ready = now - timedelta(minutes=ready_min_ago)
    deps.store.set_phase(name, Phase.STARTING, ready, f"arn:aws:states:::execution:start:start-{name}-1")
    deps.store.set_phase(name, Phase.READY, ready, f"arn:aws:states:::execution:start:start-{name}-1",
                         ready_at=ready, lease_deadline=now + timedelta(minutes=lease_min))


def _requests(deps: SweepDeps, name: str, count: float, minutes_ago: float) -> None:
    spec = deps.registry.profiles[name]
    deps.cloudwatch.put_metric_data(Namespace="AWS/ApplicationELB", MetricData=[{
        "MetricName": "RequestCount", "Value": count, "Unit": "Count",
        "Timestamp": deps.clock.now() - timedelta(minutes=minutes_ago),
        "Dimensions": [{"Name": "TargetGroup", "Value": spec.target_group_arn.split(":")[-1]},
                       {"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]}],
    }])


def test_request_count_sums_the_window_and_no_datapoints_means_zero(deps: SweepDeps) -> None:
    spec = deps.registry.profiles["nemotron-nano"]
    assert requests_in_window(deps.cloudwatch, spec, deps.clock.now(), 30) == 0
    _requests(deps, "nemotron-nano", 3, 10)
    _requests(deps, "nemotron-nano", 4, 20)
    _requests(deps, "nemotron-nano", 100, 45)  # before the window
    assert requests_in_window(deps.cloudwatch, spec, deps.clock.now(), 30) == 7


def test_expired_lease_and_idle_profiles_are_stopped_busy_ones_kept(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)          # lease ran out
    _ready(deps, "deepseek-v4-flash", ready_min_ago=120, lease_min=60)      # in lease, but idle 30 min
    outcomes = {o.profile: o for o in sweep(deps)}
    assert (outcomes["nemotron-nano"].reason, outcomes["nemotron-nano"].action) == ("lease-expired", "stop-started")
    assert (outcomes["deepseek-v4-flash"].reason, outcomes["deepseek-v4-flash"].action) == ("idle", "stop-started")
    assert outcomes["deepseek-v4-flash"].requests_in_idle_window == 0
    runs = deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]
    assert sorted(json.loads(deps.sfn.describe_execution(executionArn=r["executionArn"])["input"])["profile"] for r in runs) == [
        "deepseek-v4-flash", "nemotron-nano"]
    events = _published(deps)
    assert sorted((e["detail-type"], e["detail"]["profile"], e["detail"]["reason"]) for e in events) == [
        ("Profile auto-stopped", "deepseek-v4-flash", "idle"), ("Profile auto-stopped", "nemotron-nano", "lease-expired")]
    assert all(e["source"] == "servingctl" for e in events)


def test_a_repeated_sweep_joins_its_stop_instead_of_starting_another(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    first = sweep(deps)[0]
    again = sweep(deps)[0]
    assert again.action == "stop-joined" and again.execution_arn == first.execution_arn
    assert len(deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]) == 1


def test_in_use_profile_is_kept_and_the_decision_published(deps: SweepDeps) -> None:
    _ready(deps, "deepseek-v4-flash", ready_min_ago=120, lease_min=60)
    _requests(deps, "deepseek-v4-flash", 12, 5)
    [outcome] = sweep(deps)
    assert (outcome.stop, outcome.reason, outcome.action, outcome.requests_in_idle_window) == (False, "in-use", "kept", 12)
    assert [(e["detail-type"], e["detail"]["reason"]) for e in _published(deps)] == [("Profile kept running", "in-use")]
    assert deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"] == []


def test_dry_run_reports_without_acting_or_publishing(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    [outcome] = sweep(deps, dry_run=True)
    assert (outcome.stop, outcome.action, outcome.execution_arn) == (True, "would-stop", None)
    assert deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"] == []
    assert _published(deps) == []


def test_only_ready_profiles_are_swept(deps: SweepDeps) -> None:
    deps.store.set_phase("nemotron-nano", Phase.STARTING, deps.clock.now(), "e")
    assert sweep(deps) == []
