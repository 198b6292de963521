"""Each module is documented and typed (read with python-hcl2), the version constraints admit
what the tests run and what users run, and the committed lock file matches them."""

from __future__ import annotations

import re
from pathlib import Path

import hcl2
import pytest
from hcl2 import SerializationOptions

TF_ROOT = Path(__file__).resolve().parents[3] / "infra" / "terraform"
HCL_FILES = sorted([*TF_ROOT.rglob("*.tf"), *TF_ROOT.rglob("*.tfvars"), *TF_ROOT.rglob("*.tfvars.example")])
MODULES = ["network", "alb", "cluster", "compute-pool", "serving-profile"]
OPTIONS = SerializationOptions(strip_string_quotes=True, explicit_blocks=False)


def load(path: Path) -> dict:
    """One HCL file as python-hcl2's dictionary."""
    with path.open() as handle:
        return hcl2.load(handle, serialization_options=OPTIONS)


def blocks(kind: str, module_dir: Path) -> dict[str, dict]:
    """Blocks of one kind (variable, output, ...) of a module directory, keyed by label."""
    found: dict[str, dict] = {}
    for tf in module_dir.glob("*.tf"):
        for block in load(tf).get(kind, []):
            found.update(block)
    return found


def test_the_layout_is_complete() -> None:
    assert len(HCL_FILES) >= 20
    for module in MODULES:
        directory = TF_ROOT / "modules" / module
        for name in ("main.tf", "variables.tf", "outputs.tf", "README.md"):
            assert (directory / name).is_file(), f"modules/{module}/{name} is missing"
    for name in ("versions.tf", "variables.tf", "outputs.tf", "README.md", "terraform.tfvars.example", "reference.auto.tfvars"):
        assert (TF_ROOT / name).is_file(), name


@pytest.mark.parametrize("module_dir", [TF_ROOT, *(TF_ROOT / "modules" / m for m in MODULES)], ids=lambda p: p.name)
def test_variables_and_outputs_are_typed_and_described(module_dir: Path) -> None:
    for name, variable in blocks("variable", module_dir).items():
        assert variable.get("description"), f"variable {name} has no description"
        assert "type" in variable, f"variable {name} has no type"
    for name, output in blocks("output", module_dir).items():
        assert output.get("description"), f"output {name} has no description"


@pytest.mark.parametrize("module_dir", [TF_ROOT, *(TF_ROOT / "modules" / m for m in MODULES)], ids=lambda p: p.name)
def test_module_readme_lists_its_inputs_and_outputs(module_dir: Path) -> None:
    readme = (module_dir / "README.md").read_text()
    for kind in ("variable", "output"):
        for name in blocks(kind, module_dir):
            assert f"`{name}`" in readme, f"{module_dir.name}/README.md does not mention {kind} `{name}`"


def test_versions_admit_the_tested_and_the_current_releases() -> None:
    # Terraform 1.11 and provider 5.100 are what runs here (local mirror); users get the current
    # 1.x and 6.x. The code avoids what differs between them (data.aws_region's name/region).
    (terraform,) = load(TF_ROOT / "versions.tf")["terraform"]
    assert terraform["required_version"] == ">= 1.11.0, < 2.0.0"
    (providers,) = terraform["required_providers"]
    assert providers["aws"] == {"source": "hashicorp/aws", "version": ">= 5.100.0, < 7.0.0"}
    assert "aws_region" not in "".join(p.read_text() for p in TF_ROOT.rglob("*.tf"))


# What provider 6.0.0 removed (its changelog's breaking changes) from the resource types used here.
REMOVED_IN_6 = {
    "aws_launch_template": ("elastic_gpu_specifications", "elastic_inference_accelerator"),
    "aws_ecs_task_definition": ("inference_accelerator",),
    "aws_eip": ("vpc",),
}


def test_nothing_provider_6_removed_is_used() -> None:
    # Provider 6.x cannot run here (the mirror holds 5.100 only); this keeps the code off what it dropped.
    for tf in TF_ROOT.rglob("*.tf"):
        for resource in load(tf).get("resource", []):
            for kind, instances in resource.items():
                for name, body in instances.items():
                    used = sorted(set(REMOVED_IN_6.get(kind, ())) & set(body))
                    assert used == [], f"{tf.name}: {kind}.{name} sets {used}, removed in provider 6.0"


