"""The waker's answers (servingctl.api.waker) over a memory store and moto's Step Functions: the
Retry-After clamp, the OpenAI-style body, the ETA's sources, one start for many requests, and each
refusal with its reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from servingctl.api.service import ApiDeps
from servingctl.api.waker import RETRY_AFTER_MAX_S, WakeAnswer, modeled_start_s, month_cost_usd, retry_after, wake
from servingctl.costs import load_catalog
from servingctl.registry.loader import parse_registry
from servingctl.store.memory import MemoryStore
from servingctl.store.models import Mark, Phase, Session, StartRecord
from servingctl_twin.twin import REFERENCE_REGISTRY

PROFILE = "deepseek-v4-flash"
HEADERS = {"x-llm-profile": PROFILE, "content-type": "application/json"}
RULE = "arn:aws:elasticloadbalancing:us-east-1:123456789012:listener-rule/app/self-hosted-llm-poc/1/2/3"
WAKER_TG = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/servingctl-waker/0000000000000009"
PASS = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Pass", "End": True}}})


class Clock:
    """A clock a test sets."""

    def __init__(self, at: datetime) -> None:
        self.current = at

    def now(self) -> datetime:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


def registry(**wake: Any) -> Any:
    """The reference registry with PROFILE waking on request (wake: the WakeRouting fields' changes)."""
    document = json.loads(REFERENCE_REGISTRY.read_text())
    document["profiles"][PROFILE] |= {
        "wake_on_request": True,
        "wake": {"listener_rule_arn": RULE, "waker_target_group_arn": WAKER_TG, **wake.pop("routing", {})},
        **wake,
    }
    return parse_registry(document)


@pytest.fixture
def deps(monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiDeps]:
    """ApiDeps on a memory store, with moto state machines whose executions stay RUNNING."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        role = "arn:aws:iam::123456789012:role/states"
        start = sfn.create_state_machine(name="servingctl-start-profile", definition=PASS, roleArn=role)["stateMachineArn"]
        stop = sfn.create_state_machine(name="servingctl-stop-profile", definition=PASS, roleArn=role)["stateMachineArn"]
        yield ApiDeps(
            sfn=sfn,
            ecs=None,
            autoscaling=None,
            elbv2=None,
            store=MemoryStore(),
            registry=registry(),
            catalog=load_catalog(),
            start_machine_arn=start,
            stop_machine_arn=stop,
            clock=Clock(datetime(2026, 12, 7, 10, 0, tzinfo=UTC)),  # a Monday, 10:00 UTC
        )


def starts(deps: ApiDeps) -> list[str]:
    """Every start execution's name."""
    return [e["name"] for e in deps.sfn.list_executions(stateMachineArn=deps.start_machine_arn)["executions"]]


def test_retry_after_is_clamped_at_60_and_at_least_1() -> None:
    assert retry_after(60) == 60
    assert retry_after(61) == RETRY_AFTER_MAX_S == 60
    assert retry_after(59.2) == 60  # rounded up: never asks a client back before the ETA
    assert retry_after(0.0) == 1
    assert retry_after(-5) == 1


def test_answer_is_an_openai_error_with_retry_after() -> None:
    answer = WakeAnswer(503, "model_starting", "starting", 42).to_alb()
    assert answer["statusCode"] == 503 and answer["statusDescription"] == "503 Service Unavailable"
    assert answer["isBase64Encoded"] is False
    assert answer["headers"] == {"Content-Type": "application/json", "Retry-After": "42"}
    assert json.loads(answer["body"]) == {
        "error": {"message": "starting", "type": "service_unavailable_error", "code": "model_starting"}
    }


def test_a_refusal_tells_sdk_clients_not_to_retry() -> None:
    headers = WakeAnswer(503, "wake_disabled", "no").to_alb()["headers"]
    assert "Retry-After" not in headers and headers["x-should-retry"] == "false"


def test_first_request_starts_once_and_says_the_modeled_eta(deps: ApiDeps) -> None:
    answers = [wake(deps, HEADERS) for _ in range(5)]
    assert len(starts(deps)) == 1
    spec = deps.registry.profiles[PROFILE]
    modeled = modeled_start_s(spec, deps.registry.pools[spec.pool])
    assert modeled > RETRY_AFTER_MAX_S
    first = answers[0]
    assert first.status == 503 and first.code == "model_starting" and first.retry_after_s == 60
    assert "woken by this request" in first.message and f"modeled start of {modeled} s" in first.message
    ready_at = deps.clock.now() + timedelta(seconds=modeled)
    assert ready_at.strftime("%Y-%m-%d %H:%M:%S UTC") in first.message
    assert all("joined the start already under way" in a.message for a in answers[1:])


def _past_start(deps: ApiDeps, ready_after_s: float, ago_h: int) -> None:
    begun = deps.clock.now() - timedelta(hours=ago_h)
    deps.store.put_start(
        StartRecord(
            profile=PROFILE,
            start_id=f"s{ago_h}",
            execution=f"e{ago_h}",
            requested_at=begun,
            outcome="READY",
            ended_at=begun + timedelta(seconds=ready_after_s),
            marks=[
                Mark(name="requested", at=begun, source="t", seen_at=begun),
                Mark(name="ready", at=begun + timedelta(seconds=ready_after_s), source="t", seen_at=begun),
            ],
        )
    )


def test_eta_from_past_starts_gives_the_remaining_time(deps: ApiDeps) -> None:
    _past_start(deps, 40.0, 3)
    _past_start(deps, 50.0, 2)
    answer = wake(deps, HEADERS)
    # p50 of 40 and 50 s: 45 s from now, below the clamp, so Retry-After is the real remaining time.
    assert answer.retry_after_s == 45 and "p50 of 2 past start(s)" in answer.message


def test_stop_no_wake_refuses(deps: ApiDeps) -> None:
    deps.store.update_profile(PROFILE, deps.clock.now(), no_wake=True, stopped_by="arn:aws:iam::123456789012:user/ana")
    answer = wake(deps, HEADERS)
    assert (answer.code, answer.retry_after_s) == ("wake_disabled", None)
    assert "--no-wake" in answer.message and "user/ana" in answer.message
    assert starts(deps) == []


def test_outside_the_schedule_refuses(deps: ApiDeps) -> None:
    schedule = {"timezone": "UTC", "periods": [{"begin_time": "09:00", "end_time": "10:00"}]}
    deps.registry = registry(schedule=schedule)
    answer = wake(deps, HEADERS)
    assert answer.code == "outside_schedule" and "outside its schedule" in answer.message
    assert starts(deps) == []
    # One minute earlier the period runs (end exclusive): the request wakes it.
    deps.clock.current -= timedelta(minutes=1)  # type: ignore[attr-defined]
    assert wake(deps, HEADERS).code == "model_starting" and len(starts(deps)) == 1


def test_over_budget_refuses_at_the_budget_and_wakes_below_it(deps: ApiDeps) -> None:
    now = deps.clock.now()
    pool = deps.registry.pools[deps.registry.profiles[PROFILE].pool]
    deps.store.open_session(
        Session(
            profile=PROFILE,
            session_id="s1",
            pool=deps.registry.profiles[PROFILE].pool,
            instance_type=pool.instance_type,
            price_key=pool.price_key,
            started_at=now - timedelta(hours=2),
            stopped_at=now - timedelta(hours=1),
        )
    )
    spent, unpriced = month_cost_usd(deps, PROFILE, now)
    assert spent > 0 and unpriced == []
    deps.registry = registry(routing={"monthly_budget_usd": spent})
    refused = wake(deps, HEADERS)
    assert refused.code == "over_budget" and f"{spent:.2f} USD" in refused.message
    assert starts(deps) == []
    deps.registry = registry(routing={"monthly_budget_usd": spent + 0.01})
    assert wake(deps, HEADERS).code == "model_starting" and len(starts(deps)) == 1


def _without_price(deps: ApiDeps, key: str) -> None:
    """The catalog as deps has it, less the region's price of key."""
    instances = {k: v for k, v in deps.catalog.instances.items() if k != f"{deps.registry.region}/{key}"}
    deps.catalog = deps.catalog.model_copy(update={"instances": instances})


def test_a_budget_the_catalog_cannot_price_refuses_naming_the_key(deps: ApiDeps) -> None:
    pool = deps.registry.pools[deps.registry.profiles[PROFILE].pool]
    key = pool.price_key or pool.instance_type
    deps.registry = registry(routing={"monthly_budget_usd": 100})
    assert deps.catalog.instance(deps.registry.region, key) is not None  # priced: the budget counts
    _without_price(deps, key)
    answer = wake(deps, HEADERS)
    assert (answer.status, answer.code, answer.retry_after_s) == (503, "budget_unpriced", None)
    assert f"no us-east-1/{key}" in answer.message and f"instance type {pool.instance_type}" in answer.message
    assert "prices.json" in answer.message and "price_key" in answer.message
    assert answer.to_alb()["headers"]["x-should-retry"] == "false"
    assert starts(deps) == []
    # Without a budget nothing needs a price: the request wakes it.
    deps.registry = registry()
    assert wake(deps, HEADERS).code == "model_starting" and len(starts(deps)) == 1


def test_an_unpriced_session_this_month_refuses_and_one_last_month_does_not(deps: ApiDeps) -> None:
    now = deps.clock.now()
    pool_name = deps.registry.profiles[PROFILE].pool
    alternate = "g7e.48xlarge"  # a type the start fell back to (capacity), which the catalog does not price
    _without_price(deps, alternate)
    deps.registry = registry(routing={"monthly_budget_usd": 100})

    def ran(session_id: str, started_at: datetime) -> None:
        """A closed session of an hour on the alternate instance type (no price_key: priced by type)."""
        deps.store.open_session(
            Session(
                profile=PROFILE,
                session_id=session_id,
                pool=pool_name,
                instance_type=alternate,
                started_at=started_at,
                stopped_at=started_at + timedelta(hours=1),
            )
        )

    ran("last-month", now.replace(day=1, hour=0) - timedelta(hours=1))  # ends at midnight
    assert month_cost_usd(deps, PROFILE, now) == (0.0, [])
    ran("this-month", now - timedelta(hours=2))
    assert month_cost_usd(deps, PROFILE, now) == (0.0, [alternate])
    answer = wake(deps, HEADERS)
    assert answer.code == "budget_unpriced" and f"no us-east-1/{alternate}" in answer.message
    assert starts(deps) == []


def test_unknown_header_and_ready_profile(deps: ApiDeps) -> None:
    assert wake(deps, {"x-llm-profile": "nope"}).status == 404
    deps.store.update_profile(PROFILE, deps.clock.now(), phase=Phase.READY)
    answer = wake(deps, HEADERS)
    assert answer.code == "model_routing" and answer.retry_after_s == 2 and starts(deps) == []
