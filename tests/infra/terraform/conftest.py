"""Fixtures of the Terraform data-plane tests: the terraform CLI on infra/terraform (initialised by
`make tf-init`, which picks the local provider mirror or the registry), a copy of the configuration
set up as the README tells a user (terraform.tfvars copied from the example), the reference plan
from `terraform test` with the mock provider in that copy, and one cached checkov run per session."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
TF_ROOT = REPO / "infra" / "terraform"
DATA_DIR = Path(os.environ.get("TF_DATA_DIR") or REPO / ".cache" / "terraform")


def terraform(*args: str, cwd: Path = TF_ROOT, stdin: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run terraform in infra/terraform (or a copy of it) on the initialised data directory (no
    colour, no prompts)."""
    binary = shutil.which("terraform")
    if binary is None:
        pytest.fail("terraform not found on PATH: install Terraform 1.11 or later")
    _init_once()
    env = {**os.environ, "TF_DATA_DIR": str(DATA_DIR), "TF_IN_AUTOMATION": "1"}
    return subprocess.run(
        [binary, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _init_once() -> None:
    """`make tf-init` (it picks the local provider mirror or the registry) unless done, once for
    all pytest workers."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with (DATA_DIR / "servingctl-init.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (DATA_DIR / "providers").is_dir() and (DATA_DIR / "modules").is_dir():
            return
        env = {**os.environ, "TF_DATA_DIR": str(DATA_DIR)}
        proc = subprocess.run(
            ["make", "-s", "tf-init"], cwd=REPO, capture_output=True, text=True, timeout=900, env=env, check=False
        )
        if proc.returncode != 0:
            pytest.fail(f"make tf-init failed (exit {proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """Messages of a `-json` terraform command."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def user_copy() -> Path:
    """A fresh copy of infra/terraform as a user prepares it: `cp terraform.tfvars.example
    terraform.tfvars` (reference.auto.tfvars then loads after it, as on the user's machine)."""
    copy = Path(tempfile.mkdtemp(prefix="servingctl-tf-")) / "terraform"
    shutil.copytree(TF_ROOT, copy, ignore=shutil.ignore_patterns(".terraform", "terraform.tfvars"))
    shutil.copyfile(TF_ROOT / "terraform.tfvars.example", copy / "terraform.tfvars")
    return copy


def _config_digest() -> str:
    """Hash of every file the reference plan depends on."""
    digest = hashlib.sha256()
    for path in sorted(p for p in TF_ROOT.rglob("*") if p.is_file() and ".terraform" not in p.parts):
        digest.update(str(path.relative_to(TF_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _plan_run(test_file: str, run: str) -> dict[str, Any]:
    """The planned outputs and resources of one run of tests/<test_file> in a user's copy (every
    run of that file must pass)."""
    copy = user_copy()
    try:
        proc = terraform("test", "-json", "-verbose", "-no-color", f"-filter=tests/{test_file}", cwd=copy)
    finally:
        shutil.rmtree(copy.parent)
    messages = json_lines(proc.stdout)
    plans = [m["test_plan"] for m in messages if m.get("type") == "test_plan" and m.get("@testrun") == run]
    summary = [m["test_summary"] for m in messages if m.get("type") == "test_summary"]
    if proc.returncode != 0 or len(plans) != 1 or summary != [{**summary[0], "status": "pass", "failed": 0, "errored": 0}]:
        errors = [
            m.get("@message", "") + " " + str(m.get("diagnostic", {}).get("detail", ""))
            for m in messages
            if m.get("@level") == "error"
        ]
        pytest.fail(f"terraform test of tests/{test_file} failed (exit {proc.returncode}): {errors or proc.stderr[-2000:]}")
    (plan,) = plans
    return {
        "outputs": {name: change["after"] for name, change in plan["output_changes"].items()},
        "resources": {r["address"]: r["change"]["after"] for r in plan["resource_changes"]},
    }


def _cached_plan(test_file: str, run: str) -> dict[str, Any]:
    """_plan_run, computed once for all pytest workers (cached under the data directory, keyed by
    the configuration's content, behind a file lock)."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    stem = f"servingctl-plan-{test_file.removesuffix('.tftest.hcl')}-{run}"
    cache = DATA_DIR / f"{stem}.json"
    digest = _config_digest()
    with (DATA_DIR / f"{stem}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.is_file():
            cached = json.loads(cache.read_text())
            if cached.get("digest") == digest:
                return cached["plan"]
        plan = _plan_run(test_file, run)
        cache.write_text(json.dumps({"digest": digest, "plan": plan}))
        return plan


# Test files whose plans the fixtures below read (test_terraform.py runs the other files).
PLANNED_FILES = ("reference.tftest.hcl", "limits.tftest.hcl", "registry.tftest.hcl")


def registry_parameters(plan: dict[str, Any]) -> dict[str, str]:
    """Name -> value of every registry parameter the plan writes (index, pools/*, profiles/*)."""
    kinds = ("aws_ssm_parameter.registry_index", "aws_ssm_parameter.registry_pool[", "aws_ssm_parameter.registry_profile[")
    return {r["name"]: r["value"] for address, r in plan["resources"].items() if address.startswith(kinds)}


def read_back(plan: dict[str, Any], path: str) -> dict[str, Any]:
    """The registry document as the controller's loader assembles it from the planned parameters."""
    from servingctl.registry.layout import assemble

    values = {name.removeprefix(path + "/"): value for name, value in registry_parameters(plan).items()}
    built = assemble(path, values, "us-east-1")
    assert built.problems == (), built.problems
    return built.document


@pytest.fixture(scope="session")
def reference_plan() -> dict[str, Any]:
    """The reference deployment's plan (tests/reference.tftest.hcl, run "reference")."""
    return _cached_plan("reference.tftest.hcl", "reference")


@pytest.fixture(scope="session")
def limits_registry() -> dict[str, Any]:
    """The registry planned with every profile field at a validation limit (tests/limits.tftest.hcl)."""
    return read_back(_cached_plan("limits.tftest.hcl", "registry_limits"), "/self-hosted-llm-poc/registry")


@pytest.fixture(scope="session")
def fifty_plan() -> dict[str, Any]:
    """The plan of 50 profiles on 50 pools, the registry's bound (tests/registry.tftest.hcl)."""
    return _cached_plan("registry.tftest.hcl", "fifty_profiles")


@pytest.fixture(scope="session")
def published(reference_plan: dict[str, Any]) -> dict[str, Any]:
    """The registry document as the controller assembles it from the parameters Terraform writes."""
    return read_back(reference_plan, "/self-hosted-llm-poc/registry")


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


@pytest.fixture(scope="session")
def user_dir() -> Iterator[Path]:
    """One user's copy of infra/terraform (terraform.tfvars from the example) for the session."""
    copy = user_copy()
    yield copy
    shutil.rmtree(copy.parent)


@pytest.fixture(scope="session")
def tf() -> SimpleNamespace:
    """The terraform helpers, for tests (pytest's importlib mode cannot import conftest)."""
    return SimpleNamespace(
        run=terraform, json_lines=json_lines, root=TF_ROOT, repo=REPO, planned_files=PLANNED_FILES, read_back=read_back
    )
