"""The sweep over moto: READY profiles stopped on lease expiry and idleness (CloudWatch RequestCount),
kept when in use, dry run reports only, repeated sweeps join their stop, every decision published."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws

from servingctl.control.autostop import SweepDeps, requests_in_window, sweep
from servingctl.registry import parse_registry
from servingctl.store import MemoryStore
from servingctl.store.models import Phase
from servingctl_twin.twin import REFERENCE_REGISTRY

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
        stop = sfn.create_state_machine(name="stop", definition=PASS, roleArn="arn:aws:iam::123456789012:role/x")[
            "stateMachineArn"
        ]
        events, sqs = boto3.client("events", region_name=REGION), boto3.client("sqs", region_name=REGION)
        queue = sqs.create_queue(QueueName="seen")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="all", EventPattern=json.dumps({"source": ["servingctl"]}))
        events.put_targets(Rule="all", Targets=[{"Id": "q", "Arn": queue_arn}])
        monkeypatch.setenv("TEST_QUEUE", queue)
        registry = parse_registry(REFERENCE_REGISTRY.read_text())
        yield SweepDeps(
            sfn=sfn,
            cloudwatch=boto3.client("cloudwatch", region_name=REGION),
            events=events,
            elbv2=_Targets(registry),
            autoscaling=boto3.client("autoscaling", region_name=REGION),
            store=MemoryStore(),
            registry=registry,
            stop_machine_arn=stop,
            clock=Clock(datetime.now(UTC)),
            identity=SWEEP_ROLE,
            http=httpx.Client(transport=httpx.MockTransport(_target)),
        )


SWEEP_ROLE = "arn:aws:sts::123456789012:assumed-role/servingctl-sweep/servingctl-SweepFunction"
# What the model server of each profile (by routing header value) reports at its target's address;
# a profile missing here does not answer.
GAUGES: dict[str, tuple[int, int]] = {}


class _Targets:
    """DescribeTargetHealth of each profile's group: one healthy target whose address names the profile."""

    def __init__(self, registry: Any) -> None:
        self.by_group = {p.target_group_arn: p.routing_header.value for p in registry.profiles.values()}

    def describe_target_health(self, TargetGroupArn: str) -> dict[str, Any]:
        target = {"Id": f"{self.by_group[TargetGroupArn]}.targets.test", "Port": 8000}
        return {"TargetHealthDescriptions": [{"Target": target, "TargetHealth": {"State": "healthy"}}]}


def _target(request: httpx.Request) -> httpx.Response:
    assert "X-LLM-Profile" not in request.headers, "the sweep read a model server through the ALB"
    found = GAUGES.get(request.url.host.removesuffix(".targets.test"))
    if request.url.path != "/metrics" or found is None or request.url.port != 8000:
        raise httpx.ConnectError("connection refused", request=request)
    running, waiting = found
    return httpx.Response(
        200,
        text=(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running:.1f}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting:.1f}\n'
            'vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0\n'
        ),
    )


@pytest.fixture(autouse=True)
def _no_gauges() -> Iterator[None]:
    GAUGES.clear()
    yield
    GAUGES.clear()


