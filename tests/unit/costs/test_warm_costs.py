"""The standing cost of warm (stopped) instances: gp3 volume, throughput and IOPS above the baseline,
counted in the ledger and the self-hosted side of the comparison."""

from __future__ import annotations

import json
from importlib import resources
from types import SimpleNamespace
from typing import Any

import pytest

from servingctl.api.service import warm_pool_costs
from servingctl.costs import CompareInput, compare, load_catalog, volume_monthly_usd, warm_pool_monthly_usd
from servingctl.registry import parse_registry
from servingctl.registry.models import PoolVolume

REGISTRY = parse_registry(json.loads(resources.files("servingctl_twin").joinpath("reference_registry.json").read_text()))
CATALOG = load_catalog()


def test_the_reference_g7e_volume_costs_its_size_throughput_and_iops_a_month() -> None:
    volume = REGISTRY.pools["g7e-2gpu"].volume
    assert volume == PoolVolume(size_gib=400, throughput_mibps=1000, iops=16000)
    # 400 x 0.08 + (1000 - 125) x 0.04 + (16000 - 3000) x 0.005
    assert volume_monthly_usd(CATALOG, "us-east-1", volume) == pytest.approx(32 + 35 + 65)


@pytest.mark.parametrize(("mibps", "iops", "extra"), [(125, 3000, 0.0), (126, 3000, 0.04), (125, 3001, 0.005)])
def test_gp3_baseline_throughput_and_iops_are_free_and_one_unit_past_is_billed(mibps: int, iops: int, extra: float) -> None:
    volume = PoolVolume(size_gib=100, throughput_mibps=mibps, iops=iops)
    assert volume_monthly_usd(CATALOG, "us-east-1", volume) == pytest.approx(8.0 + extra)


def test_an_unpriced_region_says_so() -> None:
    assert volume_monthly_usd(CATALOG, "eu-west-1", PoolVolume(size_gib=100, throughput_mibps=125, iops=3000)) is None


def test_a_warm_pool_stands_while_the_server_does_not_run_and_a_spare_while_it_does() -> None:
    pool = REGISTRY.pools["g7e-2gpu"]
    assert warm_pool_monthly_usd(CATALOG, "us-east-1", REGISTRY.pools["g7e-1gpu"], 100) == 0.0  # no warm pool
    assert warm_pool_monthly_usd(CATALOG, "us-east-1", pool) == 0.0  # runs all month: the volume is in the hourly price
    assert warm_pool_monthly_usd(CATALOG, "us-east-1", pool, 365) == pytest.approx(132 / 2)
    spare = pool.model_copy(update={"warm_pool": pool.warm_pool.model_copy(update={"min_size": 1})})
    assert warm_pool_monthly_usd(CATALOG, "us-east-1", spare) == pytest.approx(132)


def test_the_comparison_adds_the_standing_cost_to_the_self_hosted_side() -> None:
    base = {
        "output_tok_s": 358.41,
        "input_tokens": 254,
        "output_tokens": 256,
        "api_input_usd_per_m": 0.22,
        "api_output_usd_per_m": 0.66,
        "hourly_usd": 12.17,
        "hours": 200,
    }
    without, standing = compare(CompareInput(**base)), compare(CompareInput(**base, standing_monthly_usd=100.0))
    assert standing.self_hosted_monthly_usd == pytest.approx(without.self_hosted_monthly_usd + 100.0)
    assert standing.api_monthly_usd == without.api_monthly_usd


class _WarmPoolApi:
    """DescribeWarmPool answering the given instances for one group."""

    def __init__(self, group: str, lifecycles: list[str]) -> None:
        self.group, self.lifecycles = group, lifecycles

    def describe_warm_pool(self, AutoScalingGroupName: str) -> dict[str, Any]:
        found = self.lifecycles if AutoScalingGroupName == self.group else []
        return {"Instances": [{"InstanceId": f"i-{n}", "LifecycleState": s} for n, s in enumerate(found)]}


def test_the_ledger_lists_each_warm_pool_with_its_standing_cost() -> None:
    deps = SimpleNamespace(
        registry=REGISTRY, catalog=CATALOG, autoscaling=_WarmPoolApi(REGISTRY.pools["g7e-2gpu"].asg_name, ["Warmed:Stopped"])
    )
    [row] = warm_pool_costs(deps)  # type: ignore[arg-type]
    assert (row.pool, row.instances, row.volume_gib, row.volume_monthly_usd, row.standing_monthly_usd) == (
        "g7e-2gpu",
        1,
        400,
        132.0,
        132.0,
    )
