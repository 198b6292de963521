"""Registry failures on the twin, whose Lambdas read the registry from SSM by its path as deployed
(one parameter per pool and profile and the index; template.yaml's 60 s cache divided by the time
scale): a malformed or a missing parameter answers 503 naming it and the field, while the sweep and
a user's stop still stop the running profile from the copy its record keeps; a profile removed from
the registry while READY stays visible in GET /profiles and `servingctl status` until the
reconciler has stopped it with the reason on its record, and a user's stop of it works.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from servingctl.api.models import ProfileDetail
from servingctl.shared.clock import OffsetClock, SystemClock
from servingctl_cli.profiles import status_text
from servingctl_twin.twin import SSM_PATH, Twin, function_name

from .conftest import DELAYS, POLL, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

MALFORMED, MISSING, REMOVED, USER_STOP = "g-bad", "g-gone", "g-removed", "g-user"
PROFILES = (MALFORMED, MISSING, REMOVED, USER_STOP)


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin with its REST API and one profile on its own pool per case (no scheduled sweep: the
    tests invoke it)."""
    registry = registry_with(tmp_path_factory.mktemp("registry"), PROFILES)
    with Twin(registry, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS, api_port=0) as running:
        yield running


@pytest.fixture
def published(twin: Twin) -> Iterator[dict[str, Any]]:
    """The registry document as bootstrapped; published again whole after the test."""
    assert twin.registry is not None
    document = twin.registry.model_dump(mode="json")
    yield document
    twin.publish_registry(document)


def _api(twin: Twin, method: str, path: str) -> httpx.Response:
    assert twin.api_url is not None
    return httpx.request(
        method, twin.api_url + path, json={"poll": POLL} if method == "POST" else None, timeout=60, auth=twin.api_auth()
    )


def _ready(probe: Probe, profile: str) -> None:
    result = probe.start(profile, "reg")
    assert result.status == "SUCCEEDED", result.describe
    assert probe.state(profile).registry_entry is not None  # the copy the start keeps


def _sweep(twin: Twin, ahead: timedelta = timedelta(0)) -> dict[str, Any]:
    """One sweep (reconciler, then auto-stop), its clock `ahead` of the real one."""
    assert twin.router is not None
    twin.router.module("sweep").CLOCK = OffsetClock(ahead)
    try:
        answer = twin.client("lambda").invoke(FunctionName=function_name("sweep"), Payload=json.dumps({"poll": POLL}).encode())
    finally:
        twin.router.module("sweep").CLOCK = SystemClock()
    body = json.loads(answer["Payload"].read())
    assert "FunctionError" not in answer, body
    return body


def _stopped(probe: Probe, profile: str) -> None:
    probe.wait_for(f"{profile} STOPPED", lambda: probe.state(profile).phase == "STOPPED", timeout_s=120)
    probe.assert_nothing_running(profile)


def _unavailable(probe: Probe, path: str, *named: str) -> dict[str, Any]:
    """Wait out the functions' registry cache: the API answers 503 naming what is wrong."""
    seen: list[httpx.Response] = []
    probe.wait_for(
        f"GET {path} answers 503", lambda: seen.append(_api(probe.twin, "GET", path)) or seen[-1].status_code == 503, timeout_s=30
    )
    body = seen[-1].json()
    assert body["error"] == "RegistryUnavailable" and all(n in body["message"] for n in named), body
    return body


def test_a_malformed_parameter_is_named_by_the_api_and_the_sweep_still_stops_the_profile(
    twin: Twin, probe: Probe, published: dict[str, Any]
) -> None:
    _ready(probe, MALFORMED)
    parameter = f"{SSM_PATH}/profiles/{MALFORMED}"
    bad = published["profiles"][MALFORMED] | {"default_lease_minutes": 1}
    twin.client("ssm").put_parameter(Name=parameter, Value=json.dumps(bad), Type="String", Overwrite=True)
    body = _unavailable(probe, "/profiles", parameter, "default_lease_minutes: Input should be greater than or equal to 5")
    assert body["field"] == parameter
    # Its lease (120 min) ran out: the sweep decides from the copy the record keeps and stops it.
    answer = _sweep(twin, timedelta(minutes=121))
    [decision] = [d for d in answer["decisions"] if d["profile"] == MALFORMED]
    assert (decision["reason"], decision["action"]) == ("lease-expired", "stop-started"), decision
    assert any(r["profile"] == parameter and r["action"] == "error" for r in answer["repairs"]), answer["repairs"]
    _stopped(probe, MALFORMED)


def test_a_missing_parameter_is_named_and_a_users_stop_still_stops_the_profile(
    twin: Twin, probe: Probe, published: dict[str, Any]
) -> None:
    _ready(probe, MISSING)
    parameter = f"{SSM_PATH}/profiles/{MISSING}"
    twin.client("ssm").delete_parameter(Name=parameter)
    _unavailable(probe, f"/profiles/{MISSING}", parameter, f"missing: the index lists profile '{MISSING}'")
    answer = _api(twin, "POST", f"/profiles/{MISSING}/stop")
    assert answer.status_code == 202, answer.text
    _stopped(probe, MISSING)


def test_a_profile_removed_while_ready_is_shown_until_the_reconciler_stopped_it(
    twin: Twin, probe: Probe, published: dict[str, Any]
) -> None:
    _ready(probe, REMOVED)
    twin.publish_registry(published | {"profiles": {n: p for n, p in published["profiles"].items() if n != REMOVED}})

    def listed() -> dict[str, Any] | None:
        return next((p for p in _api(twin, "GET", "/profiles").json() if p["name"] == REMOVED and p.get("retired")), None)

    probe.wait_for(f"{REMOVED} listed as not in the registry", lambda: listed() is not None, timeout_s=30)
    assert (listed() or {})["retired"] == "removed from the registry"
    detail = ProfileDetail.model_validate(_api(twin, "GET", f"/profiles/{REMOVED}").json())
    assert "not in the registry: removed from the registry" in status_text(detail)
    # A start of it is refused, naming why.
    refused = _api(twin, "POST", f"/profiles/{REMOVED}/start")
    assert refused.status_code == 409 and "removed from the registry" in refused.json()["message"], refused.text
    answer = _sweep(twin)
    [repair] = [r for r in answer["repairs"] if r["profile"] == REMOVED]
    assert (repair["reason"], repair["action"]) == ("removed-from-registry", "stop-started"), repair
    _stopped(probe, REMOVED)
    assert (probe.state(REMOVED).reconcile_reason or "").startswith(
        "removed-from-registry: removed from the registry while READY"
    )
    probe.wait_for(
        f"{REMOVED} no longer listed",
        lambda: REMOVED not in [p["name"] for p in _api(twin, "GET", "/profiles").json()],
        timeout_s=30,
    )


def test_a_users_stop_of_a_removed_profile_works(twin: Twin, probe: Probe, published: dict[str, Any]) -> None:
    _ready(probe, USER_STOP)
    twin.publish_registry(published | {"profiles": {n: p for n, p in published["profiles"].items() if n != USER_STOP}})
    probe.wait_for(
        f"{USER_STOP} not in the published registry",
        lambda: any(p["name"] == USER_STOP and p.get("retired") for p in _api(twin, "GET", "/profiles").json()),
        timeout_s=30,
    )
    answer = _api(twin, "POST", f"/profiles/{USER_STOP}/stop")
    assert answer.status_code == 202, answer.text
    _stopped(probe, USER_STOP)
