"""Registry: the reference document loads, bad documents name the field, the schema file is current."""

import copy
import json
from importlib import resources

import jsonschema
import pytest

from servingctl.registry import RegistryError, load_registry, parse_registry
from servingctl.registry.schema import SCHEMA_PATH, render

REFERENCE = json.loads(resources.files("servingctl.local").joinpath("reference_registry.json").read_text())


def test_reference_registry_resolves_profiles_to_pools():
    registry = parse_registry(REFERENCE)
    assert registry.pool_of("deepseek-v4-flash").instance_type == "g7e.12xlarge"
    assert registry.pool_of("nemotron-nano").gpu_count == 1
    assert registry.profiles_on_pool("g7e-2gpu") == ["deepseek-v4-flash"]


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(KeyError, match="deepseek-v4-flash"):
        parse_registry(REFERENCE).profile("llama")


def test_unknown_pool_is_rejected_with_its_path():
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"]["pool"] = "g9-8gpu"
    with pytest.raises(RegistryError, match=r"profiles.nemotron-nano.pool: unknown pool 'g9-8gpu'"):
        parse_registry(doc)


def test_bad_field_is_named_with_its_path():
    doc = copy.deepcopy(REFERENCE)
    doc["pools"]["g7e-2gpu"]["gpu_count"] = 0
    with pytest.raises(RegistryError, match=r"pools\.g7e-2gpu\.gpu_count"):
        parse_registry(doc)


def test_capture_sizes_must_cover_mtp_batches():
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["deepseek-v4-flash"]["serving"]["cudagraph_capture_sizes"] = [1, 2, 4]
    with pytest.raises(RegistryError, match="max_num_seqs x \\(1 \\+ speculative_tokens\\) = 8"):
        parse_registry(doc)


def test_unknown_time_zone_is_rejected():
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"]["schedule"] = {"timezone": "Mars/Olympus", "periods": [{}]}
    with pytest.raises(RegistryError, match="schedule.timezone.*Mars/Olympus"):
        parse_registry(doc)


def test_load_from_file_and_missing_file(tmp_path):
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(REFERENCE))
    assert set(load_registry(str(path)).profiles) == {"nemotron-nano", "deepseek-v4-flash"}
    with pytest.raises(RegistryError, match="not found"):
        load_registry(str(tmp_path / "nope.json"))


def test_committed_schema_is_current_and_accepts_the_reference():
    assert SCHEMA_PATH.read_text() == render(), "run: python -m servingctl.registry.schema > .../schema.json"
    jsonschema.validate(REFERENCE, json.loads(SCHEMA_PATH.read_text()))
