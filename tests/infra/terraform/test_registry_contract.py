"""The registry parameters Terraform publishes, as planned by `terraform test` (mock provider) for
the reference inputs, at its limits and at 50 profiles, read back with the controller's own
layout (servingctl.registry.layout) and checked against the package's JSON Schema and loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from servingctl.registry.layout import SSM_STANDARD_BYTES, parameters
from servingctl.registry.loader import parse_registry
from servingctl.registry.models import MAX_PROFILES

PACKAGE = Path(__file__).resolve().parents[3] / "layers" / "core" / "servingctl"
REFERENCE_REGISTRY = Path(__file__).resolve().parents[3] / "twin" / "servingctl_twin" / "reference_registry.json"


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
    assert (
        pool["asg_name"]
        == resources['module.pool["g7e-2gpu"].aws_autoscaling_group.this']["name"]
        == "self-hosted-llm-poc-g7e-2gpu"
    )
    assert pool["capacity_provider"] == resources['module.pool["g7e-2gpu"].aws_ecs_capacity_provider.this']["name"]
    profile = published["profiles"]["deepseek-v4-flash"]
    assert profile["cluster"] == resources["module.cluster.aws_ecs_cluster.this"]["name"] == "self-hosted-llm-poc"
    assert profile["service"] == resources['module.profile["deepseek-v4-flash"].aws_ecs_service.this']["name"]
    assert profile["service"] == "self-hosted-llm-poc-deepseek-v4-flash"
    assert profile["routing_header"] == {"name": "X-LLM-Profile", "value": "deepseek-v4-flash"}


def test_serving_blocks_match_the_reference_registry(published: dict) -> None:
    # The controller's reference registry (used by the local twin) and the Terraform inputs agree
    # on every serving option and pool shape they both state.
    reference = json.loads((REFERENCE_REGISTRY).read_text())
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


def _written(plan: dict) -> dict[str, dict]:
    return {r["name"]: r for a, r in plan["resources"].items() if a.startswith("aws_ssm_parameter.registry_")}


def test_registry_parameters_are_plain_strings(reference_plan: dict) -> None:
    # The controller reads them undecrypted; Intelligent-Tiering moves one past 4 KB to Advanced.
    written = _written(reference_plan)
    assert len(written) == 5
    assert {(p["type"], p["tier"]) for p in written.values()} == {("String", "Intelligent-Tiering")}


def test_terraform_writes_the_parameters_the_twin_writes(published: dict, reference_plan: dict) -> None:
    # One layout for both: the names and values Terraform plans are servingctl.registry.layout's
    # (which the twin publishes with) for the same document.
    written = {name: json.loads(p["value"]) for name, p in _written(reference_plan).items()}
    ours = {name: json.loads(value) for name, value in parameters(published, "/self-hosted-llm-poc/registry").items()}
    assert written == ours


def test_fifty_profiles_are_published_and_read_back(fifty_plan: dict, tf) -> None:
    written = _written(fifty_plan)
    assert len(written) == 2 * MAX_PROFILES + 1
    assert max(len(p["value"].encode()) for p in written.values()) <= SSM_STANDARD_BYTES
    document = tf.read_back(fifty_plan, "/self-hosted-llm-poc/registry")
    jsonschema.Draft202012Validator(json.loads((PACKAGE / "registry" / "schema.json").read_text())).validate(document)
    registry = parse_registry(document)
    assert len(registry.profiles) == len(registry.pools) == MAX_PROFILES
    assert registry.pool_of("model-49").asg_name == "self-hosted-llm-poc-pool-49"


def test_every_service_is_tagged_with_its_profile_and_pool(reference_plan: dict) -> None:
    # The reconciler finds running capacity by these tags when the registry no longer names it.
    for name, pool in (("deepseek-v4-flash", "g7e-2gpu"), ("nemotron-nano", "g7e-1gpu")):
        tags = reference_plan["resources"][f'module.profile["{name}"].aws_ecs_service.this']["tags"]
        assert {k: tags[k] for k in ("servingctl:profile", "servingctl:pool")} == {
            "servingctl:profile": name,
            "servingctl:pool": pool,
        }
