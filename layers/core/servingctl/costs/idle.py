"""What the deployment costs a month while nothing runs: the NAT gateway and its public IPv4
address, or the interface VPC endpoints that replace it (per AZ), the internal ALB's hours, and the
volumes of warm (stopped) instances; priced from the catalog, each line with its catalog key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servingctl.costs.catalog import PriceCatalog
from servingctl.schema.comparison import HOURS_PER_MONTH

Egress = Literal["nat", "endpoints"]
# The interface endpoints Terraform's egress = "endpoints" creates (infra/terraform/modules/network).
ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr", "logs", "ssm", "ecs", "ecs-agent", "ecs-telemetry", "sts")
ENDPOINT_AZS = 2


@dataclass(frozen=True)
class EgressPlan:
    """What the network runs all month: NAT gateways, or interface endpoints in endpoint_azs zones."""

    mode: Egress
    nat_gateways: int
    interface_endpoints: tuple[str, ...]
    endpoint_azs: int

    @classmethod
    def of(cls, mode: Egress) -> EgressPlan:
        """The plan Terraform's network module makes for an egress option."""
        if mode == "nat":
            return cls("nat", 1, (), 0)
        return cls("endpoints", 0, ENDPOINT_SERVICES, ENDPOINT_AZS)


@dataclass(frozen=True)
class IdleLine:
    """One standing cost: what it is, how many, the catalog key, USD a month (None: not in the catalog)."""

    item: str
    count: int
    price_key: str
    monthly_usd: float | None


def idle_costs(catalog: PriceCatalog, region: str, plan: EgressPlan, load_balancers: int = 1) -> list[IdleLine]:
    """The network's and the ALB's standing cost a month (hourly price x hours in a month x count)."""

    def hourly(key: str, count: int) -> float | None:
        price = catalog.infrastructure.get(f"{region}/{key}")
        return None if price is None or price.hourly_usd is None else price.hourly_usd * HOURS_PER_MONTH * count

    lines = []
    if plan.nat_gateways:
        lines.append(
            IdleLine("NAT gateway", plan.nat_gateways, "nat-gateway-hour", hourly("nat-gateway-hour", plan.nat_gateways))
        )
        lines.append(
            IdleLine(
                "NAT gateway's public IPv4", plan.nat_gateways, "public-ipv4-hour", hourly("public-ipv4-hour", plan.nat_gateways)
            )
        )
    if plan.interface_endpoints:
        count = len(plan.interface_endpoints) * plan.endpoint_azs
        lines.append(
            IdleLine(
                f"interface endpoints ({', '.join(plan.interface_endpoints)}) x {plan.endpoint_azs} AZs",
                count,
                "vpce-az-hour",
                hourly("vpce-az-hour", count),
            )
        )
    lines.append(
        IdleLine("internal ALB (hours; no LCU while idle)", load_balancers, "alb-hour", hourly("alb-hour", load_balancers))
    )
    return lines
