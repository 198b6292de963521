"""A moto-backed AWS world for the control steps: the test plays the capacity provider, ECS and the ALB.

moto runs no capacity provider and places no service tasks, so the World moves things the way AWS
would (register the instance, place/crash a task, register the target) and the steps observe them
through real boto3 calls.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws
from moto.moto_api import state_manager

from servingctl.control.deps import Deps
from servingctl.registry import Registry, parse_registry
from servingctl.store import MemoryStore

REGION = "us-east-1"
EXEC_START = "arn:aws:states:us-east-1:123456789012:execution:start_profile:start-deepseek-v4-flash-1"
EXEC_OTHER = "arn:aws:states:us-east-1:123456789012:execution:start_profile:start-deepseek-v4-flash-2"
EXEC_STOP = "arn:aws:states:us-east-1:123456789012:execution:stop_profile:stop-deepseek-v4-flash-1"
EXEC_STOP_2 = "arn:aws:states:us-east-1:123456789012:execution:stop_profile:stop-deepseek-v4-flash-2"
PROFILE = "deepseek-v4-flash"
OTHER = "nemotron-nano"
FAST_POLL = {"interval_s": 15, "max_interval_s": 60, "backoff": 1.5}


class FakeClock:
    """Starts at the real now (moto stamps tasks with the real clock) and moves only when told or slept."""

    def __init__(self) -> None:
        self.current = datetime.now(UTC)
        self.on_sleep: Callable[[float], None] | None = None
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.current += timedelta(seconds=seconds)
        if self.on_sleep:
            self.on_sleep(seconds)

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


class World:
    """The AWS resources of the reference registry, created in moto, and the moves AWS would make."""

    def __init__(self, shared_pool: bool) -> None:
        c = {name: boto3.client(name, region_name=REGION) for name in ("ecs", "autoscaling", "elbv2", "ec2")}
        self.ecs, self.autoscaling, self.elbv2, self.ec2 = c["ecs"], c["autoscaling"], c["elbv2"], c["ec2"]
        self.calls: list[str] = []
        self.autoscaling.meta.events.register("before-call.auto-scaling", self._record)
        self.ecs.meta.events.register("before-call.ecs", self._record)
        doc = json.loads(resources.files("servingctl_twin").joinpath("reference_registry.json").read_text())
        if shared_pool:
            doc["profiles"][OTHER]["pool"] = doc["profiles"][PROFILE]["pool"]
        vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # as awsvpc tasks need
        self.subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        self.sg = self.ec2.create_security_group(GroupName="tasks", Description="tasks", VpcId=vpc)["GroupId"]
        image = "ami-12c6146b"  # one of moto's default AMIs (describing them all takes ~20 s)
        for name, pool in doc["pools"].items():
            # One launch template per instance type of the pool, as Terraform makes them.
            for option in [pool, *pool.get("alternates", [])]:
                option["launch_template_id"] = self.ec2.create_launch_template(
                    LaunchTemplateName=f"{name}-{option['instance_type']}",
                    LaunchTemplateData={"ImageId": image, "InstanceType": option["instance_type"]},
                )["LaunchTemplate"]["LaunchTemplateId"]
            self.autoscaling.create_auto_scaling_group(
                AutoScalingGroupName=pool["asg_name"],
                LaunchTemplate={"LaunchTemplateId": pool["launch_template_id"]},
                MinSize=0,
                MaxSize=1,
                DesiredCapacity=0,
                VPCZoneIdentifier=self.subnet,
            )
            pool["asg_arn"] = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[pool["asg_name"]])[
                "AutoScalingGroups"
            ][0]["AutoScalingGroupARN"]
        lb = self.elbv2.create_load_balancer(Name="llm", Subnets=[self.subnet], Scheme="internal")["LoadBalancers"][0]
        for name, profile in doc["profiles"].items():
            self.ecs.create_cluster(clusterName=profile["cluster"])
            family = self.ecs.register_task_definition(
                family=name,
                networkMode="awsvpc",
                containerDefinitions=[{"name": "vllm", "image": "vllm/vllm-openai", "memory": 512, "essential": True}],
            )["taskDefinition"]["taskDefinitionArn"]
            self.ecs.create_service(
                cluster=profile["cluster"], serviceName=profile["service"], taskDefinition=family, desiredCount=0
            )
            tg = self.elbv2.create_target_group(
                Name=f"llm-{name}"[:32], Protocol="HTTP", Port=8000, VpcId=vpc, TargetType="ip", HealthCheckPath="/health"
            )["TargetGroups"][0]
            profile["target_group_arn"] = tg["TargetGroupArn"]
            profile["load_balancer_arn"] = lb["LoadBalancerArn"]
        self.registry: Registry = parse_registry(doc)
        self.container_instances: dict[str, str] = {}
        self._failed: list[dict[str, Any]] = []

    def _record(self, model: Any, **_: Any) -> None:
        self.calls.append(model.name)

    # ---- moves AWS would make ------------------------------------------------------------------
    def instances(self, pool: str) -> list[dict[str, Any]]:
        asg = self.registry.pools[pool].asg_name
        return self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[asg])["AutoScalingGroups"][0]["Instances"]

    def register_instances(self, profile: str = PROFILE) -> None:
        """The ECS agent on each InService instance registers it with the cluster."""
        spec = self.registry.profiles[profile]
        for instance in self.instances(spec.pool):
            if instance["InstanceId"] not in self.container_instances:
                arn = self.ecs.register_container_instance(
                    cluster=spec.cluster,
                    instanceIdentityDocument=json.dumps({"instanceId": instance["InstanceId"], "region": REGION}),
                )["containerInstance"]["containerInstanceArn"]
                self.container_instances[instance["InstanceId"]] = arn

    def place_task(self, profile: str = PROFILE) -> dict[str, Any]:
        """The service scheduler places a task (awsvpc ENI, group service:<name>)."""
        spec = self.registry.profiles[profile]
        return self.ecs.run_task(
            cluster=spec.cluster,
            taskDefinition=profile,
            launchType="EC2",
            group=f"service:{spec.service}",
            networkConfiguration={"awsvpcConfiguration": {"subnets": [self.subnet], "securityGroups": [self.sg]}},
        )["tasks"][0]

    def crash_task(self, task: dict[str, Any], reason: str, profile: str = PROFILE) -> None:
        """The container exits; ECS records the stopped reason."""
        self.ecs.stop_task(cluster=self.registry.profiles[profile].cluster, task=task["taskArn"], reason=reason)

    def register_target(self, task: dict[str, Any], profile: str = PROFILE) -> str:
        """The service registers the task's IP; moto reports registered IP targets healthy."""
        ip = next(d["value"] for a in task["attachments"] for d in a["details"] if d["name"] == "privateIPv4Address")
        self.elbv2.register_targets(
            TargetGroupArn=self.registry.profiles[profile].target_group_arn, Targets=[{"Id": ip, "Port": 8000}]
        )
        return ip

    def deregister_all(self, profile: str = PROFILE) -> None:
        tg = self.registry.profiles[profile].target_group_arn
        targets = self.elbv2.describe_target_health(TargetGroupArn=tg)["TargetHealthDescriptions"]
        if targets:
            self.elbv2.deregister_targets(TargetGroupArn=tg, Targets=[t["Target"] for t in targets])

    def fail_launches(self, message: str, pool: str = "g7e-2gpu") -> None:
        """moto records no scaling activities: answer DescribeScalingActivities like AWS after a failed
        launch (each call adds one more failed activity, newest first)."""
        activity = {
            "ActivityId": f"a{len(self._failed) + 1}",
            "AutoScalingGroupName": self.registry.pools[pool].asg_name,
            "Description": "Launching a new EC2 instance.  Status Reason: " + message,
            "Cause": (
                "At 2025-03-01T09:00:00Z an instance was started in response to a difference between desired and actual capacity"
            ),
            "StartTime": datetime.now(UTC),
            "StatusCode": "Failed",
            "StatusMessage": message,
            "Progress": 100,
        }
        self._failed.insert(0, activity)

        def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            return AWSResponse("https://autoscaling", 200, {}, None), {"Activities": list(self._failed)}

        if len(self._failed) == 1:
            self.autoscaling.meta.events.register("before-call.auto-scaling.DescribeScalingActivities", answer)

    def record_termination(self, instance_id: str, started: datetime, ended: datetime, pool: str = "g7e-2gpu") -> None:
        """moto records no scaling activities: list the group's termination of the instance as AWS does."""
        activity = {
            "ActivityId": f"t-{instance_id}",
            "AutoScalingGroupName": self.registry.pools[pool].asg_name,
            "Description": f"Terminating EC2 instance: {instance_id}",
            "Cause": "At 2025-03-01T09:00:00Z an instance was taken out of service in response to a difference between "
            "desired and actual capacity, shrinking the capacity from 1 to 0.",
            "StartTime": started,
            "EndTime": ended,
            "StatusCode": "Successful",
            "Progress": 100,
        }

        def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            return AWSResponse("https://autoscaling", 200, {}, None), {"Activities": [activity]}

        self.autoscaling.meta.events.register("before-call.auto-scaling.DescribeScalingActivities", answer)

    def service(self, profile: str = PROFILE) -> dict[str, Any]:
        spec = self.registry.profiles[profile]
        return self.ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"][0]

    def asg(self, pool: str = "g7e-2gpu") -> dict[str, Any]:
        name = self.registry.pools[pool].asg_name
        return self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # moto advances a task's status on every DescribeTasks; the World decides when tasks move.
    state_manager.set_transition(model_name="ecs::task", transition={"progression": "manual", "times": 10**9})
    with mock_aws():
        yield
    state_manager.unset_transition(model_name="ecs::task")


