"""The api Lambda handler over moto (the reference registry's AWS resources, the state table, two state
machines whose executions stay RUNNING until stopped), driven with the sample events of events/api/."""

from __future__ import annotations

import copy
import importlib.util
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

from servingctl.store import DynamoStore
from servingctl.store.dynamodb import create_table
from servingctl_twin.twin import REFERENCE_REGISTRY, publish_parameters

REPO = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
TABLE = "servingctl"
SHARED = "qwen3-coder"  # a third profile on deepseek-v4-flash's pool
SSM_PATH = "/servingctl/registry"
PASS = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Pass", "End": True}}})


class Api:
    """Calls the real handler with API Gateway events; exposes the store and AWS clients to check."""

    def __init__(self, module: Any, store: DynamoStore, sfn: Any, start_arn: str, stop_arn: str) -> None:
        self.module, self.store, self.sfn = module, store, sfn
        self.start_arn, self.stop_arn = start_arn, stop_arn

    def event(self, name: str, **changes: Any) -> dict[str, Any]:
        """events/api/<name>.json with top-level fields replaced."""
        event = json.loads((REPO / "events" / "api" / f"{name}.json").read_text())
        event.update(changes)
        return event

    def call(self, event: dict[str, Any]) -> tuple[int, Any]:
        """(status, parsed body) of the handler's answer."""
        context = type(
            "Context",
            (),
            {
                "function_name": "servingctl-api",
                "memory_limit_in_mb": 256,
                "aws_request_id": str(uuid.uuid4()),
                "invoked_function_arn": f"arn:aws:lambda:{REGION}:123456789012:function:servingctl-api",
                "get_remaining_time_in_millis": lambda self: 30000,
            },
        )()
        answer = self.module.lambda_handler(event, context)
        return answer["statusCode"], json.loads(answer["body"]) if answer.get("body") else None

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """A request shaped from the sample event of the same kind, with this method, path and body."""
        from servingctl.api.routes import openapi_document
        from servingctl_twin.apigateway.apigw import proxy_event

        raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        base = {"Content-Type": "application/json"} if body is not None else {}
        event = proxy_event(method, path, base | (headers or {}), raw, list(openapi_document()["paths"]))
        return self.call(event)


def registry_file(directory: Path) -> Path:
    """The reference registry plus SHARED on deepseek-v4-flash's pool, with moto's ARNs filled in later."""
    document = json.loads(REFERENCE_REGISTRY.read_text())
    shared = copy.deepcopy(document["profiles"]["deepseek-v4-flash"])
    shared.update(
        service="self-hosted-llm-poc-qwen3-coder", model=SHARED, routing_header={"name": "X-LLM-Profile", "value": SHARED}
    )
    document["profiles"][SHARED] = shared
    path = directory / "registry.json"
    path.write_text(json.dumps(document))
    return path


def _bootstrap(registry: Path) -> None:
    """Cluster, services, pools and target groups in moto, with their ARNs written into the registry."""
    document = json.loads(registry.read_text())
    ec2, ecs, asg, elbv2 = (boto3.client(s, region_name=REGION) for s in ("ec2", "ecs", "autoscaling", "elbv2"))
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    for name, pool in document["pools"].items():
        ec2.create_launch_template(
            LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"}
        )
        asg.create_auto_scaling_group(
            AutoScalingGroupName=pool["asg_name"],
            LaunchTemplate={"LaunchTemplateName": name},
            MinSize=0,
            MaxSize=1,
            DesiredCapacity=0,
            VPCZoneIdentifier=subnet,
        )
        pool["asg_arn"] = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool["asg_name"]])["AutoScalingGroups"][0][
            "AutoScalingGroupARN"
        ]
    lb = elbv2.create_load_balancer(Name="llm", Subnets=[subnet], Scheme="internal")["LoadBalancers"][0]
    for name, profile in document["profiles"].items():
        ecs.create_cluster(clusterName=profile["cluster"])
        family = ecs.register_task_definition(
            family=name, containerDefinitions=[{"name": "vllm", "image": "vllm", "memory": 512}]
        )
        ecs.create_service(
            cluster=profile["cluster"],
            serviceName=profile["service"],
            taskDefinition=family["taskDefinition"]["taskDefinitionArn"],
            desiredCount=0,
        )
        tg = elbv2.create_target_group(Name=f"llm-{name}"[:32], Protocol="HTTP", Port=8000, VpcId=vpc, TargetType="ip")
        profile["target_group_arn"] = tg["TargetGroups"][0]["TargetGroupArn"]
        profile["load_balancer_arn"] = lb["LoadBalancerArn"]
    registry.write_text(json.dumps(document))
    # The handler reads it from SSM by its path, as deployed.
    publish_parameters(boto3.client("ssm", region_name=REGION), document, SSM_PATH)
    parameters.clear_caches()


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """A fresh moto account, table, state machines and handler module per test."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        registry = registry_file(tmp_path)
        _bootstrap(registry)
        resource = boto3.resource("dynamodb", region_name=REGION)
        create_table(TABLE, resource=resource)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        role = "arn:aws:iam::123456789012:role/states"
        start = sfn.create_state_machine(name="servingctl-start-profile", definition=PASS, roleArn=role)["stateMachineArn"]
        stop = sfn.create_state_machine(name="servingctl-stop-profile", definition=PASS, roleArn=role)["stateMachineArn"]
        for key, value in {
            "SERVINGCTL_REGISTRY": f"ssm:{SSM_PATH}",
            "SERVINGCTL_TABLE": TABLE,
            "START_STATE_MACHINE_ARN": start,
            "STOP_STATE_MACHINE_ARN": stop,
            "POWERTOOLS_SERVICE_NAME": "servingctl",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }.items():
            monkeypatch.setenv(key, value)
        spec = importlib.util.spec_from_file_location(f"api_app_{uuid.uuid4().hex[:8]}", REPO / "functions" / "api" / "app.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield Api(module, DynamoStore(TABLE, resource=resource), sfn, start, stop)


def now() -> datetime:
    """The wall clock (the handler uses the system clock)."""
    return datetime.now(UTC)
