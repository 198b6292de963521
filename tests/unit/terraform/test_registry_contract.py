"""The registry parameter Terraform publishes, evaluated from the HCL with the shipped inputs and
checked against the package's JSON Schema and the controller's own loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from servingctl.registry.loader import parse_registry

PACKAGE = Path(__file__).resolve().parents[3] / "layers" / "core" / "servingctl"
SSM_ADVANCED_LIMIT = 8192


@pytest.fixture
def published(tf, root) -> dict:
    """The registry document exactly as aws_ssm_parameter.registry stores it (jsonencode'd)."""
    body = root.resource_body("resource", "aws_ssm_parameter", "registry")
    value = tf.hcleval.Scope(root).eval(body.attributes["value"])
    return json.loads(value)


def test_registry_validates_against_the_package_schema(published: dict) -> None:
    schema = json.loads((PACKAGE / "registry" / "schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(published)


def test_controller_loader_accepts_the_registry(published: dict) -> None:
    registry = parse_registry(json.dumps(published))
    assert registry.region == "us-east-1"
    assert registry.pool_of("deepseek-v4-flash").instance_type == "g7e.12xlarge"
    assert registry.profiles_on_pool("g7e-1gpu") == ["nemotron-nano"]


def test_registry_lists_every_input_pool_and_profile(tf, root, published: dict) -> None:
    assert sorted(published["pools"]) == sorted(root.var("pools"))
    assert sorted(published["profiles"]) == sorted(root.var("profiles"))
    for name, profile in published["profiles"].items():
        assert profile["pool"] == root.var("profiles")[name]["pool"]
        assert profile["routing_header"] == {"name": "X-LLM-Profile", "value": name}


def test_registry_names_the_resources_terraform_creates(tf, root, published: dict) -> None:
    # Names and ARNs come from the module outputs, so they are the ones the controller must call.
    pool = published["pools"]["g7e-2gpu"]
    assert pool["asg_name"] == "self-hosted-llm-poc-g7e-2gpu"
    assert pool["asg_arn"].endswith(":autoScalingGroupName/self-hosted-llm-poc-g7e-2gpu")
    assert pool["capacity_provider"] == "self-hosted-llm-poc-g7e-2gpu"
    profile = published["profiles"]["deepseek-v4-flash"]
    assert profile["cluster"] == "self-hosted-llm-poc"
    assert profile["service"] == "self-hosted-llm-poc-deepseek-v4-flash"
    assert "targetgroup/llm-deepseek-v4-flash/" in profile["target_group_arn"]
    assert profile["endpoint_url"].startswith("http://internal-self-hosted-llm-poc-")
    assert root.output("service_arns") == [
        f"arn:aws:ecs:us-east-1:123456789012:service/self-hosted-llm-poc/{p['service']}"
        for _, p in sorted(published["profiles"].items())
    ]


def test_serving_blocks_match_the_reference_registry(published: dict) -> None:
    # The controller's reference registry (used by the local twin) and the Terraform inputs agree
    # on every serving option and pool shape they both state.
    reference = json.loads((PACKAGE / "local" / "reference_registry.json").read_text())
    for name, ref_profile in reference["profiles"].items():
        ours = published["profiles"][name]["serving"]
        assert {k: ours[k] for k in ref_profile["serving"]} == ref_profile["serving"], name
    for name, ref_pool in reference["pools"].items():
        ours = published["pools"][name]
        assert (ours["instance_type"], ours["gpu_count"]) == (ref_pool["instance_type"], ref_pool["gpu_count"])


def test_deepseek_command_line_is_the_reference_one(published: dict) -> None:
    args = published["profiles"]["deepseek-v4-flash"]["serving"]["args"]
    pairs = dict(zip(args[::1], args[1::1]))
    assert pairs["--speculative-config"] == '{"method":"mtp","num_speculative_tokens":1}'
    assert json.loads(pairs["--compilation-config"])["cudagraph_capture_sizes"] == [1, 2, 4, 8]
    assert pairs["--max-num-batched-tokens"] == "4096"
    assert pairs["--kv-cache-dtype"] == "fp8"
    assert pairs["--revision"] == "48bfe38c62be14e8d82f9e3be12fe5d30a2e38c8"


def test_health_deadline_covers_the_model_load_grace_period(root, published: dict) -> None:
    for name, profile in published["profiles"].items():
        assert profile["start"]["health_timeout_s"] >= root.var("profiles")[name]["model_load_s"]


def test_registry_fits_an_ssm_parameter(tf, root) -> None:
    body = root.resource_body("resource", "aws_ssm_parameter", "registry")
    value = tf.hcleval.Scope(root).eval(body.attributes["value"])
    assert len(value.encode()) <= SSM_ADVANCED_LIMIT
    assert tf.hcleval.Scope(root).eval(body.attributes["type"]) == "String"
