"""Wake on request on the twin: a sleeping profile's listener rule forwards to the waker (a Lambda
target the twin's ALB invokes as AWS's does); a request gets 503 with Retry-After and the ETA and
starts the profile once, the start points the rule back at the model, and every way of stopping it
points the rule at the waker again. Refusals (outside the schedule, over budget, stop --no-wake), a
burst of 50 requests starting it once, and the OpenAI SDK retrying its way to an answer.

`pytest -s` prints the figures: seconds from the first request to the first 200 against the modeled
start, and each Retry-After against the real time that was left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

from servingctl.api.waker import RETRY_AFTER_MAX_S, modeled_start_s
from servingctl.registry.models import ServingProfile
from servingctl.shared.clock import OffsetClock, SystemClock
from servingctl_twin.twin import Twin, function_name

from .conftest import DELAYS, POLL, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

WAKE, BURST, SDK, IDLE, RECON, ROLL, SCHED, BUDGET, UNPRICED, NOWAKE = (
    "w-wake",
    "w-burst",
    "w-sdk",
    "w-idle",
    "w-recon",
    "w-roll",
    "w-sched",
    "w-budget",
    "w-unpriced",
    "w-nowake",
)
PROFILES = (WAKE, BURST, SDK, IDLE, RECON, ROLL, SCHED, BUDGET, UNPRICED, NOWAKE)
IDLE_WINDOW = 5
BURST_SIZE = 50
CHAT = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """Every profile wakes on request, each on a pool of its own; w-idle has a 5-minute idle window,
    w-sched runs only on a weekday that is not today, w-budget has a wake budget of 1 cent a month
    (priced as the catalog's g7e.12xlarge), w-unpriced has one on a pool whose price key the catalog lacks."""
    path = registry_with(tmp_path_factory.mktemp("registry"), PROFILES)
    document = json.loads(path.read_text())
    for name in PROFILES:
        document["profiles"][name]["wake_on_request"] = True
    document["profiles"][IDLE]["idle"] = {"enabled": True, "window_minutes": IDLE_WINDOW}
    tomorrow = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")[(datetime.now(UTC).weekday() + 1) % 7]
    document["profiles"][SCHED]["schedule"] = {"timezone": "UTC", "periods": [{"weekdays": [tomorrow]}]}
    document["profiles"][BUDGET]["wake"] = {"monthly_budget_usd": 0.01}
    document["pools"][BUDGET]["price_key"] = "g7e.12xlarge"  # the catalog prices it: a session costs cents
    document["profiles"][UNPRICED]["wake"] = {"monthly_budget_usd": 100.0}
    document["pools"][UNPRICED]["price_key"] = "g7e.4xlarge"  # a capacity fallback type: no price in the catalog
    path.write_text(json.dumps(document))
    with Twin(path, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS, api_port=0) as running:
        yield running


@pytest.fixture
def sweep(twin: Twin) -> Iterator[Callable[[timedelta], dict[str, dict[str, Any]]]]:
    """Invoke the sweep function with its clock `ahead` of the real one: its decisions by profile."""
    assert twin.router is not None
    router = twin.router

    def run(ahead: timedelta) -> dict[str, dict[str, Any]]:
        router.module("sweep").CLOCK = OffsetClock(ahead)
        answer = twin.client("lambda").invoke(FunctionName=function_name("sweep"), Payload=json.dumps({"poll": POLL}).encode())
        body = json.loads(answer["Payload"].read())
        assert "FunctionError" not in answer, body
        return {d["profile"]: d for d in body["decisions"]}

    yield run
    router.module("sweep").CLOCK = SystemClock()


def _spec(probe: Probe, name: str) -> ServingProfile:
    return probe.registry.profiles[name]


def _post(spec: ServingProfile, timeout_s: float = 30.0) -> httpx.Response:
    """A chat completion through the profile's ALB, as a client in the VPC sends it."""
    return httpx.post(
        spec.endpoint_url + "/v1/chat/completions",
        headers={spec.routing_header.name: spec.routing_header.value},
        json={"model": spec.model, **CHAT},
        timeout=timeout_s,
    )


def forwards_to(elbv2: Any, rule_arn: str) -> str | None:
    """The target group the rule forwards to now (None: its action is not a forward)."""
    [rule] = elbv2.describe_rules(RuleArns=[rule_arn])["Rules"]
    action = rule["Actions"][0] if rule["Actions"] else {}
    if action.get("Type") != "forward":
        return None
    return str(action.get("TargetGroupArn") or action["ForwardConfig"]["TargetGroups"][0]["TargetGroupArn"])


def _rule_at(probe: Probe, name: str) -> str:
    """Where the profile's rule forwards: "model", "waker" or the target group's ARN."""
    spec = _spec(probe, name)
    assert spec.wake is not None
    forwarded = forwards_to(probe.elbv2, spec.wake.listener_rule_arn)
    return {spec.target_group_arn: "model", spec.wake.waker_target_group_arn: "waker"}.get(str(forwarded), str(forwarded))


def _starts(twin: Twin, name: str) -> list[dict[str, Any]]:
    """The profile's start executions."""
    sfn = twin.client("stepfunctions")
    listed = sfn.list_executions(stateMachineArn=twin.state_machines["start_profile"])["executions"]
    return [e for e in listed if e["name"].startswith(f"start-{name}-")]


def _wait_start(twin: Twin, name: str) -> str:
    """The profile's one start execution, followed to SUCCEEDED."""
    [execution] = _starts(twin, name)
    result = twin.wait_execution(execution["executionArn"], timeout_s=180)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    return str(execution["executionArn"])


def _error(answer: httpx.Response) -> dict[str, Any]:
    """The OpenAI-style error of a waker answer (every field present)."""
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "code"}, error
    return dict(error)


