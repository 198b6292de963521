"""The data plane through Terraform's own tools: formatted, valid on the pinned provider, and every
`terraform test` file (mock AWS provider: plans without credentials) passing in a user's copy
(terraform.tfvars copied from the example)."""

from __future__ import annotations

import json
import re
from pathlib import Path

TEST_FILES = sorted(p.name for p in (Path(__file__).resolve().parents[3] / "infra" / "terraform" / "tests").glob("*.tftest.hcl"))


def test_every_file_is_formatted(tf) -> None:
    proc = tf.run("fmt", "-check", "-recursive", "-diff", "-no-color")
    assert proc.returncode == 0, (
        f"terraform fmt would change these files (run `terraform fmt -recursive infra/terraform`):\n{proc.stdout}{proc.stderr}"
    )


def test_configuration_is_valid(tf) -> None:
    proc = tf.run("validate", "-json", "-no-color")
    report = json.loads(proc.stdout)
    problems = [f"{d['severity']}: {d['summary']}: {d.get('detail', '')}" for d in report["diagnostics"]]
    assert report["valid"] is True and proc.returncode == 0, problems
    # Deprecated attributes (e.g. data.aws_region's `name` on provider 6.x) show up as warnings.
    assert problems == []


def test_terraform_test_passes_every_run(tf, user_dir) -> None:
    # The files whose plans fixtures read run verbose there (reference_plan, limits_registry).
    others = [f"-filter=tests/{name}" for name in TEST_FILES if name not in tf.planned_files]
    assert others, "no terraform test files besides the planned ones"
    proc = tf.run("test", "-json", "-no-color", *others, cwd=user_dir)
    messages = tf.json_lines(proc.stdout)
    runs = {(m["test_run"]["path"], m["test_run"]["run"]): m["test_run"]["status"]
            for m in messages if m.get("type") == "test_run" and m["test_run"].get("progress") == "complete"}  # fmt: skip
    failed = {run: status for run, status in runs.items() if status != "pass"}
    errors = [f"{m.get('@testrun')}: {m['diagnostic']['summary']}: {m['diagnostic'].get('detail', '')}"
              for m in messages if m.get("type") == "diagnostic" and m["diagnostic"]["severity"] == "error"]  # fmt: skip
    assert failed == {} and errors == [], f"{failed}\n" + "\n".join(errors)
    (summary,) = [m["test_summary"] for m in messages if m.get("type") == "test_summary"]
    assert summary["status"] == "pass" and summary["failed"] == summary["errored"] == summary["skipped"] == 0
    assert {path for path, _ in runs} == {f"tests/{name}" for name in TEST_FILES if name not in tf.planned_files}
    assert summary["passed"] == len(runs) >= 15


def test_limits_run_passes(limits_registry) -> None:
    # The fixture fails unless tests/limits.tftest.hcl passes; its two profiles reach the registry.
    assert sorted(limits_registry["profiles"]) == ["high", "low"]


def test_reference_runs_pass(reference_plan) -> None:
    # The fixture fails unless both runs of tests/reference.tftest.hcl pass; the plan it returns
    # has one task definition, service, target group and listener rule per profile (the rule
    # Terraform owns whole: the reference profiles do not wake on request).
    resources = reference_plan["resources"]
    for profile in ("nemotron-nano", "deepseek-v4-flash"):
        for kind in ("aws_ecs_task_definition", "aws_ecs_service", "aws_lb_target_group"):
            assert f'module.profile["{profile}"].{kind}.this' in resources
        assert f'module.profile["{profile}"].aws_lb_listener_rule.this[0]' in resources
        assert f'module.profile["{profile}"].aws_lb_listener_rule.wake[0]' not in resources
    assert len([a for a in resources if a.endswith("aws_ecs_task_definition.this")]) == 2


def _assigned(path: Path) -> set[str]:
    """Variables a .tfvars file assigns (top-level `name =` lines)."""
    return {m.group(1) for m in re.finditer(r"^([a-z_]+)\s*=", path.read_text(), re.M)}


def test_example_and_reference_tfvars_set_different_variables(tf) -> None:
    # A user's terraform.tfvars loads before reference.auto.tfvars, -var-file after it: with no
    # variable in both, `terraform test -var-file=terraform.tfvars.example` (the README's by-hand
    # command) plans what the user's copy plans.
    example, reference = _assigned(tf.root / "terraform.tfvars.example"), _assigned(tf.root / "reference.auto.tfvars")
    assert example >= {"model_weights_bucket", "hub_token_secret_arn", "availability_zones"}
    assert reference == {"pools", "profiles"}
    assert example & reference == set()
