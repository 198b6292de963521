"""Where `make` takes torch 2.13.0+cpu for the vLLM venv: the local wheel directory when it holds
a torch wheel, otherwise PyTorch's CPU index (the one vLLM's CPU install docs name). Checked on the
command line `make -n` prints, since that index cannot be reached from the test machines."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def vllm_install_line(**variables: str) -> str:
    """The `uv pip install` command that builds the vLLM venv, as make would run it."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make not found on PATH")
    overrides = [f"{k}={v}" for k, v in variables.items()]
    # -B: print the recipe even when the venv is up to date; -n: print, never run.
    proc = subprocess.run([make, "-n", "-B", "--no-print-directory", ".venv-vllm/.stamp", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if re.search(r"uv pip install .*-r requirements/vllm\.txt", ln)]
    return line


def test_local_wheel_directory_is_used_when_it_holds_torch(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    line = vllm_install_line(TORCH_WHEELS=str(tmp_path))
    assert f"--find-links {tmp_path} " in line
    assert "--torch-backend" not in line


@pytest.mark.parametrize("contents", ["missing", "empty"])
def test_pytorch_cpu_index_is_used_without_local_wheels(tmp_path: Path, contents: str) -> None:
    wheels = tmp_path / "wheels"
    if contents == "empty":
        wheels.mkdir()
    line = vllm_install_line(TORCH_WHEELS=str(wheels))
    assert "--torch-backend cpu " in line
    assert "--find-links" not in line


def test_requirements_pin_the_cpu_build_of_torch() -> None:
    # The +cpu local version is what keeps uv from PyPI's CUDA build of the same release.
    assert "torch==2.13.0+cpu" in (REPO / "requirements" / "vllm.txt").read_text().splitlines()
