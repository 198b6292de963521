"""The launch-failure classifier against AWS's real StatusMessage texts (with and without EC2 Fleet's
code prefix), the quota named with its Service Quotas code, and what the ladder does for each class.
Sources of the texts: the Amazon EC2 Auto Scaling user guide's troubleshooting pages, and activities
quoted in public issues (terraform-provider-aws #29866, Pulumi's and EKS node groups' reports)."""

from __future__ import annotations

import pytest

from servingctl.control.launch_failures import KINDS, classify, next_option, quota_of
from servingctl_twin.autoscaling.groups import LAUNCH_FAILURE_MESSAGES
from servingctl_twin.faults import LAUNCH_FAILURES

ICE_PLAIN = (
    "We currently do not have sufficient g7e.12xlarge capacity in the Availability Zone you requested (us-east-1a). "
    "Our system will be working on provisioning additional capacity. You can currently get g7e.12xlarge capacity by "
    "not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c. Launching EC2 instance failed."
)
ICE_FLEET = "Could not launch On-Demand Instances. InsufficientInstanceCapacity - " + ICE_PLAIN
VCPU_FLEET = (
    "Could not launch On-Demand Instances. VcpuLimitExceeded - You have requested more vCPU capacity than your "
    "current vCPU limit of 32 allows for the instance bucket that the specified instance type belongs to. Please visit "
    "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. Launching EC2 instance failed."
)
VCPU_PLAIN = VCPU_FLEET.removeprefix("Could not launch On-Demand Instances. VcpuLimitExceeded - ").replace("32", "0")
INSTANCES = (
    "You have requested more instances (1) than your current instance limit of 0 allows for the specified instance "
    "type. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. "
    "Launching EC2 instance failed."
)
UNSUPPORTED = (
    "Your requested instance type (t2.micro) is not supported in your requested Availability Zone (us-west-2d). "
    "Please retry your request by not specifying an Availability Zone or choosing us-west-2a, us-west-2b, us-west-2c. "
    "Launching EC2 instance failed."
)
PROFILE = (
    "Value (arn:aws:iam::961547496971:instance-profile/ecs/instances/name/instance-profile.name) for parameter "
    "iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN. Launching EC2 instance failed."
)
IMAGE = "The image id '[ami-4edb0327]' does not exist. Launching EC2 instance failed."
AMI_PENDING = "AMI ami-0abc1234 is pending, and cannot be run. Launching EC2 instance failed."
SECURITY_GROUP = "The security group 'sg-3d7bcc4d' does not exist in VPC 'vpc-be5433da'. Launching EC2 instance failed."
CONFIGURATION = (
    "The requested configuration is currently not supported. Please check the documentation for supported "
    "configurations. Launching EC2 instance failed."
)
KMS = "Client.InternalError: Client error on launch."
LIFECYCLE = (
    "Instance failed to complete user's Lifecycle Action: Lifecycle Action with token e85eb647-4fe0-4909-b341-a6c42d8aba1f "
    "was abandoned: Lifecycle Action Completed with ABANDON Result"
)


@pytest.mark.parametrize(
    ("message", "kind", "code"),
    [
        (ICE_PLAIN, "insufficient-capacity", "InsufficientInstanceCapacity"),
        (ICE_FLEET, "insufficient-capacity", "InsufficientInstanceCapacity"),
        (VCPU_FLEET, "quota", "VcpuLimitExceeded"),
        (VCPU_PLAIN, "quota", "VcpuLimitExceeded"),
        (INSTANCES, "quota", "InstanceLimitExceeded"),
        (UNSUPPORTED, "unsupported", "Unsupported"),
        ("Could not launch On-Demand Instances. Unsupported - " + UNSUPPORTED, "unsupported", "Unsupported"),
        (PROFILE, "launch-config", None),
        ("Could not launch On-Demand Instances. InvalidParameterValue - " + PROFILE, "launch-config", "InvalidParameterValue"),
        (IMAGE, "launch-config", None),
        (AMI_PENDING, "launch-config", None),
        (SECURITY_GROUP, "launch-config", None),
        (CONFIGURATION, "launch-config", None),
        ("Could not launch On-Demand Instances. Unsupported - " + CONFIGURATION, "launch-config", "Unsupported"),
        (KMS, "launch-config", None),
        (LIFECYCLE, "unknown", None),
        ("Authentication Failure. Launching EC2 instance failed.", "unknown", None),
    ],
)
def test_each_real_message_is_classified(message: str, kind: str, code: str | None) -> None:
    failure = classify("g7e.12xlarge", message)
    assert (failure.kind, failure.code, failure.message) == (kind, code, message)


