"""Registry: the reference document loads, bad documents name the field, the schema file is current."""

import copy
import json
from importlib import resources

import boto3
import jsonschema
import pytest
from aws_lambda_powertools.utilities import parameters as parameters_cache
from moto import mock_aws

from servingctl.registry import RegistryError, load_registry, parse_registry, read_registry
from servingctl.registry.layout import SSM_ADVANCED_BYTES, SSM_STANDARD_BYTES, assemble, compact, parameters
from servingctl.registry.schema import SCHEMA_PATH, render

REFERENCE = json.loads(resources.files("servingctl_twin").joinpath("reference_registry.json").read_text())


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


@pytest.mark.parametrize(("sizes", "accepted"), [([1, 2, 4, 8], True), ([1, 2, 4, 7], False), ([1, 2, 4, 16], True)])
def test_capture_sizes_at_the_mtp_batch_and_one_below(sizes, accepted):
    # deepseek-v4-flash: max_num_seqs 4 x (1 + 1 speculative token) = 8 is the largest decode batch.
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["deepseek-v4-flash"]["serving"]["cudagraph_capture_sizes"] = sizes
    if accepted:
        assert parse_registry(doc).profiles["deepseek-v4-flash"].serving.cudagraph_capture_sizes == sizes
    else:
        with pytest.raises(RegistryError, match=r"= 8"):
            parse_registry(doc)


PATH = "/test/registry"


def _padded_to(profile: dict, size: int) -> dict:
    """profile with a vLLM argument padded so that its SSM value is exactly size bytes."""
    padded = copy.deepcopy(profile)
    args = padded["serving"].setdefault("args", [])
    args.append("")
    args[-1] = "x" * (size - len(compact(padded).encode()))
    assert len(compact(padded).encode()) == size
    return padded


def _relative(document: dict) -> dict[str, str]:
    return {name.removeprefix(PATH + "/"): value for name, value in parameters(document, PATH).items()}


def test_every_reference_parameter_fits_the_standard_tier():
    sizes = {name: len(value.encode()) for name, value in parameters(REFERENCE, PATH).items()}
    assert max(sizes.values()) <= SSM_STANDARD_BYTES, sizes


def test_a_profile_parameter_at_the_ssm_advanced_limit_passes_and_one_byte_past_is_named():
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"] = _padded_to(REFERENCE["profiles"]["nemotron-nano"], SSM_ADVANCED_BYTES)
    assert assemble(PATH, _relative(doc), "us-east-1").problems == ()
    doc["profiles"]["nemotron-nano"] = _padded_to(REFERENCE["profiles"]["nemotron-nano"], SSM_ADVANCED_BYTES + 1)
    built = assemble(PATH, _relative(doc), "us-east-1")
    assert [str(p) for p in built.problems] == [
        f"{PATH}/profiles/nemotron-nano: {SSM_ADVANCED_BYTES + 1} bytes, "
        f"over the Advanced tier limit of {SSM_ADVANCED_BYTES} bytes"
    ]
    assert sorted(built.document["profiles"]) == ["deepseek-v4-flash"]


def test_assembled_parameters_give_back_the_document():
    built = assemble(PATH, _relative(REFERENCE), "us-east-1")
    assert built.problems == () and parse_registry(built.document) == parse_registry(REFERENCE)
    assert built.listed == frozenset(REFERENCE["profiles"])


def test_unknown_time_zone_is_rejected():
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"]["schedule"] = {"timezone": "Mars/Olympus", "periods": [{}]}
    with pytest.raises(RegistryError, match=r"schedule.timezone.*Mars/Olympus"):
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


def _fleet(count: int) -> dict:
    """The reference registry with count copies of nemotron-nano, each on a pool of its own."""
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"], doc["pools"] = {}, {}
    for i in range(count):
        doc["pools"][f"pool-{i:02d}"] = copy.deepcopy(REFERENCE["pools"]["g7e-1gpu"]) | {"asg_name": f"asg-{i:02d}"}
        doc["profiles"][f"model-{i:02d}"] = copy.deepcopy(REFERENCE["profiles"]["nemotron-nano"]) | {"pool": f"pool-{i:02d}"}
    return doc


def _publish(ssm, document: dict) -> None:
    for name, value in parameters(document, PATH).items():
        ssm.put_parameter(Name=name, Value=value, Type="String", Overwrite=True)


