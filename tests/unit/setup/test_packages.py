"""The three distributions: the product (what the layer and the benchmark image carry), the command
line and the twin, each with its own dependencies, depending one way (twin -> cli -> product)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TWIN_TOOLS = ("moto", "uvicorn", "starlette", "jsonschema")
CLIENT_SIDE = ("rich", "matplotlib", "numpy", "uvloop")


def _project(path: str) -> dict:
    return tomllib.loads((ROOT / path / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {r.split("[")[0].split("=")[0].strip() for r in requirements}


def test_the_product_depends_on_neither_the_twin_tools_nor_the_client_side() -> None:
    product = _project(".")
    assert product["project"]["name"] == "servingctl"
    names = _names(product["project"]["dependencies"])
    assert not names & {*TWIN_TOOLS, *CLIENT_SIDE, "servingctl-cli", "servingctl-twin"}
    assert _names(product["project"]["optional-dependencies"]["client"]) == set(CLIENT_SIDE)
    assert product["tool"]["setuptools"]["packages"]["find"] == {
        "where": ["layers/core"],
        "include": ["servingctl", "servingctl.*"],
    }


def test_the_command_line_needs_the_product_and_not_the_twin() -> None:
    cli, version = _project("cli"), _project(".")["project"]["version"]
    assert cli["project"]["dependencies"][0] == f"servingctl[client]=={version}"
    assert not _names(cli["project"]["dependencies"]) & {*TWIN_TOOLS, "servingctl-twin"}
    assert cli["project"]["scripts"] == {"servingctl": "servingctl_cli.main:main"}
    assert cli["tool"]["setuptools"]["packages"]["find"]["include"] == ["servingctl_cli", "servingctl_cli.*"]


def test_the_twin_brings_its_tools_and_adds_its_command() -> None:
    twin, version = _project("twin"), _project(".")["project"]["version"]
    names = _names(twin["project"]["dependencies"])
    assert names >= {"servingctl-cli", *TWIN_TOOLS}
    assert f"servingctl-cli=={version}" in twin["project"]["dependencies"]
    assert twin["project"]["entry-points"]["servingctl.commands"] == {"local": "servingctl_twin.plugin"}
