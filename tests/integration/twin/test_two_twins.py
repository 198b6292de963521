"""Two twins in one process play two regions and share nothing: a profile started on one is not seen on
the other, nor its scaling activities, target health, executions, faults or world events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from servingctl_twin.twin import REFERENCE_REGISTRY, Twin
from servingctl_twin.world import Delays

PROFILE = "nemotron-nano"
POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
START_DEADLINES = {"capacity_s": 60, "task_s": 60, "health_s": 60}
OTHER_REGION = "us-west-2"


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Twin, Twin]]:
    document = REFERENCE_REGISTRY.read_text()
    assert json.loads(document)["region"] == "us-east-1"
    west = Path(tmp_path_factory.mktemp("west")) / "registry.json"
    west.write_text(document.replace("us-east-1", OTHER_REGION))  # the region and every ARN of the registry
    with (
        Twin(time_scale=10, delays=Delays().scaled(0.1)) as east,
        Twin(west, time_scale=10, delays=Delays().scaled(0.1)) as other,
    ):
        yield east, other


def _state(twin: Twin) -> dict[str, object]:
    """What a user of the twin sees of the profile: service, group, activities, targets, executions, events."""
    spec, pool = twin.registry.profiles[PROFILE], twin.registry.pool_of(PROFILE)
    ecs, asg, elbv2, sfn = (twin.client(s) for s in ("ecs", "autoscaling", "elbv2", "stepfunctions"))
    [service] = ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"]
    [group] = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool.asg_name])["AutoScalingGroups"]
    assert twin.world is not None
    return {
        "desired": service["desiredCount"],
        "running": service["runningCount"],
        "tasks": len(ecs.list_tasks(cluster=spec.cluster, serviceName=spec.service)["taskArns"]),
        "instances": len(group["Instances"]),
        "activities": len(asg.describe_scaling_activities(AutoScalingGroupName=pool.asg_name)["Activities"]),
        "targets": [
            t["TargetHealth"]["State"]
            for t in elbv2.describe_target_health(TargetGroupArn=spec.target_group_arn)["TargetHealthDescriptions"]
        ],
        "executions": len(sfn.list_executions(stateMachineArn=twin.state_machines["start_profile"])["executions"]),
        "launches": len(twin.world.events_of("launch")),
        "throttled": [e.detail for e in twin.world.events_of("throttled")],
        "model_servers": sorted(twin.world.model_servers()),
    }


def test_a_profile_started_on_one_twin_is_not_seen_on_the_other(twins: tuple[Twin, Twin]) -> None:
    east, west = twins
    assert (east.region, west.region) == ("us-east-1", OTHER_REGION)
    assert east.bucket_name != west.bucket_name
    before = _state(west)
    assert before == {
        "desired": 0,
        "running": 0,
        "tasks": 0,
        "instances": 0,
        "activities": 0,
        "targets": [],
        "executions": 0,
        "launches": 0,
        "throttled": [],
        "model_servers": [],
    }
    east.set_faults("throttle-once")

    result = east.run("start_profile", {"profile": PROFILE, "poll": POLL, "deadlines": START_DEADLINES}, timeout_s=240)

    assert result.status == "SUCCEEDED", (result.error, result.cause)
    started = _state(east)
    assert started["desired"] == 1 and started["running"] == 1 and started["tasks"] == 1 and started["instances"] == 1
    assert started["targets"] == ["healthy"] and started["executions"] == 1 and started["model_servers"] == [PROFILE]
    assert started["activities"] and started["launches"] and started["throttled"]  # east's activities, launch, faults
    assert _state(west) == before  # nothing of it in the other region's twin


def test_a_region_a_twin_of_the_process_plays_is_refused_to_another(twins: tuple[Twin, Twin]) -> None:
    east, _ = twins
    with pytest.raises(RuntimeError, match="already plays region us-east-1"):
        Twin(time_scale=10).start()
    # The refused twin touched nothing of the one playing the region.
    assert east.site is not None and east.client("ecs").list_clusters()["clusterArns"]
    assert east.world is not None and east.world.error is None