@pytest.fixture
def ssm(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    parameters_cache.clear_caches()  # the loader caches a path's parameters for a minute
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")
    parameters_cache.clear_caches()


def test_fifty_profiles_are_read_from_ssm_over_every_page(ssm):
    # 101 parameters: GetParametersByPath answers 10 a page; a reader of the first page alone sees 10.
    _publish(ssm, _fleet(50))
    registry = load_registry(f"ssm:{PATH}")
    assert len(registry.profiles) == len(registry.pools) == 50
    assert registry.pool_of("model-49").asg_name == "asg-49"


def test_fifty_one_profiles_are_refused_naming_the_index_and_the_bound(ssm):
    _publish(ssm, _fleet(51))
    with pytest.raises(
        RegistryError,
        match=rf"{PATH}/index: pools: List should have at most 50 items.*; profiles: List should have at most 50 items",
    ):
        load_registry(f"ssm:{PATH}")


def test_a_malformed_profile_parameter_is_named_with_its_field_and_the_rest_still_reads(ssm):
    _publish(ssm, REFERENCE)
    bad = copy.deepcopy(REFERENCE["profiles"]["nemotron-nano"]) | {"default_lease_minutes": 1}
    ssm.put_parameter(Name=f"{PATH}/profiles/nemotron-nano", Value=json.dumps(bad), Type="String", Overwrite=True)
    with pytest.raises(
        RegistryError, match=rf"{PATH}/profiles/nemotron-nano: default_lease_minutes: Input should be greater than or equal to 5"
    ):
        load_registry(f"ssm:{PATH}")
    published = read_registry(f"ssm:{PATH}")
    assert sorted(published.registry.profiles) == ["deepseek-v4-flash"]
    assert "nemotron-nano" in published.unusable and published.listed == frozenset(REFERENCE["profiles"])


def test_a_missing_parameter_the_index_lists_is_named(ssm):
    _publish(ssm, REFERENCE)
    ssm.delete_parameter(Name=f"{PATH}/pools/g7e-2gpu")
    with pytest.raises(RegistryError) as raised:
        load_registry(f"ssm:{PATH}")
    assert str(raised.value) == (
        f"registry ssm:{PATH}: {PATH}/pools/g7e-2gpu: missing: the index lists pool 'g7e-2gpu'; "
        f"{PATH}/profiles/deepseek-v4-flash: pool: 'g7e-2gpu' is not a usable pool of the registry"
    )


def test_no_registry_under_the_path_says_so(ssm):
    with pytest.raises(RegistryError, match=rf"{PATH}/index: missing: the registry is not published under this path"):
        load_registry(f"ssm:{PATH}")


def test_a_profile_removed_from_the_index_is_not_read_even_while_its_parameter_remains(ssm):
    # Terraform rewrites the index before it deletes a removed profile's parameter.
    _publish(ssm, REFERENCE)
    index = json.loads(ssm.get_parameter(Name=f"{PATH}/index")["Parameter"]["Value"])
    index["profiles"].remove("nemotron-nano")
    ssm.put_parameter(Name=f"{PATH}/index", Value=json.dumps(index), Type="String", Overwrite=True)
    published = read_registry(f"ssm:{PATH}")
    assert published.problems == () and sorted(published.registry.profiles) == ["deepseek-v4-flash"]
    assert published.listed == frozenset({"deepseek-v4-flash"})


@pytest.mark.parametrize(
    ("period", "accepted"),
    [
        ({"begin_time": "09:00", "end_time": "09:01"}, True),  # the shortest period: one minute
        ({"begin_time": "09:00", "end_time": "08:59"}, True),  # overnight, all but one minute
        ({"begin_time": "09:00", "end_time": "09:00"}, False),
        ({"end_time": "00:00"}, False),  # begin absent means 00:00
        ({}, True),  # the whole day
    ],
)
def test_a_period_whose_begin_equals_its_end_is_rejected(period, accepted):
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"]["schedule"] = {"timezone": "UTC", "periods": [period]}
    if accepted:
        parse_registry(doc)
        return
    with pytest.raises(
        RegistryError, match=r"schedule.periods.0.*begin_time and end_time are both .*: the period would never run"
    ):
        parse_registry(doc)


@pytest.mark.parametrize(("deadline", "accepted"), [(7200, True), (7201, False)])
def test_start_defaults_must_fit_the_profiles_limits(deadline, accepted):
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"]["start"] = {"health_timeout_s": deadline}
    if accepted:
        assert parse_registry(doc).profile("nemotron-nano").limits.max_start_deadline_s == 7200
        return
    with pytest.raises(
        RegistryError, match=r"start.health_timeout_s \(7201\) must not exceed limits.max_start_deadline_s \(7200\)"
    ):
        parse_registry(doc)


def _with_alternates(count: int) -> dict:
    doc = copy.deepcopy(REFERENCE)
    doc["pools"]["g7e-1gpu"]["alternates"] = [
        {"instance_type": f"g7e.{size}xlarge", "launch_template_id": f"lt-0000000000000002{size}"}
        for size in (4, 8, 16, 32)[:count]
    ]
    return doc


def test_three_alternates_load_in_order_and_a_fourth_is_refused_by_name():
    pool = parse_registry(_with_alternates(3)).pools["g7e-1gpu"]
    assert [t for t, _ in pool.options()] == ["g7e.2xlarge", "g7e.4xlarge", "g7e.8xlarge", "g7e.16xlarge"]
    with pytest.raises(RegistryError, match=r"pools\.g7e-1gpu\.alternates: List should have at most 3 items"):
        parse_registry(_with_alternates(4))


def test_an_alternate_of_the_primary_type_is_refused():
    doc = copy.deepcopy(REFERENCE)
    doc["pools"]["g7e-1gpu"]["alternates"][0]["instance_type"] = "g7e.2xlarge"
    with pytest.raises(
        RegistryError, match=r"pools\.g7e-1gpu: .*alternates must be distinct instance types other than instance_type g7e.2xlarge"
    ):
        parse_registry(doc)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("min_size", 2, r"pools\.g7e-2gpu\.warm_pool\.min_size: Input should be less than or equal to 1"),
    ("pool_state", "Running", r"pools\.g7e-2gpu\.warm_pool\.pool_state: Input should be 'Stopped'"),
])  # fmt: skip
def test_bad_warm_pool_fields_are_named(field, value, message):
    doc = copy.deepcopy(REFERENCE)
    assert parse_registry(doc).pools["g7e-2gpu"].warm_pool.min_size == 0
    doc["pools"]["g7e-2gpu"]["warm_pool"][field] = value
    with pytest.raises(RegistryError, match=message):
        parse_registry(doc)


