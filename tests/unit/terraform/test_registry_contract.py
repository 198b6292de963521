"""The registry parameter Terraform publishes, as planned by `terraform test` (mock provider) for
the reference inputs, checked against the package's JSON Schema and the controller's own loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from servingctl.registry.loader import parse_registry

PACKAGE = Path(__file__).resolve().parents[3] / "layers" / "core" / "servingctl"


def test_registry_validates_against_the_package_schema(published: dict) -> None:
    schema = json.loads((PACKAGE / "registry" / "schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(published)


def test_controller_loader_accepts_the_registry(published: dict) -> None:
    registry = parse_registry(json.dumps(published))
    assert registry.region == "us-east-1"
    assert registry.pool_of("deepseek-v4-flash").instance_type == "g7e.12xlarge"
    assert registry.profiles_on_pool("g7e-1gpu") == ["nemotron-nano"]
    load = registry.profile("deepseek-v4-flash").load
    assert load is not None and load.health_check_grace_s == 922 and load.weights_pass_s == 161


def test_controller_loader_accepts_every_value_terraform_accepts_at_its_limits(limits_registry: dict) -> None:
    # tests/limits.tftest.hcl plans the profile fields at the bounds their validations allow: the
    # controller must load that registry, or a plan that passes would deploy a registry it refuses.
    schema = json.loads((PACKAGE / "registry" / "schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(limits_registry)
    registry = parse_registry(json.dumps(limits_registry))
    low, high = registry.profile("low"), registry.profile("high")
    assert (low.idle.window_minutes, high.idle.window_minutes) == (5, 1440)
    assert (low.default_lease_minutes, high.default_lease_minutes, high.max_lease_minutes) == (5, 10080, 44640)
    assert low.schedule is not None and low.schedule.enforced and low.schedule.override == "stopped"
    assert low.start.task_timeout_s == low.start.health_timeout_s == low.start.max_task_failures == 1


def test_registry_names_the_resources_terraform_creates(published: dict, reference_plan: dict) -> None:
    # Names come from the module outputs, so they are the ones the controller must call.
    resources = reference_plan["resources"]
    pool = published["pools"]["g7e-2gpu"]
    assert pool["asg_name"] == resources['module.pool["g7e-2gpu"].aws_autoscaling_group.this']["name"] == "self-hosted-llm-poc-g7e-2gpu"
    assert pool["capacity_provider"] == resources['module.pool["g7e-2gpu"].aws_ecs_capacity_provider.this']["name"]
    profile = published["profiles"]["deepseek-v4-flash"]
    assert profile["cluster"] == resources["module.cluster.aws_ecs_cluster.this"]["name"] == "self-hosted-llm-poc"
    assert profile["service"] == resources['module.profile["deepseek-v4-flash"].aws_ecs_service.this']["name"]
    assert profile["service"] == "self-hosted-llm-poc-deepseek-v4-flash"
    assert profile["routing_header"] == {"name": "X-LLM-Profile", "value": "deepseek-v4-flash"}


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


def test_start_deadlines_cover_the_load_time(published: dict) -> None:
    # ECS replaces a task still unhealthy after the grace period: the controller must wait longer.
    for name, profile in published["profiles"].items():
        assert profile["start"]["health_timeout_s"] > profile["load"]["health_check_grace_s"], name
        assert profile["start"]["task_timeout_s"] >= profile["load"]["weights_pass_s"], name


def test_registry_is_a_plain_string_parameter(reference_plan: dict) -> None:
    # The loader (above) refuses a document over SSM's 8 KB; the controller reads it undecrypted.
    parameter = reference_plan["resources"]["aws_ssm_parameter.registry"]
    assert (parameter["type"], parameter["tier"]) == ("String", "Intelligent-Tiering")
