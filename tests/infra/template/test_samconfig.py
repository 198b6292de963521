"""samconfig.toml lists every parameter of template.yaml (in its order), the Terraform-sourced ones
as placeholders and the others at the template's defaults, and the README documents each one."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


class _CfnLoader(yaml.SafeLoader):
    """YAML loader that keeps CloudFormation short-form tags (!Ref, !Sub ...) as plain values."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


@pytest.fixture(scope="module")
def parameters() -> dict:
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=_CfnLoader)["Parameters"]


@pytest.fixture(scope="module")
def overrides() -> dict[str, str]:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    pairs = [item.split("=", 1) for item in config["default"]["deploy"]["parameters"]["parameter_overrides"]]
    assert all(len(pair) == 2 for pair in pairs)
    assert len({name for name, _ in pairs}) == len(pairs), "a parameter is listed twice"
    return dict(pairs)


def test_samconfig_lists_every_template_parameter_in_its_order(parameters: dict, overrides: dict[str, str]) -> None:
    assert list(overrides) == list(parameters)


def test_optional_parameters_show_the_template_defaults(parameters: dict, overrides: dict[str, str]) -> None:
    for name, spec in parameters.items():
        if "Default" in spec:
            assert overrides[name] == str(spec["Default"]), name


def test_required_parameters_are_the_terraform_outputs(parameters: dict) -> None:
    import json

    mapping = json.loads((ROOT / "infra" / "terraform" / "sam-parameters.json").read_text())
    assert sorted(mapping.values()) == sorted(name for name, spec in parameters.items() if "Default" not in spec)


def test_the_readme_documents_every_parameter(parameters: dict) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Template parameters", 1)[1].split("\n## ", 1)[0]
    for name in parameters:
        assert f"| `{name}` |" in section, name
