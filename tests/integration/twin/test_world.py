"""The world simulator plays AWS's part: driven here through the public APIs only, as the handlers do."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from servingctl.local.twin import Twin
from servingctl.local.world import Delays

PROFILE = "nemotron-nano"


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(time_scale=10, delays=Delays(metric_period_s=20).scaled(0.1)) as running:
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
    [task] = ecs.describe_tasks(cluster=spec.cluster, tasks=ecs.list_tasks(cluster=spec.cluster, serviceName=spec.service)["taskArns"])["tasks"]
    assert task["lastStatus"] == "RUNNING" and task["group"] == f"service:{spec.service}"

    # Requests through the model server become the target group's RequestCount.
    for _ in range(3):
        httpx.post(f"{spec.endpoint_url}/v1/chat/completions", timeout=30,
                   json={"model": spec.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    dimensions = [
        {"Name": "TargetGroup", "Value": spec.target_group_arn.split(":")[-1]},
        {"Name": "LoadBalancer", "Value": spec.load_balancer_arn.split(":loadbalancer/")[-1]},
    ]

    def requests_counted() -> float:
        now = datetime.now(timezone.utc)
        points = cw.get_metric_statistics(Namespace="AWS/ApplicationELB", MetricName="RequestCount", Dimensions=dimensions,
                                          StartTime=now - timedelta(hours=1), EndTime=now + timedelta(minutes=1),
                                          Period=60, Statistics=["Sum"])["Datapoints"]
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
    asg.set_instance_protection(AutoScalingGroupName=pool.asg_name, InstanceIds=[instance["InstanceId"]],
                                ProtectedFromScaleIn=False)
    _until("the instance terminates", lambda: not group()["Instances"])
    assert twin.world.model_servers() == {}
    [stopped] = ecs.describe_tasks(cluster=spec.cluster, tasks=[task["taskArn"]])["tasks"]
    assert stopped["lastStatus"] == "STOPPED" and stopped["stopCode"] == "ServiceSchedulerInitiated"
    assert twin.world.error is None
