"""The registry at its bound on the twin: 50 profiles (and their pools) published as Terraform does,
one SSM parameter each plus the index, read by the deployed functions over every page of
GetParametersByPath (10 a page); one profile more is refused by the API, naming the index and the
bound, while the sweep still reconciles the 50 that parse.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from servingctl.registry.models import MAX_PROFILES
from servingctl_twin.twin import SSM_PATH, Twin, function_name

from .conftest import DELAYS, POLL, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

# The reference's two profiles and the shared one, plus these on pools of their own: 50.
NAMES = tuple(f"f-{i:02d}" for i in range(MAX_PROFILES - 3))


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    registry = registry_with(tmp_path_factory.mktemp("registry"), NAMES)
    with Twin(registry, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS, api_port=0) as running:
        yield running


def _profiles(twin: Twin) -> httpx.Response:
    assert twin.api_url is not None
    return httpx.get(twin.api_url + "/profiles", timeout=60, auth=twin.api_auth())


def _sweep(twin: Twin) -> dict:
    answer = twin.client("lambda").invoke(
        FunctionName=function_name("sweep"), Payload=json.dumps({"poll": POLL, "dry_run": True}).encode()
    )
    body = json.loads(answer["Payload"].read())
    assert "FunctionError" not in answer, body
    return body


def test_fifty_profiles_are_published_and_read_by_the_functions(twin: Twin, probe: Probe) -> None:
    ssm = twin.client("ssm")
    names = [
        p["Name"]
        for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=SSM_PATH, Recursive=True)
        for p in page["Parameters"]
    ]
    assert len(names) == 2 * MAX_PROFILES + 1 - (MAX_PROFILES - len(twin.registry.pools))  # type: ignore[union-attr]
    answer = _profiles(twin)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()) == MAX_PROFILES and {p["phase"] for p in answer.json()} == {"STOPPED"}
    repairs = _sweep(twin)["repairs"]
    assert len(repairs) == MAX_PROFILES and {r["reason"] for r in repairs} == {"consistent"}, repairs


def test_one_profile_past_the_bound_is_refused_naming_the_index(twin: Twin, probe: Probe) -> None:
    assert twin.registry is not None
    document = twin.registry.model_dump(mode="json")
    extra = document["profiles"]["nemotron-nano"] | {"model": "f-extra"}
    try:
        twin.publish_registry(document | {"profiles": document["profiles"] | {"f-extra": extra}})
        seen: list[httpx.Response] = []
        probe.wait_for(
            "GET /profiles answers 503", lambda: seen.append(_profiles(twin)) or seen[-1].status_code == 503, timeout_s=30
        )
        message = seen[-1].json()["message"]
        assert f"{SSM_PATH}/index: profiles: List should have at most {MAX_PROFILES} items" in message, message
        # What parses is still reconciled: the index is unusable, so no profile is taken as removed.
        answers: list[dict] = []
        probe.wait_for(
            "the sweep reads the new registry (its container's cache expired)",
            lambda: answers.append(_sweep(twin)) or any(r["profile"] == "f-extra" for r in answers[-1]["repairs"]),
            timeout_s=30,
        )
        repairs = answers[-1]["repairs"]
        reasons = {r["profile"]: r["reason"] for r in repairs}
        assert len(reasons) == MAX_PROFILES + 1 + 2 and set(reasons.values()) == {"consistent", "error"}, repairs
        assert reasons["f-extra"] == "consistent" and reasons[f"{SSM_PATH}/index"] == "error"
    finally:
        twin.publish_registry(document)
