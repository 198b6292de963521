"""Dozens of concurrent starts and stops through the twin's API Gateway: every answer is 2xx or a
409 with a reason, one execution per intent, and an integration failure's exception is logged."""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
NANO, FLASH = "nemotron-nano", "deepseek-v4-flash"


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0) as running:
        yield running


def _burst(twin: Twin, requests: list[tuple[str, str]]) -> list[tuple[str, str, int, dict[str, Any]]]:
    """POST every (action, profile) at once; (action, profile, status, body) in the same order."""

    def one(request: tuple[str, str]) -> tuple[str, str, int, dict[str, Any]]:
        action, profile = request
        answer = httpx.post(f"{twin.api_url}/profiles/{profile}/{action}", json={"poll": POLL}, timeout=60, auth=twin.api_auth())
        return action, profile, answer.status_code, answer.json()

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(one, requests))


def _executions(twin: Twin, machine: str, profile: str) -> list[dict[str, Any]]:
    sfn = twin.client("stepfunctions")
    found = sfn.list_executions(stateMachineArn=twin.state_machines[machine])["executions"]
    return [e for e in found if e["name"].startswith(f"{machine.split('_')[0]}-{profile}-")]


def _finished(twin: Twin, execution: dict[str, Any]) -> dict[str, Any]:
    """The execution once it ended, with its stopDate (DescribeExecution)."""
    assert twin.wait_execution(execution["executionArn"], timeout_s=180).status == "SUCCEEDED"
    described: dict[str, Any] = twin.client("stepfunctions").describe_execution(executionArn=execution["executionArn"])
    return described


def _gateway_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the twin's API gateway logged (integration failures)."""
    return [r.getMessage() for r in caplog.records if r.name == "servingctl_twin.apigateway.apigw"]


def _check(answers: list[tuple[str, str, int, dict[str, Any]]], logged: list[str]) -> Counter[int]:
    for action, profile, status, body in answers:
        assert status in (200, 202, 409), (action, profile, status, body, logged)
        if status == 409:
            assert body["error"] == "Conflict" and body["message"], body
    return Counter(status for *_, status, _ in answers)


def test_dozens_of_concurrent_starts_and_stops_answer_2xx_or_409_once_per_intent(
    twin: Twin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="servingctl_twin.apigateway.apigw")
    starts = _burst(twin, [("start", NANO)] * 24 + [("start", FLASH)] * 12)
    counts = _check(starts, _gateway_log(caplog))
    print(f"\nFIGURE burst 1 (24 starts {NANO}, 12 starts {FLASH}): {dict(counts)}")
    # One start execution per profile, every 202 of it names that one.
    for profile in (NANO, FLASH):
        executions = _executions(twin, "start_profile", profile)
        assert len(executions) == 1, [(e["name"], e["status"]) for e in executions]
        answered = {b["execution_arn"] for a, p, s, b in starts if (a, p, s) == ("start", profile, 202)}
        assert answered == {executions[0]["executionArn"]}

    stops = _burst(twin, [("stop", NANO)] * 16 + [("start", NANO)] * 8 + [("stop", FLASH)] * 16)
    counts = _check(stops, _gateway_log(caplog))
    print(f"FIGURE burst 2 (16 stops + 8 starts {NANO}, 16 stops {FLASH}): {dict(counts)}")
    for profile in (NANO, FLASH):
        executions = _executions(twin, "stop_profile", profile)
        answered = {b["execution_arn"] for a, p, s, b in stops if (a, p, s) == ("stop", profile, 202)}
        assert answered == {e["executionArn"] for e in executions}, [(e["name"], e["status"]) for e in executions]
    # FLASH got stops only: one stop. NANO got starts too: a start while a stop runs is refused (409),
    # so a second start began only once the first stop had ended (on a busy machine the burst can
    # outlast a stop), and only a second start calls for a second stop; never two stops at once.
    assert len(_executions(twin, "stop_profile", FLASH)) == 1
    starts_nano = sorted(_executions(twin, "start_profile", NANO), key=lambda e: e["startDate"])
    stops_nano = sorted(_executions(twin, "stop_profile", NANO), key=lambda e: e["startDate"])
    assert 1 <= len(stops_nano) <= len(starts_nano), ([e["name"] for e in starts_nano], [e["name"] for e in stops_nano])
    first_stop = _finished(twin, stops_nano[0])
    assert all(start["startDate"] >= first_stop["stopDate"] for start in starts_nano[1:]), (starts_nano, first_stop)
    for earlier, later in itertools.pairwise(stops_nano):
        assert later["startDate"] >= _finished(twin, earlier)["stopDate"], (earlier, later)
    assert _gateway_log(caplog) == []
    for execution in [
        *_executions(twin, "start_profile", NANO),
        *_executions(twin, "stop_profile", NANO),
        *_executions(twin, "start_profile", FLASH),
        *_executions(twin, "stop_profile", FLASH),
    ]:
        twin.wait_execution(execution["executionArn"], timeout_s=180)


def test_an_integration_failure_is_a_502_and_its_exception_is_logged(
    twin: Twin, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from servingctl.api import service

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the table is gone")

    monkeypatch.setattr(service, "list_profiles", broken)
    caplog.set_level(logging.ERROR, logger="servingctl_twin.apigateway.apigw")
    assert twin.router is not None
    with twin.router.in_process():  # so the handlers see the patch
        answer = httpx.get(f"{twin.api_url}/profiles", timeout=60, auth=twin.api_auth())
    assert answer.status_code == 502 and answer.json() == {"message": "Internal server error"}
    [logged] = _gateway_log(caplog)
    assert logged.startswith("integration failure on GET /profiles: RuntimeError: the table is gone")
    assert "in list_profiles\n    return service.list_profiles(deps())" in logged  # the stack trace
