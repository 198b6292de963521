"""The world simulator plays AWS's part: driven here through the public APIs only, as the handlers do."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from servingctl_twin.twin import ACCOUNT_ID, Twin
from servingctl_twin.world import Delays

PROFILE = "nemotron-nano"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(time_scale=10, delays=Delays().scaled(0.1)) as running:
        yield running


def _until(what: str, condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


def test_scale_out_serve_drain_and_terminate(twin: Twin) -> None:
    ecs, asg, elbv2, cw = (twin.client(s) for s in ("ecs", "autoscaling", "elbv2", "cloudwatch"))
    spec, pool = twin.registry.profiles[PROFILE], twin.registry.pool_of(PROFILE)
    twin.set_faults("protected-instance")

    def group() -> dict:
        return asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool.asg_name])["AutoScalingGroups"][0]

    def health() -> list[str]:
        found = elbv2.describe_target_health(TargetGroupArn=spec.target_group_arn)["TargetHealthDescriptions"]
        return [t["TargetHealth"]["State"] for t in found]

    # Desired 2 on a max-1 group: one instance only, Pending first.
    ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    assert ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"][0]["runningCount"] == 0
    asg.update_auto_scaling_group(AutoScalingGroupName=pool.asg_name, DesiredCapacity=2, MaxSize=1)
    _until("an instance launches", lambda: bool(group()["Instances"]))
    assert [i["LifecycleState"] for i in group()["Instances"]] == ["Pending"]
    _until("the target is healthy", lambda: health() == ["healthy"])
    assert len(group()["Instances"]) == 1
    [task] = ecs.describe_tasks(
        cluster=spec.cluster, tasks=ecs.list_tasks(cluster=spec.cluster, serviceName=spec.service)["taskArns"]
    )["tasks"]
    assert task["lastStatus"] == "RUNNING" and task["group"] == f"service:{spec.service}"

    # Requests through the load balancer become the target group's RequestCount.
    for _ in range(3):
        httpx.post(
            f"{spec.endpoint_url}/v1/chat/completions",
            timeout=30,
            headers={"X-LLM-Profile": PROFILE},
            json={"model": spec.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        ).raise_for_status()
    dimensions = [
        {"Name": "TargetGroup", "Value": spec.target_group_arn.split(":")[-1]},
        {"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]},
    ]

    def requests_counted() -> float:
        now = datetime.now(UTC)
        points = cw.get_metric_statistics(
            Namespace="AWS/ApplicationELB",
            MetricName="RequestCount",
            Dimensions=dimensions,
            StartTime=now - timedelta(hours=1),
            EndTime=now + timedelta(minutes=1),
            Period=60,
            Statistics=["Sum"],
        )["Datapoints"]
        return sum(p["Sum"] for p in points)

    _until("3 requests published", lambda: requests_counted() >= 3)

    # Scale-in protection blocks termination until it is cleared; the service drains its target first.
    ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=0)
    _until("the target drains", lambda: health() == ["draining"])
    _until("the target is deregistered", lambda: health() == [])
    asg.update_auto_scaling_group(AutoScalingGroupName=pool.asg_name, DesiredCapacity=0, MinSize=0)
    time.sleep(2.0)  # over three terminate delays (0.6 s each here): a protected instance is still there
    [instance] = group()["Instances"]
    assert instance["ProtectedFromScaleIn"] is True and instance["LifecycleState"] == "InService"
    asg.set_instance_protection(
        AutoScalingGroupName=pool.asg_name, InstanceIds=[instance["InstanceId"]], ProtectedFromScaleIn=False
    )
    _until("the instance terminates", lambda: not group()["Instances"])
    assert twin.world.model_servers() == {}
    [stopped] = ecs.describe_tasks(cluster=spec.cluster, tasks=[task["taskArn"]])["tasks"]
    assert stopped["lastStatus"] == "STOPPED" and stopped["stopCode"] == "ServiceSchedulerInitiated"
    assert twin.world.error is None


def _state(definition: dict, name: str) -> dict:
    """The state called name, wherever it sits (Map processors included)."""
    for state_name, state in definition["States"].items():
        if state_name == name:
            return state
        processor = state.get("ItemProcessor") or state.get("Iterator")
        found = _state(processor, name) if processor else None
        if found:
            return found
    return {}


def test_fargate_run_task_without_capacity_fails_the_sync_state_with_amazonecs_unknown_and_is_retried(twin: Twin) -> None:
    # run_benchmark's own ECS state (its Retry and Catch as written), waits cut to 1 s and one retry.
    definition = json.loads((ROOT / "statemachine/run_benchmark.asl.json").read_text())
    state = copy.deepcopy(_state(definition, "RunScenarioOnEcs"))
    for rule in state["Retry"]:
        rule.update(IntervalSeconds=1, MaxAttempts=1, BackoffRate=1)
        rule.pop("MaxDelaySeconds", None)
        rule.pop("JitterStrategy", None)
    machine = {
        "StartAt": "RunScenarioOnEcs",
        "States": {
            "RunScenarioOnEcs": state,
            state["Next"]: {"Type": "Succeed"},
            state["Catch"][0]["Next"]: {"Type": "Pass", "End": True},
        },
    }
    sfn, ecs = twin.client("stepfunctions"), twin.client("ecs")
    spec = twin.registry.profiles[PROFILE]
    ecs.register_task_definition(
        family="servingctl-bench",
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu="1024",
        memory="2048",
        containerDefinitions=[{"name": "bench", "image": "bench:1", "essential": True}],
    )
    arn = sfn.create_state_machine(
        name="ecs-capacity",
        definition=json.dumps(machine),
        type="STANDARD",
        roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/servingctl-twin",
    )["stateMachineArn"]
    execution_input = {
        "ecs": {
            "cluster": spec.cluster,
            "task_definition": "servingctl-bench",
            "subnets": ["subnet-1"],
            "security_groups": ["sg-1"],
            "container": "bench",
        },
        "event": {"action": "run_scenario"},
    }
    twin.set_faults("capacity-unavailable")
    try:
        result = twin.wait_execution(
            sfn.start_execution(stateMachineArn=arn, name="no-capacity", input=json.dumps(execution_input))["executionArn"]
        )
    finally:
        twin.set_faults()
    failures = [e["taskFailedEventDetails"] for e in result.history if e["type"] == "TaskFailed"]
    # Retried once (AmazonECS.Unknown is in the Retry), then caught with RunTask's Failures as the cause.
    assert [f["error"] for f in failures] == ["AmazonECS.Unknown", "AmazonECS.Unknown"]
    assert result.status == "SUCCEEDED" and result.output["error"]["Error"] == "AmazonECS.Unknown"
    assert "Capacity is unavailable at this time" in json.loads(result.output["error"]["Cause"])["Failures"][0]["reason"]