def _wake_until_200(probe: Probe, name: str) -> tuple[float, list[tuple[float, int]]]:
    """Requests every 0.5 s from a sleeping profile's first 503 to its first 200: the seconds that
    took and each (time sent, Retry-After) along the way."""
    spec = _spec(probe, name)
    begun = time.monotonic()
    seen: list[tuple[float, int]] = []
    while True:
        sent = time.monotonic()
        answer = _post(spec)
        if answer.status_code == 200:
            assert answer.json()["choices"][0]["message"]["content"]
            return time.monotonic() - begun, seen
        assert answer.status_code == 503, answer.text
        assert _error(answer)["code"] in ("model_starting", "model_routing"), answer.text
        retry_after = int(answer.headers["retry-after"])
        assert 1 <= retry_after <= RETRY_AFTER_MAX_S
        seen.append((sent - begun, retry_after))
        assert time.monotonic() - begun < 180, "never READY"
        time.sleep(0.5)


def _stop(probe: Probe, name: str, label: str) -> None:
    result = probe.stop(name, label)
    assert result.status == "SUCCEEDED", (result.error, result.cause)


def test_a_request_wakes_a_sleeping_profile_once_and_the_rule_comes_back(twin: Twin, probe: Probe) -> None:
    """stopped -> 503 with Retry-After -> one start -> READY -> rule back -> 200; then a user stop
    puts the rule at the waker again and the second wake's Retry-After follows its history."""
    spec = _spec(probe, WAKE)
    assert _rule_at(probe, WAKE) == "waker" and probe.state(WAKE).phase == "STOPPED"
    first = _post(spec)
    assert first.status_code == 503
    error = _error(first)
    modeled = modeled_start_s(spec, probe.registry.pools[spec.pool])
    assert error["code"] == "model_starting" and "woken by this request" in error["message"], error
    assert f"modeled start of {modeled} s" in error["message"] and first.headers["retry-after"] == "60"
    took, seen = _wake_until_200(probe, WAKE)
    arn = _wait_start(twin, WAKE)
    assert len(_starts(twin, WAKE)) == 1 and probe.state(WAKE).phase == "READY"
    assert _rule_at(probe, WAKE) == "model"
    requested_by = json.loads(twin.client("stepfunctions").describe_execution(executionArn=arn)["input"])["requested_by"]
    assert requested_by == "servingctl-waker"
    print(
        f"\nFIGURE first wake (no history): {took:.1f} s from the first request to the first 200 on the twin; "
        f"modeled start {modeled} s on AWS = {modeled / TIME_SCALE:.1f} s at time scale {TIME_SCALE:g}; "
        f"Retry-After given: {sorted({r for _, r in seen})}"
    )

    _stop(probe, WAKE, "user")
    assert _rule_at(probe, WAKE) == "waker"
    answer = _post(spec)  # the stop asked for nothing special: the next request wakes it again
    assert answer.status_code == 503 and "p50 of 1 past start(s)" in _error(answer)["message"]
    took_again, seen_again = _wake_until_200(probe, WAKE)
    ready = took_again + 0.0
    gaps = [(round(ready - at, 1), after) for at, after in [(0.0, int(answer.headers["retry-after"])), *seen_again]]
    print(
        f"FIGURE second wake (1 past start): {took_again:.1f} s to the first 200; "
        f"(real seconds left, Retry-After) per 503: {gaps}"
    )
    # Retry-After is the history's p50 of the remaining time, never more than a few seconds off it here.
    first_after = gaps[0][1]
    assert abs(first_after - gaps[0][0]) <= max(5.0, 0.5 * gaps[0][0]), gaps
    assert len(_starts(twin, WAKE)) == 2
    _wait_latest(twin, WAKE)
    _stop(probe, WAKE, "user-2")
    assert _rule_at(probe, WAKE) == "waker"
    probe.assert_nothing_running(WAKE)