def _published(deps: SweepDeps) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    messages = sqs.receive_message(QueueUrl=os.environ["TEST_QUEUE"], MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def _ready(deps: SweepDeps, name: str, *, ready_min_ago: float, lease_min: float) -> None:
    now = deps.clock.now()
    ready = now - timedelta(minutes=ready_min_ago)
    deps.store.set_phase(name, Phase.STARTING, ready, f"arn:aws:states:::execution:start:start-{name}-1")
    deps.store.set_phase(
        name,
        Phase.READY,
        ready,
        f"arn:aws:states:::execution:start:start-{name}-1",
        ready_at=ready,
        lease_deadline=now + timedelta(minutes=lease_min),
    )


def _requests(deps: SweepDeps, name: str, count: float, minutes_ago: float) -> None:
    spec = deps.registry.profiles[name]
    deps.cloudwatch.put_metric_data(
        Namespace="AWS/ApplicationELB",
        MetricData=[
            {
                "MetricName": "RequestCount",
                "Value": count,
                "Unit": "Count",
                "Timestamp": deps.clock.now() - timedelta(minutes=minutes_ago),
                "Dimensions": [
                    {"Name": "TargetGroup", "Value": spec.target_group_arn.split(":")[-1]},
                    {"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]},
                ],
            }
        ],
    )


def test_request_count_sums_the_window_and_no_datapoints_means_zero(deps: SweepDeps) -> None:
    spec = deps.registry.profiles["nemotron-nano"]
    assert requests_in_window(deps.cloudwatch, spec, deps.clock.now(), 30) == 0
    _requests(deps, "nemotron-nano", 3, 10)
    _requests(deps, "nemotron-nano", 4, 20)
    _requests(deps, "nemotron-nano", 100, 45)  # before the window
    assert requests_in_window(deps.cloudwatch, spec, deps.clock.now(), 30) == 7


def test_expired_lease_and_idle_profiles_are_stopped_busy_ones_kept(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)  # lease ran out
    _ready(deps, "deepseek-v4-flash", ready_min_ago=120, lease_min=60)  # in lease, but idle 30 min
    outcomes = {o.profile: o for o in sweep(deps)}
    assert (outcomes["nemotron-nano"].reason, outcomes["nemotron-nano"].action) == ("lease-expired", "stop-started")
    assert (outcomes["deepseek-v4-flash"].reason, outcomes["deepseek-v4-flash"].action) == ("idle", "stop-started")
    assert outcomes["deepseek-v4-flash"].requests_in_idle_window == 0
    runs = deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]
    assert sorted(json.loads(deps.sfn.describe_execution(executionArn=r["executionArn"])["input"])["profile"] for r in runs) == [
        "deepseek-v4-flash",
        "nemotron-nano",
    ]
    events = _published(deps)
    assert sorted((e["detail-type"], e["detail"]["profile"], e["detail"]["reason"]) for e in events) == [
        ("Profile auto-stopped", "deepseek-v4-flash", "idle"),
        ("Profile auto-stopped", "nemotron-nano", "lease-expired"),
    ]
    assert all(e["source"] == "servingctl" for e in events)


def test_a_repeated_sweep_joins_its_stop_instead_of_starting_another(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    first = sweep(deps)[0]
    again = sweep(deps)[0]
    assert again.action == "stop-joined" and again.execution_arn == first.execution_arn
    assert len(deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]) == 1


def test_a_closed_auto_stop_is_followed_by_one_under_a_fresh_name_which_later_sweeps_join(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    first = sweep(deps)[0]
    deps.sfn.stop_execution(executionArn=first.execution_arn, cause="PrepareStop failed")  # it closed
    second = sweep(deps)[0]  # ExecutionAlreadyExists on the first name: the next one, never the closed one
    assert second.action == "stop-started" and second.execution_arn != first.execution_arn
    third = sweep(deps)[0]
    assert third.action == "stop-joined" and third.execution_arn == second.execution_arn
    assert len(deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]) == 2


def test_one_profile_raising_is_reported_and_the_others_are_still_swept(deps: SweepDeps, monkeypatch: pytest.MonkeyPatch) -> None:
    _ready(deps, "deepseek-v4-flash", ready_min_ago=120, lease_min=-1)
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    original = deps.store.get_profile

    def broken(name: str) -> Any:
        if name == "deepseek-v4-flash":
            raise RuntimeError("DynamoDB said no")
        return original(name)

    monkeypatch.setattr(deps.store, "get_profile", broken)
    first, second = sweep(deps)
    assert (first.profile, first.reason, first.action, first.detail) == (
        "deepseek-v4-flash",
        "error",
        "error",
        "RuntimeError: DynamoDB said no",
    )
    assert (second.profile, second.reason, second.action) == ("nemotron-nano", "lease-expired", "stop-started")


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


def _header(deps: SweepDeps, name: str) -> str:
    return deps.registry.profiles[name].routing_header.value


def test_running_requests_on_the_model_server_keep_a_lease_expired_profile(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    GAUGES[_header(deps, "nemotron-nano")] = (2, 1)
    [kept] = sweep(deps)
    assert (kept.stop, kept.reason, kept.action, kept.active_requests) == (False, "requests-running", "kept", 3)
    assert deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"] == []
    GAUGES[_header(deps, "nemotron-nano")] = (0, 0)
    [stopped] = sweep(deps)
    assert (stopped.stop, stopped.reason, stopped.active_requests) == (True, "lease-expired", 0)
    # Who did it: the stop the sweep started carries its own role's ARN, and so does the event.
    [execution] = deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]
    assert json.loads(deps.sfn.describe_execution(executionArn=execution["executionArn"])["input"])["requested_by"] == SWEEP_ROLE
    assert {e["detail"]["requested_by"] for e in _published(deps)} == {SWEEP_ROLE}


def test_an_unreachable_model_server_leaves_the_decision_to_the_lease(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)  # no gauges: 503
    [outcome] = sweep(deps)
    assert (outcome.stop, outcome.reason, outcome.active_requests) == (True, "lease-expired", None)


def test_stopping_soon_is_published_before_the_stop_with_when_and_what_answers_it(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=5, lease_min=10)  # default warning: 15 minutes
    [soon] = sweep(deps)
    assert (soon.stop, soon.stopping_soon, soon.next_stop.reason) == (False, True, "lease-expired")
    warning = [e for e in _published(deps) if e["detail-type"] == "Profile stopping soon"]
    assert len(warning) == 1
    detail = warning[0]["detail"]
    assert (detail["profile"], detail["stop_reason"], detail["hard"]) == ("nemotron-nano", "lease-expired", False)
    assert 9.9 <= detail["minutes_left"] <= 10.0 and "keepalive nemotron-nano" in detail["answer"]
    deps.clock.sleep(11 * 60)
    [stopped] = sweep(deps)
    assert (stopped.stop, stopped.reason) == (True, "lease-expired")


def test_a_benchmark_hold_keeps_a_lease_expired_profile_until_it_lapses(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    deps.store.update_profile(
        "nemotron-nano", deps.clock.now(), held_by="run-1", held_until=deps.clock.now() + timedelta(minutes=3)
    )
    [held] = sweep(deps)
    assert (held.stop, held.reason) == (False, "held")
    deps.clock.sleep(3 * 60)
    assert sweep(deps)[0].reason == "lease-expired"


def test_a_sweep_overlapping_another_does_not_stop_the_session_started_after_the_others_stop(deps: SweepDeps) -> None:
    """Without reserved concurrency two sweeps can run at once. Sweep A decides to stop the READY
    session; while it reads the model server's gauges, sweep B stops that session (its stop closes)
    and the user starts the profile again. A must leave the new start alone."""
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    overlapped: list[Any] = []

    def meanwhile(request: httpx.Request) -> httpx.Response:
        if not overlapped:
            overlapped.append(None)
            [other] = sweep(deps)  # sweep B, inside A's decision
            assert other.action == "stop-started"
            deps.sfn.stop_execution(executionArn=other.execution_arn)  # B's stop is over
            for phase in (Phase.STOPPING, Phase.STOPPED):
                deps.store.set_phase("nemotron-nano", phase, deps.clock.now(), other.execution_arn)
            deps.store.set_phase(
                "nemotron-nano", Phase.STARTING, deps.clock.now(), "arn:aws:states:::execution:start:start-nemotron-nano-2"
            )
        return _target(request)

    deps.http = httpx.Client(transport=httpx.MockTransport(meanwhile))
    [outcome] = sweep(deps)  # sweep A
    assert (outcome.stop, outcome.action, outcome.execution_arn) == (True, "changed", None)
    # One stop in all (B's), and the new start's record untouched.
    assert len(deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]) == 1
    assert deps.store.get_profile("nemotron-nano").phase == Phase.STARTING
    # A announced nothing: only B's decision is published.
    assert [(e["detail-type"], e["detail"]["action"]) for e in _published(deps)] == [("Profile auto-stopped", "stop-started")]


def test_two_sweeps_deciding_the_same_stop_at_once_start_one_execution(deps: SweepDeps) -> None:
    _ready(deps, "nemotron-nano", ready_min_ago=120, lease_min=-1)
    joined: list[Any] = []

    def meanwhile(request: httpx.Request) -> httpx.Response:
        if not joined:
            joined.append(None)
            joined[0] = sweep(deps)[0]  # sweep B decides and starts while A is deciding
        return _target(request)

    deps.http = httpx.Client(transport=httpx.MockTransport(meanwhile))
    [outcome] = sweep(deps)
    assert outcome.action == "stop-joined" and outcome.execution_arn == joined[0].execution_arn
    assert len(deps.sfn.list_executions(stateMachineArn=deps.stop_machine_arn)["executions"]) == 1