def running_executions() -> Any:
    """Step Functions with EXEC_START, EXEC_OTHER, EXEC_STOP and EXEC_STOP_2 RUNNING (lock owners are asked about)."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    role = "arn:aws:iam::123456789012:role/sfn"
    definition = json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}})
    for arn in (EXEC_START, EXEC_OTHER, EXEC_STOP, EXEC_STOP_2):
        machine, name = arn.split(":")[-2:]
        machine_arn = f"arn:aws:states:{REGION}:123456789012:stateMachine:{machine}"
        with contextlib.suppress(sfn.exceptions.StateMachineAlreadyExists):
            sfn.create_state_machine(name=machine, definition=definition, roleArn=role)
        assert sfn.start_execution(stateMachineArn=machine_arn, name=name)["executionArn"] == arn
    return sfn


def _deps(world: World, clock: FakeClock) -> Deps:
    return Deps(
        ecs=world.ecs,
        autoscaling=world.autoscaling,
        elbv2=world.elbv2,
        ec2=world.ec2,
        stepfunctions=running_executions(),
        store=MemoryStore(),
        registry=world.registry,
        clock=clock,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def world(aws_env: None) -> World:
    return World(shared_pool=False)


@pytest.fixture
def shared_world(aws_env: None) -> World:
    return World(shared_pool=True)


@pytest.fixture
def deps(world: World, clock: FakeClock) -> Deps:
    return _deps(world, clock)


@pytest.fixture
def shared_deps(shared_world: World, clock: FakeClock) -> Deps:
    return _deps(shared_world, clock)


def start_input(**extra: Any) -> dict[str, Any]:
    """A start_profile execution input with the default poll settings."""
    return {"profile": PROFILE, "poll": dict(FAST_POLL)} | extra


def copy_state(state: dict[str, Any]) -> dict[str, Any]:
    """Steps must not rely on mutating the state they are given (Step Functions passes JSON)."""
    return copy.deepcopy(json.loads(json.dumps(state)))