def _wait_latest(twin: Twin, name: str) -> None:
    newest = max(_starts(twin, name), key=lambda e: e["startDate"])
    assert twin.wait_execution(newest["executionArn"], timeout_s=180).status == "SUCCEEDED"


def test_a_burst_of_50_requests_starts_the_profile_once(twin: Twin, probe: Probe) -> None:
    spec = _spec(probe, BURST)
    with ThreadPoolExecutor(max_workers=BURST_SIZE) as pool:
        answers = list(pool.map(lambda _: _post(spec, timeout_s=120), range(BURST_SIZE)))
    assert [a.status_code for a in answers] == [503] * BURST_SIZE
    codes = [_error(a)["code"] for a in answers]
    assert set(codes) == {"model_starting"}, codes
    assert all(1 <= int(a.headers["retry-after"]) <= RETRY_AFTER_MAX_S for a in answers)
    woken = [a for a in answers if "woken by this request" in _error(a)["message"]]
    assert len(woken) >= 1
    assert len(_starts(twin, BURST)) == 1
    _wait_start(twin, BURST)
    assert _rule_at(probe, BURST) == "model" and _post(spec).status_code == 200
    assert len(_starts(twin, BURST)) == 1
    _stop(probe, BURST, "burst")
    assert _rule_at(probe, BURST) == "waker"


def test_the_openai_sdk_gets_its_answer_once_the_profile_is_ready(twin: Twin, probe: Probe) -> None:
    """A profile that ran before (its Retry-After comes from that start): the SDK, max_retries raised,
    retries the 503s as Retry-After says and returns the completion."""
    spec = _spec(probe, SDK)
    probe.start(SDK, "before")
    _stop(probe, SDK, "before")
    assert _rule_at(probe, SDK) == "waker"
    client = openai.OpenAI(
        base_url=spec.endpoint_url + "/v1",
        api_key="unused",
        max_retries=30,
        default_headers={spec.routing_header.name: spec.routing_header.value},
        timeout=60.0,
    )
    begun = time.monotonic()
    completion = client.chat.completions.create(model=spec.model, **CHAT)  # type: ignore[call-overload]
    took = time.monotonic() - begun
    assert completion.choices[0].message.content
    assert len(_starts(twin, SDK)) == 2
    print(f"\nFIGURE OpenAI SDK (max_retries=30): the completion {took:.1f} s after create() on a sleeping profile")
    _wait_latest(twin, SDK)
    _stop(probe, SDK, "after")