def test_lock_file_pins_the_provider_with_hashes() -> None:
    lock = (TF_ROOT / ".terraform.lock.hcl").read_text()
    block = re.search(r'provider "registry.terraform.io/hashicorp/aws" \{(.*?)\n\}', lock, re.S)
    assert block, lock
    assert re.search(r'version\s+= "5\.100\.0"', block.group(1))
    assert re.search(r'constraints = ">= 5\.100\.0, < 7\.0\.0"', block.group(1))
    # h1: the unpacked package (what a local mirror holds, checked on these machines); zh: the
    # registry's zip of each platform (what init on a user's macOS, Windows or ARM machine checks).
    assert re.findall(r'"(h1:[A-Za-z0-9+/]{43}=)"', block.group(1)) == ["h1:edXOJWE4ORX8Fm+dpVpICzMZJat4AX0VRCAy/xkcOc0="]
    assert len(re.findall(r'"zh:[0-9a-f]{64}"', block.group(1))) == 15, (
        "the lock must carry the zh: checksum of every platform package"
    )


def test_checkov_skips_carry_a_reason() -> None:
    for tf in TF_ROOT.rglob("*.tf"):
        for line in tf.read_text().splitlines():
            if "checkov:skip" in line:
                assert re.search(r"#checkov:skip=CKV2?_[A-Z]+_\d+:\S.{10,}", line), (
                    f"{tf.name}: skip without a reason: {line.strip()}"
                )


def _fields_read(condition: str, variable: str) -> set[str]:
    """Leaf names of the inputs a validation condition reads (p.vllm.max_num_seqs -> max_num_seqs,
    var.pools[p.pool].gpu_count -> gpu_count, var.x -> x); the validated map itself is left out."""
    leaves = {m.split(".")[-1] for m in re.findall(r"\bp\.((?:[a-z_]+\.)*[a-z_]+)", condition)}
    leaves |= set(re.findall(r"var\.[a-z_]+\[[^\]]+\]\.([a-z_]+)", condition))
    leaves |= set(re.findall(r"var\.([a-z_]+)(?![\[a-z_])", condition))
    return leaves - {"pools", "profiles"} if variable in ("pools", "profiles") else leaves


def test_validation_messages_name_every_field_they_check() -> None:
    # terraform test's expect_failures proves which variable refuses bad input; this proves the
    # message then tells the user which field to fix (and, in the text, the allowed values).
    checked = 0
    for name, variable in blocks("variable", TF_ROOT).items():
        for validation in variable.get("validation", []):
            fields = _fields_read(validation["condition"], name)
            message = validation["error_message"]
            assert [f for f in sorted(fields) if f not in message] == [], (
                f"variable {name}: {message!r} does not name {sorted(fields)}"
            )
            checked += bool(fields)
    assert checked >= 25


def test_the_instance_role_has_only_the_agents_inline_grants() -> None:
    # No AWS managed policy (AmazonEC2ContainerServiceforEC2Role pulls from any repository and writes
    # any log group; AmazonSSMManagedInstanceCore reads every parameter), only the inline document.
    cluster = TF_ROOT / "modules" / "cluster"
    assert blocks("resource", cluster).get("aws_iam_role_policy_attachment") is None
    documents = {
        name: body
        for tf in cluster.glob("*.tf")
        for block in load(tf).get("data", [])
        for name, body in block.get("aws_iam_policy_document", {}).items()
    }
    document = documents["instance"]
    actions = {a for statement in document["statement"] for a in statement["actions"]}
    assert {a.split(":")[0] for a in actions} == {"ecs", "ssm", "ssmmessages"}
    assert not any(a.startswith(("ssm:Get", "ecr:", "logs:")) or "*" in a for a in actions)
    assert "ssm:UpdateInstanceInformation" in actions and "ecs:RegisterContainerInstance" in actions


def test_the_wake_rule_leaves_its_action_to_the_controller() -> None:
    """A wake-on-request profile's rule is pointed at the model or the waker by the controller
    (ModifyRule): Terraform must not flip it back on the next apply; the plain rule stays Terraform's."""
    rules = {
        name: body
        for block in load(TF_ROOT / "modules" / "serving-profile" / "main.tf")["resource"]
        for kind, named in block.items()
        if kind == "aws_lb_listener_rule"
        for name, body in named.items()
    }
    assert set(rules) == {"this", "wake"}
    assert rules["wake"]["lifecycle"] == [{"ignore_changes": ["action"]}]
    assert "lifecycle" not in rules["this"]
