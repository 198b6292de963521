"""The twin as the test bed of the control plane: real ASL files, real handlers, the world simulator.

One twin per test module (moto's state is process-wide); AWS's delays are 1/100 of real ones (Delays
scaled by 0.1 at time scale 10) and the executions poll every second. Every test leaves the twin idle:
the `idle_twin` fixture checks it and, when a test failed half-way, brings everything down.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from servingctl.store import DynamoStore
from servingctl.store.models import Lock, ProfileState, Session
from servingctl_twin.twin import REFERENCE_REGISTRY, ExecutionResult, Twin
from servingctl_twin.world import Delays

POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
START_DEADLINES = {"capacity_s": 60, "task_s": 60, "health_s": 60}
# A third profile sharing deepseek-v4-flash's pool, for the shared-pool cases.
SHARED = "qwen3-coder"
# One profile on its own pool per fault case: a start counts failed launches and stopped tasks from
# 30 s (clock skew) before its scale-out, which on the twin's compressed clock reaches into the
# previous test's.
ISOLATED = ("t-cap", "t-crash", "t-sick", "t-prot", "t-protfail", "t-thr", "t-bug", "t-dead", "t-hang", "t-abort", "t-kill")
TIME_SCALE = 10.0
DELAYS = Delays().scaled(0.1)


def start_input(profile: str, **extra: Any) -> dict[str, Any]:
    """start_profile input with the test poll settings and deadlines (extra keys override)."""
    return {"profile": profile, "poll": POLL, "deadlines": START_DEADLINES, **extra}


def stop_input(profile: str) -> dict[str, Any]:
    """stop_profile input with the test poll settings."""
    return {"profile": profile, "poll": POLL, "deadlines": {"lock_s": 120, "drain_s": 60, "terminate_s": 60}}


def warm_pool_registry(
    directory: Path, profile_name: str, pool_name: str, group: str, warm_pool: dict[str, Any], tg_digit: str
) -> Path:
    """The reference registry plus profile_name: a copy of deepseek-v4-flash on pool_name, a copy of
    its pool (Auto Scaling group and capacity provider named group) with this warm pool."""
    document = json.loads(REFERENCE_REGISTRY.read_text())
    pool = json.loads(json.dumps(document["pools"]["g7e-2gpu"]))
    pool.update(asg_name=group, capacity_provider=group)
    pool["asg_arn"] = pool["asg_arn"].replace("self-hosted-llm-poc-g7e-2gpu", group)
    pool["warm_pool"] = warm_pool
    document["pools"][pool_name] = pool
    profile = json.loads(json.dumps(document["profiles"]["deepseek-v4-flash"]))
    profile.update(
        service=group,
        pool=pool_name,
        model=profile_name,
        target_group_arn=profile["target_group_arn"].replace("llm-deepseek-v4-flash", f"llm-{profile_name}")[:-1] + tg_digit,
        routing_header={"name": "X-LLM-Profile", "value": profile_name},
    )
    document["profiles"][profile_name] = profile
    path = directory / "registry.json"
    path.write_text(json.dumps(document))
    return path


def test_registry(directory: Path, isolated: tuple[str, ...] = ISOLATED) -> Path:
    """The reference registry plus SHARED on pool g7e-2gpu and one profile on its own pool per
    isolated name, written to directory."""
    document = json.loads(REFERENCE_REGISTRY.read_text())
    shared = json.loads(json.dumps(document["profiles"]["deepseek-v4-flash"]))
    shared.update(
        service="self-hosted-llm-poc-qwen3-coder",
        target_group_arn=shared["target_group_arn"].replace("llm-deepseek-v4-flash", "llm-qwen3-coder")[:-1] + "3",
        routing_header={"name": "X-LLM-Profile", "value": SHARED},
        model=SHARED,
    )
    document["profiles"][SHARED] = shared
    for number, name in enumerate(isolated, start=10):
        pool = json.loads(json.dumps(document["pools"]["g7e-1gpu"]))
        pool.update(asg_name=f"servingctl-test-{name}", capacity_provider=f"servingctl-test-{name}")
        pool["asg_arn"] = pool["asg_arn"].replace("self-hosted-llm-poc-g7e-1gpu", pool["asg_name"])
        document["pools"][name] = pool
        profile = json.loads(json.dumps(document["profiles"]["nemotron-nano"]))
        profile.update(
            service=f"servingctl-test-{name}",
            pool=name,
            model=name,
            target_group_arn=profile["target_group_arn"].replace("llm-nemotron-nano", f"llm-{name}")[:-2] + str(number),
            routing_header={"name": "X-LLM-Profile", "value": name},
        )
        document["profiles"][name] = profile
    path = directory / "registry.json"
    path.write_text(json.dumps(document))
    return path


class Probe:
    """What a user would check on the twin: AWS state, DynamoDB state, and the world."""

    shared = SHARED
    start_input = staticmethod(start_input)
    stop_input = staticmethod(stop_input)

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        assert twin.registry is not None
        self.registry = twin.registry
        self.ecs, self.asg, self.elbv2 = (twin.client(s) for s in ("ecs", "autoscaling", "elbv2"))
        resource = boto3.resource(
            "dynamodb",
            endpoint_url=twin.endpoint_url,
            region_name=twin.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.store = DynamoStore(twin.table_name, resource=resource)
        self.table = resource.Table(twin.table_name)

    def start(self, profile: str, name: str, **extra: Any) -> ExecutionResult:
        """Run start_profile for profile as execution start-<profile>-<name>."""
        return self.twin.run("start_profile", start_input(profile, **extra), name=f"start-{profile}-{name}")

    def stop(self, profile: str, name: str) -> ExecutionResult:
        """Run stop_profile for profile as execution stop-<profile>-<name>."""
        return self.twin.run("stop_profile", stop_input(profile), name=f"stop-{profile}-{name}")

    def service(self, profile: str) -> dict[str, Any]:
        """describe_services of the profile's service."""
        spec = self.registry.profiles[profile]
        return self.ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"][0]

    def group(self, profile: str) -> dict[str, Any]:
        """describe_auto_scaling_groups of the profile's pool."""
        name = self.registry.pool_of(profile).asg_name
        return self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]

    def targets(self, profile: str) -> list[str]:
        """Target health states in the profile's target group."""
        arn = self.registry.profiles[profile].target_group_arn
        return [
            t["TargetHealth"]["State"] for t in self.elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
        ]

    def running_tasks(self, profile: str) -> list[dict[str, Any]]:
        """The profile's tasks whose desired status is RUNNING."""
        spec = self.registry.profiles[profile]
        arns = self.ecs.list_tasks(cluster=spec.cluster, serviceName=spec.service)["taskArns"]
        return self.ecs.describe_tasks(cluster=spec.cluster, tasks=arns)["tasks"] if arns else []

    def stopped_tasks(self, profile: str) -> list[dict[str, Any]]:
        """The profile's stopped tasks."""
        spec = self.registry.profiles[profile]
        arns = self.ecs.list_tasks(cluster=spec.cluster, serviceName=spec.service, desiredStatus="STOPPED")["taskArns"]
        return self.ecs.describe_tasks(cluster=spec.cluster, tasks=arns)["tasks"] if arns else []

    def state(self, profile: str) -> ProfileState:
        """The profile's recorded state."""
        return self.store.get_profile(profile)

    def locks(self, profile: str) -> list[Lock]:
        """The profile's and its pool's lock records still present."""
        names = [f"profile:{profile}", f"pool:{self.registry.profiles[profile].pool}"]
        return [lock for lock in (self.store.get_lock(n) for n in names) if lock is not None]

    def sessions(self, profile: str) -> list[Session]:
        """The profile's ledger sessions."""
        return self.store.list_sessions(profile)

    def terminated_at(self, profile: str) -> datetime | None:
        """When the group last finished terminating an instance (its "Terminating EC2 instance"
        activity), None when it never terminated one."""
        name = self.registry.pools[self.registry.profiles[profile].pool].asg_name
        activities = self.asg.describe_scaling_activities(AutoScalingGroupName=name)["Activities"]
        ended = [a["EndTime"] for a in activities if a["Description"].startswith("Terminating EC2 instance: ")]
        return max(ended, default=None)

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
        """Poll condition until true; fail naming what never happened (a liveness bound, not a timing check)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"never happened: {what}")
            time.sleep(0.1)

    def assert_nothing_running(self, profile: str) -> None:
        """Service at 0 with no task, ASG at 0 with no instance (waits for the world to terminate it)."""
        service = self.service(profile)
        assert (service["desiredCount"], service["runningCount"], service["pendingCount"]) == (0, 0, 0)
        assert self.running_tasks(profile) == []
        group = self.group(profile)
        assert (group["DesiredCapacity"], group["MinSize"]) == (0, 0)
        self.wait_for(f"{group['AutoScalingGroupName']} has no instance", lambda: not self.group(profile)["Instances"])
        assert self.twin.world is not None and profile not in self.twin.world.model_servers()

    def bring_down(self) -> None:
        """Stop everything the way an operator would (used only after a failed test)."""
        for spec in self.registry.profiles.values():
            self.ecs.update_service(cluster=spec.cluster, service=spec.service, desiredCount=0)
        for pool in self.registry.pools.values():
            group = self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool.asg_name])["AutoScalingGroups"][0]
            ids = [i["InstanceId"] for i in group["Instances"]]
            if ids:
                self.asg.set_instance_protection(AutoScalingGroupName=pool.asg_name, InstanceIds=ids, ProtectedFromScaleIn=False)
            self.asg.update_auto_scaling_group(AutoScalingGroupName=pool.asg_name, MinSize=0, DesiredCapacity=0)
        for name in self.registry.profiles:
            self.wait_for(f"{name} down", lambda n=name: not self.running_tasks(n) and not self.group(n)["Instances"])
        with self.table.batch_writer() as batch:
            for item in self.table.scan()["Items"]:
                batch.delete_item(Key={"pk": item["pk"], "sk": item["sk"]})


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin of the test registry for the module."""
    registry = test_registry(tmp_path_factory.mktemp("registry"))
    with Twin(registry, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS) as running:
        yield running


@pytest.fixture
def probe(twin: Twin) -> Iterator[Probe]:
    """A Probe of the module's twin; after the test: no fault left on, and everything down if the test failed."""
    checker = Probe(twin)
    yield checker
    twin.set_faults()
    assert twin.world is not None and twin.world.error is None, twin.world.error
    if any(checker.running_tasks(p) or checker.group(p)["Instances"] for p in checker.registry.profiles):
        checker.bring_down()