def test_warm_pool_min_size_at_its_limit_loads():
    doc = copy.deepcopy(REFERENCE)
    doc["pools"]["g7e-2gpu"]["warm_pool"]["min_size"] = 1
    assert parse_registry(doc).pools["g7e-2gpu"].warm_pool.min_size == 1


def test_replicas_default_to_one_and_one():
    profile = parse_registry(REFERENCE).profile("deepseek-v4-flash")
    assert (profile.min_replicas, profile.max_replicas) == (1, 1)


@pytest.mark.parametrize(("replicas", "message"), [
    ({"min_replicas": 1, "max_replicas": 16}, None),  # the bound
    ({"min_replicas": 16, "max_replicas": 16}, None),
    ({"min_replicas": 1, "max_replicas": 17}, r"profiles\.nemotron-nano\.max_replicas: Input should be less than or equal to 16"),
    ({"min_replicas": 0, "max_replicas": 2}, r"nemotron-nano\.min_replicas: Input should be greater than or equal to 1"),
    ({"min_replicas": 3, "max_replicas": 2}, r"profiles\.nemotron-nano: .*min_replicas \(3\) must not exceed max_replicas \(2\)"),
    ({"min_replicas": 2, "max_replicas": 2}, None),
])  # fmt: skip
def test_replica_bounds_are_checked_naming_the_field(replicas, message):
    doc = copy.deepcopy(REFERENCE)
    doc["profiles"]["nemotron-nano"].update(replicas)
    if message is None:
        profile = parse_registry(doc).profile("nemotron-nano")
        assert (profile.min_replicas, profile.max_replicas) == (replicas["min_replicas"], replicas["max_replicas"])
        return
    with pytest.raises(RegistryError, match=message):
        parse_registry(doc)
