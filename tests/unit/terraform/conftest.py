"""Fixtures of the Terraform data-plane tests: the HCL evaluator, a fake apply-time resolver and
one cached checkov run per session."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
TF_ROOT = REPO / "infra" / "terraform"
ACCOUNT = "123456789012"


def _load_hcleval():
    spec = importlib.util.spec_from_file_location("servingctl_tests_hcleval", Path(__file__).with_name("hcleval.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


hcleval = _load_hcleval()


def fake_apply_values(ref: Any, attr: str) -> Any:
    """What AWS would return after apply, shaped like the real ARNs, ids and DNS names."""
    region = ref.module.config.region
    if ref.mode == "data" and ref.type == "aws_region":
        return {"region": region, "name": region}[attr]
    if ref.mode == "data" and ref.type == "aws_partition":
        return {"partition": "aws"}[attr]

    def name() -> str:
        return ref.argument("name")

    suffix = f"{zlib.crc32(repr((ref.module.address, ref.type, ref.name, ref.index)).encode()):016d}"
    known = {
        ("aws_autoscaling_group", "name"): name,
        ("aws_autoscaling_group", "arn"): lambda: (
            f"arn:aws:autoscaling:{region}:{ACCOUNT}:autoScalingGroup:{suffix[:8]}-0000-0000-0000-{suffix[:12]}"
            f":autoScalingGroupName/{name()}"
        ),
        ("aws_ecs_capacity_provider", "name"): name,
        ("aws_cloudwatch_log_group", "name"): name,
        ("aws_ecs_cluster", "name"): name,
        ("aws_ecs_cluster", "arn"): lambda: f"arn:aws:ecs:{region}:{ACCOUNT}:cluster/{name()}",
        ("aws_ecs_service", "name"): name,
        ("aws_ecs_service", "id"): lambda: (
            f"arn:aws:ecs:{region}:{ACCOUNT}:service/{ref.argument('cluster').rsplit('/', 1)[-1]}/{name()}"
        ),
        ("aws_lb_target_group", "arn"): lambda: f"arn:aws:elasticloadbalancing:{region}:{ACCOUNT}:targetgroup/{name()}/{suffix}",
        ("aws_lb", "arn"): lambda: f"arn:aws:elasticloadbalancing:{region}:{ACCOUNT}:loadbalancer/app/{name()}/{suffix}",
        ("aws_lb", "dns_name"): lambda: f"internal-{name()}-{suffix[:10]}.{region}.elb.amazonaws.com",
        ("aws_lb_listener", "arn"): lambda: f"arn:aws:elasticloadbalancing:{region}:{ACCOUNT}:listener/app/x/{suffix}",
        ("aws_ssm_parameter", "name"): name,
        ("aws_ssm_parameter", "arn"): lambda: f"arn:aws:ssm:{region}:{ACCOUNT}:parameter{name()}",
        ("aws_subnet", "id"): lambda: f"subnet-{suffix[:17]}",
        ("aws_vpc", "id"): lambda: f"vpc-{suffix[:17]}",
        ("aws_vpc", "cidr_block"): lambda: ref.argument("cidr_block"),
        ("aws_security_group", "id"): lambda: f"sg-{suffix[:17]}",
        ("aws_iam_instance_profile", "arn"): lambda: f"arn:aws:iam::{ACCOUNT}:instance-profile/{name()}",
    }
    if (ref.type, attr) not in known:
        raise hcleval.HclEvalError(f"the test resolver has no apply-time value for {ref.type}.{ref.name}.{attr}")
    return known[(ref.type, attr)]()


def example_values() -> dict:
    """The shipped inputs (reference.auto.tfvars, then terraform.tfvars.example) as Python values."""
    exprs = hcleval.read_tfvars(TF_ROOT / "reference.auto.tfvars", TF_ROOT / "terraform.tfvars.example")
    return {name: hcleval.Scope(None).eval(expr) for name, expr in exprs.items()}


def make_root(values: dict) -> Any:
    """Root module with the given input variable values."""
    root = hcleval.Module(TF_ROOT, {k: (lambda v=v: v) for k, v in values.items()}, hcleval.Config(fake_apply_values))
    root.config.region = root.var("region")
    return root


@pytest.fixture(scope="session")
def tf() -> SimpleNamespace:
    """The evaluator and helpers, for tests (pytest's importlib mode cannot import conftest)."""
    return SimpleNamespace(
        hcleval=hcleval,
        root_dir=TF_ROOT,
        repo=REPO,
        example_values=example_values,
        make_root=make_root,
        fake_apply_values=fake_apply_values,
    )


@pytest.fixture
def root():
    """The root module with the shipped example inputs."""
    return make_root(example_values())


@pytest.fixture(scope="session")
def checkov_report() -> dict:
    """One checkov run over infra/terraform per session (JSON report)."""
    binary = os.environ.get("SERVINGCTL_CHECKOV") or str(REPO / ".venv-checkov" / "bin" / "checkov")
    if not Path(binary).is_file():
        pytest.fail(f"checkov not found at {binary}: run `make checkov` (SERVINGCTL_CHECKOV names the binary)")
    proc = subprocess.run(
        [binary, "-d", str(TF_ROOT), "--framework", "terraform", "--output", "json", "--compact", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"checkov printed no JSON report (exit {proc.returncode}): {proc.stderr[-2000:]}")
    if isinstance(report, list):  # one entry per framework when several ran
        (report,) = [r for r in report if r.get("check_type") == "terraform"]
    return report
