"""The SAM template takes the Terraform outputs as parameters: the mapping in
infra/terraform/sam-parameters.json names real outputs and real template parameters, with
matching shapes (lists for list parameters), as planned for the reference inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
MAPPING = json.loads((REPO / "infra" / "terraform" / "sam-parameters.json").read_text())


class _CfnLoader(yaml.SafeLoader):
    """YAML loader that keeps CloudFormation short-form tags (!Ref, !Sub ...) as plain values."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


@pytest.fixture(scope="module")
def sam_parameters() -> dict:
    """Parameters of template.yaml."""
    template = yaml.load((REPO / "template.yaml").read_text(), Loader=_CfnLoader)
    return template["Parameters"]


def test_mapping_names_terraform_outputs(reference_plan: dict) -> None:
    assert sorted(set(MAPPING) - set(reference_plan["outputs"])) == []


def test_mapping_names_template_parameters(sam_parameters: dict) -> None:
    assert sorted(set(MAPPING.values()) - set(sam_parameters)) == []


def test_every_template_parameter_without_default_comes_from_terraform(sam_parameters: dict) -> None:
    required = {name for name, spec in sam_parameters.items() if "Default" not in spec}
    assert sorted(required - set(MAPPING.values())) == []


def test_list_outputs_feed_list_parameters(reference_plan: dict, sam_parameters: dict) -> None:
    for output, parameter in MAPPING.items():
        value = reference_plan["outputs"][output]
        sam_type = sam_parameters[parameter]["Type"]
        is_list_param = sam_type == "CommaDelimitedList" or sam_type.startswith("List<")
        assert isinstance(value, list) == is_list_param, f"{output} ({type(value).__name__}) -> {parameter} ({sam_type})"
        if not is_list_param and "AllowedPattern" in sam_parameters[parameter]:
            assert re.search(sam_parameters[parameter]["AllowedPattern"], value), (
                f"{output}={value!r} fails {parameter}'s pattern"
            )
