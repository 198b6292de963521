"""`servingctl costs idle`: the standing cost a month of each egress option, the ALB and the warm
pools' volumes, priced from the catalog, with the option read from Terraform's output."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
import pytest

import servingctl_cli.runs  # noqa: F401 - bound `connect` at import: imported before a test patches it
from servingctl.costs import load_catalog
from servingctl.costs.idle import ENDPOINT_SERVICES, EgressPlan, idle_costs
from servingctl_cli import client
from servingctl_cli.main import main

WARM = [{"pool": "g7e-2gpu", "instances": 1, "volume_gib": 400, "volume_monthly_usd": 75.5, "standing_monthly_usd": 75.5}]


def test_nat_and_endpoints_priced_from_the_catalog_at_730_hours() -> None:
    catalog = load_catalog(None)
    nat = {line.price_key: line for line in idle_costs(catalog, "us-east-1", EgressPlan.of("nat"))}
    assert nat["nat-gateway-hour"].monthly_usd == pytest.approx(0.045 * 730)
    assert nat["public-ipv4-hour"].monthly_usd == pytest.approx(0.005 * 730)
    assert nat["alb-hour"].monthly_usd == pytest.approx(0.0225 * 730)
    assert "vpce-az-hour" not in nat
    endpoints = {line.price_key: line for line in idle_costs(catalog, "us-east-1", EgressPlan.of("endpoints"))}
    assert set(endpoints) == {"vpce-az-hour", "alb-hour"}  # no NAT, no public address
    line = endpoints["vpce-az-hour"]
    assert line.count == len(ENDPOINT_SERVICES) * 2 == 16
    assert line.monthly_usd == pytest.approx(0.01 * 730 * 16)


def test_a_region_without_prices_is_unpriced_not_zero() -> None:
    lines = idle_costs(load_catalog(None), "eu-west-1", EgressPlan.of("nat"))
    assert [line.monthly_usd for line in lines] == [None, None, None]


@pytest.fixture
def no_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SERVINGCTL_API_URL", raising=False)


def test_the_cli_adds_the_warm_pools_from_the_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_api: None
) -> None:
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, json={"sessions": [], "monthly": [], "total_cost_usd": 0, "warm_pools": WARM})
    )
    monkeypatch.setattr(client, "connect", lambda args: client.Client("http://127.0.0.1:1", local=True, transport=transport))
    assert main(["costs", "idle", "--egress", "nat", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["egress"] == "nat" and answer["egress_from"] == "--egress" and answer["not_included"] is None
    assert answer["lines"][-1] == {
        "item": "warm pool g7e-2gpu: stopped instances' volumes",
        "count": 1,
        "price_key": "ebs-gp3-*-month",
        "monthly_usd": 75.5,
    }
    assert answer["total_monthly_usd"] == pytest.approx((0.045 + 0.005 + 0.0225) * 730 + 75.5)


def test_without_an_api_the_warm_pools_are_said_to_be_missing(
    capsys: pytest.CaptureFixture[str], no_api: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["costs", "idle", "--egress", "endpoints"]) == 0
    out = capsys.readouterr().out
    assert "total: 133.22 USD a month" in out  # 16 x 0.01 x 730 + 0.0225 x 730
    assert "warm pools' volumes not included: no API" in " ".join(out.split())


def _fake_terraform(bindir: Path, script: str) -> None:
    bindir.mkdir()
    path = bindir / "terraform"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    ("script", "code", "said"),
    [
        ('echo \'{"mode": "endpoints", "nat_gateways": 0}\'', 0, '"egress": "endpoints"'),
        ('echo \'{"mode": "nat", "nat_gateways": 1}\'', 0, '"egress": "nat"'),
        ("echo 'Error: Output \"egress\" not found' >&2; exit 1", 2, "--terraform-dir: `terraform output egress` failed in"),
        ('echo \'{"mode": "vpn"}\'', 2, "gave mode 'vpn', not nat or endpoints"),
    ],
)
def test_the_deployed_option_is_read_from_terraform_output(
    script: str,
    code: int,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_api: None,
) -> None:
    _fake_terraform(tmp_path / "bin", script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert main(["costs", "idle", "--terraform-dir", str(tmp_path), "--json"]) == code
    captured = capsys.readouterr()
    assert said in (captured.out if code == 0 else captured.err)
    if code == 0:
        assert json.loads(captured.out)["egress_from"] == f"terraform output in {tmp_path}"
