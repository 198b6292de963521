"""Service Quotas' moto patch: GetServiceQuota answers the applied EC2 quota of running G and VT
instances (L-DB2E81BA) as AWS does; moto 5.2.5 knows only the VPC service's quotas and answers every
other service NoSuchResourceException. A test sets the applied value (`Quotas.applied`) to play an
account whose quota is too low (a new account's is often 0)."""

from __future__ import annotations

from typing import Any

from moto.servicequotas.models import ServiceQuotasBackend

from servingctl_twin.patching import Patch, original, part_of

G_AND_VT = "L-DB2E81BA"
# The quotas the twin plays: (service, quota code) -> (quota name, unit).
KNOWN = {("ec2", G_AND_VT): ("Running On-Demand G and VT instances", "None")}
# What the twin's account has applied by default: enough vCPUs for the reference's two pools at once
# (g7e.2xlarge 8 + g7e.12xlarge 48).
DEFAULT_APPLIED = {("ec2", G_AND_VT): 64.0}


class Quotas:
    """The twin account's applied quota values of one region (service, code) -> value."""

    def __init__(self) -> None:
        self.applied: dict[tuple[str, str], float] = dict(DEFAULT_APPLIED)


def _get_service_quota(self: ServiceQuotasBackend, service_code: str, quota_code: str) -> dict[str, Any]:
    """The applied value of a quota the twin plays, in GetServiceQuota's Quota shape."""
    quotas = part_of(self.region_name, Quotas)
    key = (service_code, quota_code)
    if quotas is None or key not in KNOWN or key not in quotas.applied:
        return dict(original("ServiceQuotasBackend.get_service_quota")(self, service_code, quota_code))
    name, unit = KNOWN[key]
    return {
        "ServiceCode": service_code,
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{self.region_name}:{self.account_id}:{service_code}/{quota_code}",
        "QuotaCode": quota_code,
        "QuotaName": name,
        "Value": quotas.applied[key],
        "Unit": unit,
        "Adjustable": True,
        "GlobalQuota": False,
        "QuotaAppliedAtLevel": "ACCOUNT",
    }


PATCHES = [
    # GetServiceQuota of the EC2 G and VT vCPU quota (moto knows only VPC's quotas).
    Patch(
        "ServiceQuotasBackend.get_service_quota",
        ServiceQuotasBackend,
        "get_service_quota",
        ("self", "service_code", "quota_code"),
        _get_service_quota,
    ),
]
