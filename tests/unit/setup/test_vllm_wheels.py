"""Where `make` takes torch 2.13.0+cpu for the vLLM venv: the local wheel directory when it holds
that wheel, otherwise a download of that wheel alone from PyTorch's CPU index (the one vLLM's CPU
install docs name) into a cache directory, which uv then reads the same way. Checked on the command
lines `make -n` prints, since that index cannot be reached from the test machines."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def vllm_recipe(**variables: str) -> list[str]:
    """The commands that build the vLLM venv, as make would run them."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make not found on PATH")
    overrides = [f"{k}={v}" for k, v in variables.items()]
    # -B: print the recipe even when the venv is up to date; -n: print, never run.
    proc = subprocess.run([make, "-n", "-B", "--no-print-directory", ".venv-vllm/.stamp", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index("rm -rf .venv-vllm")
    return lines[start:]


def install_line(recipe: list[str]) -> str:
    """The `uv pip install` of requirements/vllm.txt."""
    (line,) = [ln for ln in recipe if re.search(r"uv pip install .*-r requirements/vllm\.txt", ln)]
    return line


def downloads(recipe: list[str]) -> list[str]:
    """The `pip download` commands of the recipe."""
    return [ln for ln in recipe if " -m pip download " in ln]


def test_local_wheel_directory_is_used_when_it_holds_the_pinned_torch(tmp_path: Path) -> None:
    (tmp_path / WHEEL).write_bytes(b"")
    recipe = vllm_recipe(TORCH_WHEELS=str(tmp_path), TORCH_DOWNLOADS=str(tmp_path / "downloads"))
    assert f"--find-links {tmp_path} " in install_line(recipe)
    assert downloads(recipe) == []
    assert PYTORCH_CPU_INDEX not in "\n".join(recipe)


@pytest.mark.parametrize("contents", ["missing", "empty", "another torch"])
def test_the_pinned_torch_is_downloaded_from_pytorchs_cpu_index_without_local_wheels(tmp_path: Path, contents: str) -> None:
    wheels, cache = tmp_path / "wheels", tmp_path / "downloads"
    if contents != "missing":
        wheels.mkdir()
    if contents == "another torch":
        (wheels / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    recipe = vllm_recipe(TORCH_WHEELS=str(wheels), TORCH_DOWNLOADS=str(cache))
    (download,) = downloads(recipe)
    # Only torch, only a wheel, from that index; everything else resolves from PyPI as here.
    assert f"--index-url {PYTORCH_CPU_INDEX} " in download and "--no-deps" in download and "--only-binary=:all:" in download
    assert download.endswith(f"--dest {cache} 'torch==2.13.0+cpu'")
    assert recipe.index(download) < recipe.index(install_line(recipe))
    assert f"--find-links {cache} " in install_line(recipe)
    assert "--index-url" not in install_line(recipe) and "--torch-backend" not in install_line(recipe)


def test_an_earlier_download_is_reused(tmp_path: Path) -> None:
    cache = tmp_path / "downloads"
    cache.mkdir()
    (cache / WHEEL).write_bytes(b"")
    recipe = vllm_recipe(TORCH_WHEELS=str(tmp_path / "missing"), TORCH_DOWNLOADS=str(cache))
    assert downloads(recipe) == []
    assert f"--find-links {cache} " in install_line(recipe)


def test_requirements_pin_the_cpu_build_of_torch() -> None:
    # The +cpu local version is what keeps uv from PyPI's CUDA build of the same release.
    assert "torch==2.13.0+cpu" in (REPO / "requirements" / "vllm.txt").read_text().splitlines()
