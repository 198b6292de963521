"""Why an Auto Scaling launch failed, by class, from the scaling activity's StatusMessage, and which
option of a pool's instance-type ladder the start tries next for each class.

DescribeScalingActivities says only StatusCode Failed (or Cancelled); the reason is EC2's error text in
StatusMessage, ending "Launching EC2 instance failed." Groups that launch through EC2 Fleet put the
EC2 error code in front ("Could not launch On-Demand Instances. VcpuLimitExceeded - You have ..."),
others give the text alone ("We currently do not have sufficient g7e.12xlarge capacity in the
Availability Zone you requested (us-east-1a). ..."), so a class is read from the code when there is
one and from AWS's documented wording otherwise (Amazon EC2 Auto Scaling user guide,
"Troubleshoot ... EC2 instance launch failures", "... capacity limits", "... AMI issues", "... launch
templates"). The classes, and what the ladder does:

- insufficient-capacity (InsufficientInstanceCapacity): EC2 has no capacity of the type in the zone
  now. The next option: capacity is per type and zone.
- quota (VcpuLimitExceeded, InstanceLimitExceeded): the account's On-Demand quota of the type's
  bucket is used up; for G and VT types that is Service Quotas L-DB2E81BA "Running On-Demand G and VT
  instances", which counts the vCPUs of every running instance of the bucket. The next option
  outside that bucket (P, Inf, Standard types have quotas of their own). An option of the same
  bucket is skipped, not tried: it could fit only with fewer vCPUs than the refused type, and a
  pool's alternates (its GPU count and memory) are the same or larger sizes. The record names the
  options skipped and the quota to raise.
- unsupported (Unsupported): the type is not offered in the group's Availability Zones. The next
  option: offerings are per type and zone.
- launch-config (a launch template, AMI, instance profile, security group, key pair or block device
  error, "The requested configuration is currently not supported"): the start fails at once.
  Terraform builds every option's launch template from the same AMI, role, security groups and
  volume, so the next type would fail the same way, and one that did not would hide the broken
  template behind a more expensive type; a person must fix the template.
- unknown (any other text, a cancelled launch): the start fails at once with AWS's words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["insufficient-capacity", "quota", "unsupported", "launch-config", "unknown"]
KINDS: tuple[Kind, ...] = ("insufficient-capacity", "quota", "unsupported", "launch-config", "unknown")
# The classes after which the ladder moves on (quota only outside the refused type's bucket).
MOVES_ON: frozenset[Kind] = frozenset({"insufficient-capacity", "quota", "unsupported"})

# "Could not launch On-Demand Instances. <EC2 error code> - <EC2 message>" (launches through EC2 Fleet).
_CODE = re.compile(r"Could not launch (?:On-Demand|Spot) Instances\. ([A-Za-z][A-Za-z0-9.]*) - ")
# EC2 error codes of each class (EC2 API reference, error codes).
_CODES: dict[str, Kind] = {
    "InsufficientInstanceCapacity": "insufficient-capacity",
    "InsufficientCapacity": "insufficient-capacity",
    "VcpuLimitExceeded": "quota",
    "InstanceLimitExceeded": "quota",
    "InvalidAMIID.NotFound": "launch-config",
    "InvalidAMIID.Malformed": "launch-config",
    "InvalidAMIID.Unavailable": "launch-config",
    "InvalidLaunchTemplateId.NotFound": "launch-config",
    "InvalidLaunchTemplateId.VersionNotFound": "launch-config",
    "InvalidLaunchTemplateName.NotFoundException": "launch-config",
    "InvalidGroup.NotFound": "launch-config",
    "InvalidKeyPair.NotFound": "launch-config",
    "InvalidBlockDeviceMapping": "launch-config",
    "InvalidParameterValue": "launch-config",
    "InvalidParameterCombination": "launch-config",
    "UnauthorizedOperation": "launch-config",
}
# AWS's wording of each class, for messages without a code (first match wins; most specific first).
_TEXTS: tuple[tuple[Kind, str, re.Pattern[str]], ...] = (
    ("quota", "VcpuLimitExceeded", re.compile(r"requested more vCPU capacity than your current vCPU limit")),
    ("quota", "InstanceLimitExceeded", re.compile(r"requested more instances \(\d+\) than your current instance limit")),
    (
        "insufficient-capacity",
        "InsufficientInstanceCapacity",
        re.compile(r"We currently do not have sufficient \S+ capacity|^Insufficient capacity\."),
    ),
    (
        "unsupported",
        "Unsupported",
        re.compile(r"Your requested instance type \([^)]*\) is not supported in your requested Availability Zone"),
    ),
    (
        "launch-config",
        "",
        re.compile(
            r"launch template|image id|\bAMI\b|\bami-[0-9a-f]+|iamInstanceProfile|Instance Profile|security group|key pair"
            r"|requested configuration is currently not supported|Client\.InternalError|virtualName|block device"
            r"|device name|architecture|Placement groups? may not|Availability Zone is no longer supported",
            re.IGNORECASE,
        ),
    ),
)
_LIMIT = re.compile(r"current (?:vCPU|instance) limit of (\d+)")


@dataclass(frozen=True)
class Quota:
    """An EC2 On-Demand quota in Service Quotas (service ec2): its code and name."""

    code: str
    name: str


# On-Demand instance buckets by the family's leading letters (Service Quotas, Amazon EC2). Each counts vCPUs.
G_AND_VT = Quota("L-DB2E81BA", "Running On-Demand G and VT instances")
_BUCKETS: dict[str, Quota] = {
    "g": G_AND_VT,
    "vt": G_AND_VT,
    "p": Quota("L-417A185B", "Running On-Demand P instances"),
    "inf": Quota("L-1945791B", "Running On-Demand Inf instances"),
    **dict.fromkeys(
        ("a", "c", "d", "h", "i", "m", "r", "t", "z"),
        Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ),
}


def quota_of(instance_type: str) -> Quota | None:
    """The On-Demand quota an instance type counts against (None for a bucket not in the table)."""
    letters = re.match(r"[a-z]+", instance_type.split(".", 1)[0])
    return _BUCKETS.get(letters.group(0)) if letters else None


@dataclass(frozen=True)
class LaunchFailure:
    """One failed launch: its class, EC2's error code (when known), AWS's message and, for a quota, which."""

    kind: Kind
    code: str | None
    message: str
    quota: Quota | None = None
    limit: int | None = None

    def summary(self) -> str:
        """The class with what names it, e.g. 'quota: VcpuLimitExceeded, Service Quotas L-DB2E81BA "...", limit 0 vCPUs'."""
        if self.kind == "quota":
            which = (
                f'Service Quotas {self.quota.code} "{self.quota.name}"'
                if self.quota
                else "the On-Demand quota of the type's instance bucket"
            )
            unit = {"VcpuLimitExceeded": " vCPUs", "InstanceLimitExceeded": " instances"}.get(self.code or "", "")
            limit = f", limit {self.limit}{unit}" if self.limit is not None else ""
            return f"quota: {self.code}, {which}{limit}"
        return f"{self.kind} ({self.code})" if self.code else self.kind


def classify(instance_type: str, message: str) -> LaunchFailure:
    """The class of a failed launch of instance_type from the activity's StatusMessage."""
    found = _CODE.search(message)
    code = found.group(1) if found else None
    kind: Kind | None = _CODES.get(code) if code else None
    if kind is None or kind == "launch-config":
        # A code alone can be broad (InvalidParameterValue): the text names the class when it can.
        for text_kind, text_code, pattern in _TEXTS:
            if pattern.search(message):
                kind, code = text_kind, code or text_code or None
                break
    if kind is None:
        return LaunchFailure("unknown", code, message)
    limit = _LIMIT.search(message) if kind == "quota" else None
    return LaunchFailure(
        kind, code, message, quota_of(instance_type) if kind == "quota" else None, int(limit.group(1)) if limit else None
    )


def next_option(failure: LaunchFailure, types: list[str], index: int) -> tuple[int | None, list[str]]:
    """After types[index] failed: the index of the option to try next (None: the start fails) and
    the options passed over on the way (a quota's own bucket)."""
    if failure.kind not in MOVES_ON:
        return None, []
    skipped = []
    for later in range(index + 1, len(types)):
        if failure.kind == "quota" and quota_of(types[later]) is not None and quota_of(types[later]) == quota_of(types[index]):
            skipped.append(types[later])
            continue
        return later, skipped
    return None, skipped