def test_the_rule_is_at_the_waker_after_an_idle_stop(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    result = probe.start(IDLE, "idle", lease_minutes=240)
    assert result.status == "SUCCEEDED" and _rule_at(probe, IDLE) == "model"
    decision = sweep(timedelta(minutes=IDLE_WINDOW + 2))[IDLE]
    assert (decision["stop"], decision["reason"]) == (True, "idle"), decision
    stopped = twin.wait_execution(decision["execution_arn"], timeout_s=180)
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    assert _rule_at(probe, IDLE) == "waker"
    probe.assert_nothing_running(IDLE)  # scale to zero: the pool too
    assert _post(_spec(probe, IDLE)).status_code == 503
    _wait_latest(twin, IDLE)
    _stop(probe, IDLE, "after-idle")


def test_the_rule_is_at_the_waker_after_the_reconciler_stops_an_aborted_start(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    sfn = twin.client("stepfunctions")
    arn = twin.start_execution("start_profile", probe.start_input(RECON), name=f"start-{RECON}-abort")
    probe.wait_for("the rule at the model", lambda: _rule_at(probe, RECON) == "model", timeout_s=120)
    sfn.stop_execution(executionArn=arn, cause="aborted from the console")
    probe.wait_for("aborted", lambda: sfn.describe_execution(executionArn=arn)["status"] == "ABORTED")
    sweep(timedelta(0))
    probe.wait_for("reconciled", lambda: probe.state(RECON).reconcile_reason is not None, timeout_s=60)
    probe.wait_for("stopped", lambda: probe.state(RECON).phase == "STOPPED" and not probe.locks(RECON), timeout_s=120)
    assert _rule_at(probe, RECON) == "waker"
    probe.assert_nothing_running(RECON)


def test_the_rule_is_at_the_waker_after_a_roll_back(twin: Twin, probe: Probe) -> None:
    """The smoke test (after RouteToModel) is killed at its timeout: the roll-back points the rule back."""
    lam, name = twin.client("lambda"), function_name("smoke_test")
    deployed = lam.get_function_configuration(FunctionName=name)["Timeout"]
    twin.set_faults("smoke-test-hangs")
    lam.update_function_configuration(FunctionName=name, Timeout=2)
    try:
        result = probe.start(ROLL, "hang")
    finally:
        lam.update_function_configuration(FunctionName=name, Timeout=deployed)
        twin.set_faults()
    assert result.status == "FAILED" and "RouteToModel" in result.states_entered() and "RollBack" in result.states_entered()
    assert probe.state(ROLL).phase == "FAILED"
    assert _rule_at(probe, ROLL) == "waker"
    probe.assert_nothing_running(ROLL)


def test_no_wake_outside_the_schedule(twin: Twin, probe: Probe) -> None:
    answer = _post(_spec(probe, SCHED))
    assert answer.status_code == 503 and answer.headers["x-should-retry"] == "false" and "retry-after" not in answer.headers
    error = _error(answer)
    assert error["code"] == "outside_schedule" and "outside its schedule" in error["message"], error
    assert _starts(twin, SCHED) == [] and _rule_at(probe, SCHED) == "waker"


def test_no_wake_over_the_budget(twin: Twin, probe: Probe) -> None:
    """The first wake is under the 1-cent budget; the session it opened costs more than that, so the next is refused."""
    _wake_until_200(probe, BUDGET)
    _wait_start(twin, BUDGET)
    _stop(probe, BUDGET, "budget")
    answer = _post(_spec(probe, BUDGET))
    error = _error(answer)
    assert answer.status_code == 503 and error["code"] == "over_budget" and "wake budget is 0.01 USD" in error["message"]
    assert answer.headers["x-should-retry"] == "false"
    assert len(_starts(twin, BUDGET)) == 1


def test_no_wake_with_a_budget_the_catalog_cannot_price(twin: Twin, probe: Probe) -> None:
    """A budget cannot be kept on an instance with no price: refused, never counted as 0 USD."""
    answer = _post(_spec(probe, UNPRICED))
    error = _error(answer)
    assert answer.status_code == 503 and error["code"] == "budget_unpriced", error
    assert "us-east-1/g7e.4xlarge" in error["message"] and "prices.json" in error["message"], error
    assert answer.headers["x-should-retry"] == "false"
    assert _starts(twin, UNPRICED) == [] and _rule_at(probe, UNPRICED) == "waker"


def test_no_wake_after_stop_no_wake_until_the_next_start(twin: Twin, probe: Probe) -> None:
    spec = _spec(probe, NOWAKE)
    assert twin.api_url is not None
    from servingctl_cli.client import Client

    api = Client(twin.api_url, auth=twin.api_auth(), local=True)
    answer = api.post(f"/profiles/{NOWAKE}/stop", {"no_wake": True})  # already STOPPED: kept on the record
    assert answer["already"] is True and "no longer wake" in answer["message"]
    refused = _post(spec)
    assert _error(refused)["code"] == "wake_disabled" and "--no-wake" in _error(refused)["message"]
    detail = api.get(f"/profiles/{NOWAKE}")
    assert (detail["wake_on_request"], detail["no_wake"]) == (True, True)
    assert _starts(twin, NOWAKE) == []
    # A start clears it; a stop without --no-wake leaves it asleep, a request wakes it again.
    result = probe.start(NOWAKE, "manual")
    assert result.status == "SUCCEEDED" and not probe.state(NOWAKE).no_wake
    _stop(probe, NOWAKE, "plain")
    assert _post(spec).status_code == 503 and len(_starts(twin, NOWAKE)) == 2
    _wait_latest(twin, NOWAKE)
    stop = twin.run("stop_profile", {**probe.stop_input(NOWAKE), "no_wake": True}, name=f"stop-{NOWAKE}-nowake")
    assert stop.status == "SUCCEEDED" and probe.state(NOWAKE).no_wake
    assert _error(_post(spec))["code"] == "wake_disabled" and len(_starts(twin, NOWAKE)) == 2
