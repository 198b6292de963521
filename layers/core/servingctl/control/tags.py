"""Running capacity found by its tags, whatever the registry says: servingctl:profile on an ECS
service and servingctl:pool on an Auto Scaling group, as Terraform and the twin tag them. The
reconciler stops what a known profile runs and reports, never guesses at, capacity tagged for a
profile or pool nobody describes any more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types_boto3_autoscaling import AutoScalingClient
    from types_boto3_autoscaling.type_defs import FilterTypeDef
    from types_boto3_ecs import ECSClient

PROFILE_TAG = "servingctl:profile"
POOL_TAG = "servingctl:pool"
# DescribeServices takes at most 10 services a call.
DESCRIBE_SERVICES_MAX = 10


@dataclass(frozen=True)
class TaggedCapacity:
    """Running capacity found by its tags: profile -> "service S: N desired, M running", pool -> group."""

    profiles: dict[str, str] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)


def tagged_capacity(ecs: ECSClient, autoscaling: AutoScalingClient, clusters: Iterable[str]) -> TaggedCapacity:
    """Services (tagged servingctl:profile) that want or run tasks and groups (tagged servingctl:pool)
    that have or want instances, in the given clusters and the account's region."""
    profiles: dict[str, str] = {}
    for cluster in sorted(set(clusters)):
        arns = [a for page in ecs.get_paginator("list_services").paginate(cluster=cluster) for a in page["serviceArns"]]
        for start in range(0, len(arns), DESCRIBE_SERVICES_MAX):
            chunk = arns[start : start + DESCRIBE_SERVICES_MAX]
            for service in ecs.describe_services(cluster=cluster, services=chunk, include=["TAGS"])["services"]:
                tags = {t["key"]: t["value"] for t in service.get("tags", [])}
                busy = service.get("desiredCount", 0) + service.get("runningCount", 0) + service.get("pendingCount", 0)
                if PROFILE_TAG in tags and busy:
                    profiles[tags[PROFILE_TAG]] = (
                        f"service {service['serviceName']} in {cluster}: {service.get('desiredCount', 0)} "
                        f"desired, {service.get('runningCount', 0)} running"
                    )
    pools: dict[str, str] = {}
    filters: list[FilterTypeDef] = [{"Name": "tag-key", "Values": [POOL_TAG]}]
    for page in autoscaling.get_paginator("describe_auto_scaling_groups").paginate(Filters=filters):
        for group in page["AutoScalingGroups"]:
            tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
            if POOL_TAG in tags and (group["DesiredCapacity"] or group.get("Instances")):
                pools[tags[POOL_TAG]] = (
                    f"group {group['AutoScalingGroupName']}: desired {group['DesiredCapacity']}, "
                    f"{len(group.get('Instances', []))} instance(s)"
                )
    return TaggedCapacity(profiles, pools)