def test_a_quota_is_named_with_its_service_quotas_code_and_the_limit_aws_gave() -> None:
    failure = classify("g7e.12xlarge", VCPU_FLEET)
    assert failure.quota is not None and (failure.quota.code, failure.limit) == ("L-DB2E81BA", 32)
    assert failure.summary() == (
        'quota: VcpuLimitExceeded, Service Quotas L-DB2E81BA "Running On-Demand G and VT instances", limit 32 vCPUs'
    )
    assert classify("p5.48xlarge", VCPU_PLAIN).summary().startswith("quota: VcpuLimitExceeded, Service Quotas L-417A185B")
    assert classify("x2iedn.xlarge", VCPU_PLAIN).summary() == (
        "quota: VcpuLimitExceeded, the On-Demand quota of the type's instance bucket, limit 0 vCPUs"
    )
    assert classify("g7e.2xlarge", ICE_FLEET).summary() == "insufficient-capacity (InsufficientInstanceCapacity)"


@pytest.mark.parametrize(
    ("itype", "code"),
    [
        ("g7e.12xlarge", "L-DB2E81BA"),
        ("g4dn.xlarge", "L-DB2E81BA"),
        ("vt1.3xlarge", "L-DB2E81BA"),
        ("p5.48xlarge", "L-417A185B"),
        ("inf2.xlarge", "L-1945791B"),
        ("m7i.large", "L-1216C47A"),
        ("trn1.2xlarge", None),
    ],
)
def test_quota_buckets_by_family(itype: str, code: str | None) -> None:
    quota = quota_of(itype)
    assert (quota.code if quota else None) == code


LADDER = ["g7e.2xlarge", "g7e.4xlarge", "p5.4xlarge", "g7e.8xlarge"]


@pytest.mark.parametrize(
    ("message", "index", "expected"),
    [
        (ICE_FLEET, 0, (1, [])),  # capacity is per type and zone: the next option
        (ICE_FLEET, 3, (None, [])),  # the last option: nothing left
        (UNSUPPORTED, 1, (2, [])),  # offerings are per type and zone: the next option
        (VCPU_FLEET, 0, (2, ["g7e.4xlarge"])),  # the G bucket is spent: the P type next, the G type passed over
        (VCPU_FLEET, 2, (3, [])),  # P's quota is spent: the G type is another bucket
        (INSTANCES, 1, (2, [])),
        (PROFILE, 0, (None, [])),  # every option's template shares the role: fail at once
        (IMAGE, 0, (None, [])),
        (LIFECYCLE, 0, (None, [])),  # unknown: AWS's words, at once
    ],
)
def test_what_the_ladder_does_after_each_class(message: str, index: int, expected: tuple[int | None, list[str]]) -> None:
    assert next_option(classify(LADDER[index], message), LADDER, index) == expected


def test_a_spent_quota_passes_over_every_later_option_of_its_bucket() -> None:
    ladder = ["g7e.2xlarge", "g7e.4xlarge", "g7e.8xlarge"]
    assert next_option(classify(ladder[0], VCPU_FLEET), ladder, 0) == (None, ["g7e.4xlarge", "g7e.8xlarge"])


@pytest.mark.parametrize("fault", sorted(LAUNCH_FAILURES))
def test_the_twins_message_of_each_fault_class_is_classified_as_that_class(fault: str) -> None:
    """The world's words for capacity-unavailable=TYPE:CLASS are read back as the class they play."""
    message = LAUNCH_FAILURE_MESSAGES[fault].format(
        itype="g7e.2xlarge",
        az="us-east-1a",
        others="us-east-1b, us-east-1c",
        profile="arn:aws:iam::123456789012:instance-profile/gpu",
        image="ami-0123",
    )
    expected = {
        "insufficient-capacity": "insufficient-capacity",
        "vcpu-limit": "quota",
        "instance-limit": "quota",
        "unsupported": "unsupported",
        "launch-template": "launch-config",
        "ami": "launch-config",
    }[fault]
    assert expected in KINDS and classify("g7e.2xlarge", message).kind == expected
    assert message.startswith("Could not launch On-Demand Instances. ") and message.endswith(" Launching EC2 instance failed.")
