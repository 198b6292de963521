"""The REST API through its Lambda handler, with API Gateway's real event shapes (events/api/)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters

from servingctl.costs import load_catalog
from servingctl.store.models import InstanceSpan, Phase, Session

Api = Any  # conftest.Api (conftest modules are not importable under --import-mode=importlib)
PROFILE = "deepseek-v4-flash"
OTHER = "nemotron-nano"  # on pool g7e-1gpu (g7e.2xlarge)
CALLER = "arn:aws:sts::123456789012:assumed-role/llm-operators/alice"  # userArn of the events/api samples


def _ready(api: Api, profile: str = PROFILE, *, hours_ago: float = 2.0, lease_min: float = 30) -> datetime:
    """Record profile READY with an open session that started hours_ago."""
    now = datetime.now(UTC)
    started = now - timedelta(hours=hours_ago)
    api.store.open_session(
        Session(
            profile=profile,
            session_id=f"s-{profile}",
            pool="g7e-2gpu",
            instance_type="g7e.12xlarge",
            started_at=started,
            start_execution="e1",
        )
    )
    api.store.set_phase(profile, Phase.STARTING, started, "e1", session_id=f"s-{profile}")
    api.store.set_phase(profile, Phase.READY, now, "e1", ready_at=now, lease_deadline=now + timedelta(minutes=lease_min))
    return started


def test_list_profiles_shows_every_registry_profile_stopped_at_first(api: Api) -> None:
    status, body = api.call(api.event("list_profiles"))
    assert status == 200
    assert [(p["name"], p["phase"], p["instance_type"]) for p in body] == [
        ("deepseek-v4-flash", "STOPPED", "g7e.12xlarge"),
        ("nemotron-nano", "STOPPED", "g7e.2xlarge"),
        ("qwen3-coder", "STOPPED", "g7e.12xlarge"),
    ]


def test_get_profile_reports_counts_capacity_and_accrued_cost(api: Api) -> None:
    _ready(api, hours_ago=2.0)
    status, body = api.call(api.event("get_profile"))
    assert status == 200
    assert body["phase"] == "READY" and body["desired_count"] == 0 and body["instances"] == []
    assert body["target_health"] == {} and body["lease_deadline"] is not None
    price = load_catalog().instance("us-east-1", "g7e.12xlarge")
    assert price is not None
    assert abs(body["uptime_s"] - 7200) < 60
    assert abs(body["accrued_cost_usd"] - body["uptime_s"] / 3600 * price.hourly_usd) < 0.01
    assert body["hourly_usd"] == price.hourly_usd


def test_get_profile_says_why_the_reconciler_last_stopped_it(api: Api) -> None:
    now = datetime.now(UTC)
    api.store.update_profile(
        PROFILE, now, reconciled_at=now, reconcile_reason="lock-owner-ended: lock held by start-x, which is ABORTED"
    )
    status, body = api.call(api.event("get_profile"))
    assert status == 200
    assert body["reconcile_reason"] == "lock-owner-ended: lock held by start-x, which is ABORTED"
    assert body["reconciled_at"] is not None


def test_unknown_profile_is_404_naming_the_known_ones(api: Api) -> None:
    status, body = api.call(api.event("get_profile_unknown"))
    assert status == 404
    assert body["field"] == "path.name" and "no-such-model" in body["message"] and "deepseek-v4-flash" in body["message"]
    for method, path in (
        ("POST", "/profiles/nope/start"),
        ("POST", "/profiles/nope/stop"),
        ("POST", "/profiles/nope/keepalive"),
        ("GET", "/ledger?profile=nope"),
    ):
        assert api.request(method, path)[0] == 404, path


def test_start_answers_202_with_the_execution_and_passes_the_input(api: Api) -> None:
    status, body = api.call(api.event("start_profile"))
    assert status == 202, body
    assert body["action"] == "start" and body["profile"] == PROFILE and body["joined"] is False
    assert body["execution_id"].startswith("start-deepseek-v4-flash-")
    described = api.sfn.describe_execution(executionArn=body["execution_arn"])
    assert described["status"] == "RUNNING"
    # Who did it: the caller's IAM ARN from API Gateway's request context goes into the execution input.
    assert json.loads(described["input"]) == {
        "profile": PROFILE,
        "allow_shared_pool": False,
        "lease_minutes": 90,
        "requested_by": CALLER,
    }


def test_a_second_start_joins_the_running_one(api: Api) -> None:
    first = api.request("POST", f"/profiles/{PROFILE}/start", {"lease_minutes": 60})[1]
    status, again = api.request("POST", f"/profiles/{PROFILE}/start", {"lease_minutes": 30})
    assert status == 202 and again["joined"] is True and again["execution_arn"] == first["execution_arn"]
    assert len(api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"]) == 1


def test_the_execution_name_is_the_same_until_a_new_execution_of_the_flow_began(api: Api) -> None:
    from servingctl.api import service

    # The profile record moving (a stop flag, a probe) does not change the intent's name.
    first = service.intent_name("start", PROFILE, None)
    assert first == service.intent_name("start", PROFILE, None) != service.intent_name("stop", PROFILE, None)
    started = api.request("POST", f"/profiles/{PROFILE}/start")[1]
    assert started["execution_id"] == first
    api.store.update_profile(PROFILE, datetime.now(UTC), last_error="moved meanwhile")
    assert api.request("POST", f"/profiles/{PROFILE}/start")[1]["execution_arn"] == started["execution_arn"]
    latest = {"executionArn": started["execution_arn"]}
    assert service.intent_name("start", PROFILE, latest) not in (first, service.intent_name("stop", PROFILE, latest))


def test_a_new_start_after_the_last_one_finished_gets_a_new_execution(api: Api) -> None:
    first = api.request("POST", f"/profiles/{PROFILE}/start")[1]
    api.sfn.stop_execution(executionArn=first["execution_arn"])  # finished without moving the state
    status, second = api.request("POST", f"/profiles/{PROFILE}/start")
    assert status == 202 and second["execution_arn"] != first["execution_arn"] and second["joined"] is False


def test_idempotency_key_returns_the_first_answer_and_refuses_reuse_for_another_request(api: Api) -> None:
    event = api.event("start_profile")
    status, first = api.call(event)
    api.sfn.stop_execution(executionArn=first["execution_arn"])
    status, again = api.call(api.event("start_profile"))
    assert status == 202 and again == first  # the stored answer, no new execution
    assert len(api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"]) == 1
    records = api.store._table.query(KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": "idempotency#api"})
    assert records["Count"] == 1 and records["Items"][0]["status"] == "COMPLETED" and "ttl" in records["Items"][0]
    reused = api.call(api.event("start_profile", body=json.dumps({"lease_minutes": 120})))
    assert reused[0] == 409 and reused[1]["field"] == "header.Idempotency-Key"


def test_bad_input_is_400_naming_the_field(api: Api) -> None:
    status, body = api.call(api.event("start_profile_bad_lease"))
    assert status == 400 and body["field"] == "body.lease_minutes" and "720" in body["message"]
    cases = [
        ({"lease_minutes": 1}, "lease_minutes"),
        ({"lease_minutes": "soon"}, "lease_minutes"),
        ({"allow_shared_pool": "maybe"}, "allow_shared_pool"),
        ({"colour": "red"}, "colour"),
        ({"poll": {"interval_s": 0}}, "interval_s"),
        ([1, 2], "body"),
    ]
    for payload, field in cases:
        status, body = api.request("POST", f"/profiles/{PROFILE}/start", payload)
        assert status == 400, payload
        assert body["error"] == "BadRequest" and field in body["message"], (payload, body)
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", b"{not json")
    assert status == 400
    assert api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"] == []


@pytest.mark.parametrize(
    ("action", "body", "field", "largest", "limit"),
    [
        ("start", {"deadlines": {"capacity_s": "{}"}}, "deadlines.capacity_s", 7200, "limits.max_start_deadline_s"),
        ("start", {"deadlines": {"health_s": "{}"}}, "deadlines.health_s", 7200, "limits.max_start_deadline_s"),
        ("start", {"poll": {"interval_s": 15, "max_interval_s": "{}"}}, "poll.max_interval_s", 300, "limits.max_poll_interval_s"),
        ("stop", {"deadlines": {"lock_s": "{}"}}, "deadlines.lock_s", 3600, "limits.max_stop_deadline_s"),
        ("stop", {"deadlines": {"terminate_s": "{}"}}, "deadlines.terminate_s", 3600, "limits.max_stop_deadline_s"),
        ("stop", {"poll": {"interval_s": 15, "max_interval_s": "{}"}}, "poll.max_interval_s", 300, "limits.max_poll_interval_s"),
    ],
)
def test_deadlines_and_poll_intervals_are_bounded_by_the_registry(
    api: Api, action: str, body: dict, field: str, largest: int, limit: str
) -> None:
    def at(value: int) -> dict:
        return json.loads(json.dumps(body).replace('"{}"', str(value)))

    arn = api.start_arn if action == "start" else api.stop_arn
    # One past the limit: 400 naming the field and the allowed range; nothing started.
    status, answer = api.request("POST", f"/profiles/{PROFILE}/{action}", at(largest + 1))
    assert status == 400 and answer["field"] == f"body.{field}"
    assert answer["message"] == (
        f"invalid request: {field}: must be between 1 and {largest} seconds (the {limit} of {PROFILE}); got {largest + 1}"
    )
    assert api.sfn.list_executions(stateMachineArn=arn)["executions"] == []
    # At the limit: accepted.
    if action == "stop":
        api.request("POST", f"/profiles/{PROFILE}/start")
    status, answer = api.request("POST", f"/profiles/{PROFILE}/{action}", at(largest))
    assert status == 202, answer


def test_every_field_past_its_limit_is_named(api: Api) -> None:
    body = {"poll": {"interval_s": 301, "max_interval_s": 301}, "deadlines": {"task_s": 9000}}
    status, answer = api.request("POST", f"/profiles/{PROFILE}/start", body)
    assert status == 400 and answer["field"] is None
    assert "poll.interval_s: must be between 1 and 300 seconds" in answer["message"]
    assert "poll.max_interval_s: must be between 1 and 300 seconds" in answer["message"]
    assert "deadlines.task_s: must be between 1 and 7200 seconds" in answer["message"]


def test_stop_preempts_a_running_start_but_start_while_stopping_is_409(api: Api) -> None:
    started = api.request("POST", f"/profiles/{PROFILE}/start")[1]
    status, stop = api.call(api.event("stop_profile"))
    assert status == 202 and stop["action"] == "stop" and stop["execution_id"].startswith("stop-deepseek-v4-flash-")
    assert api.sfn.describe_execution(executionArn=started["execution_arn"])["status"] == "RUNNING"
    assert json.loads(api.sfn.describe_execution(executionArn=stop["execution_arn"])["input"]) == {
        "profile": PROFILE,
        "requested_by": CALLER,
    }
    api.sfn.stop_execution(executionArn=started["execution_arn"])
    status, body = api.request("POST", f"/profiles/{PROFILE}/start")
    assert status == 409 and stop["execution_id"] in body["message"]
    assert api.request("POST", f"/profiles/{PROFILE}/stop")[1]["execution_arn"] == stop["execution_arn"]  # joined


def test_start_on_a_pool_another_profile_holds_is_409_unless_shared(api: Api) -> None:
    _ready(api, "qwen3-coder")
    status, body = api.request("POST", f"/profiles/{PROFILE}/start")
    assert status == 409 and body["field"] == "body.allow_shared_pool" and "qwen3-coder (READY)" in body["message"]
    assert api.request("POST", f"/profiles/{PROFILE}/start", {"allow_shared_pool": True})[0] == 202
    assert api.request("POST", "/profiles/nemotron-nano/start")[0] == 202  # another pool


def test_keepalive_extends_a_ready_lease_and_refuses_otherwise(api: Api) -> None:
    status, body = api.call(api.event("keepalive"))
    assert status == 409 and "STOPPED" in body["message"]
    _ready(api, lease_min=5)
    before = api.store.get_profile(PROFILE).lease_deadline
    status, body = api.call(api.event("keepalive"))
    assert status == 200
    after = api.store.get_profile(PROFILE).lease_deadline
    assert after is not None and before is not None and after - before > timedelta(minutes=50)
    assert abs((after - datetime.now(UTC)) - timedelta(minutes=60)) < timedelta(seconds=30)
    assert body["lease_deadline"] is not None and body["extended"] is True and "lease now ends at" in body["message"]
    assert body["kept_alive_by"] == CALLER and api.store.get_profile(PROFILE).kept_alive_by == CALLER
    # Never shortens, and says so: a 10-minute keepalive leaves the 60-minute lease.
    status, body = api.request("POST", f"/profiles/{PROFILE}/keepalive", {"minutes": 10})
    assert status == 200 and body["extended"] is False and "kept, not shortened" in body["message"]
    assert api.store.get_profile(PROFILE).lease_deadline == after
    assert datetime.fromisoformat(body["lease_deadline"]) == after
    status, body = api.request("POST", f"/profiles/{PROFILE}/keepalive", {"minutes": 100000})
    assert status == 400 and body["field"] == "body.minutes" and "720" in body["message"]


def test_execution_progress_and_its_errors(api: Api) -> None:
    started = api.request("POST", f"/profiles/{PROFILE}/start")[1]
    status, body = api.request("GET", f"/executions/{started['execution_id']}")
    assert status == 200 and body["status"] == "RUNNING" and body["profile"] == PROFILE and body["action"] == "start"
    assert body["elapsed_s"] >= 0
    assert api.call(api.event("get_execution"))[0] == 404  # a well-formed name that never ran
    assert api.request("GET", "/executions/rm-rf")[0] == 404
    assert api.request("GET", "/executions/" + "x" * 81)[0] == 400


def test_ledger_prices_sessions_and_sums_months(api: Api) -> None:
    price = load_catalog().instance("us-east-1", "g7e.12xlarge")
    assert price is not None
    start = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    for i, hours in enumerate((2.0, 1.5)):
        opened = api.store.open_session(
            Session(
                profile=PROFILE,
                session_id=f"{i}",
                pool="g7e-2gpu",
                instance_type="g7e.12xlarge",
                started_at=start + timedelta(days=i),
            )
        )
        api.store.close_session(PROFILE, opened.session_id, opened.started_at + timedelta(hours=hours), "stop", "stopped")
    status, body = api.call(api.event("ledger"))
    assert status == 200
    assert [round(s["uptime_hours"], 3) for s in body["sessions"]] == [2.0, 1.5]
    assert body["monthly"] == [
        {"profile": PROFILE, "month": "2026-03", "uptime_hours": 3.5, "cost_usd": round(3.5 * price.hourly_usd, 4)}
    ]
    assert body["total_cost_usd"] == round(3.5 * price.hourly_usd, 4)


def test_the_ledger_bills_every_replica_for_its_own_time(api: Api) -> None:
    price = load_catalog().instance("us-east-1", "g7e.12xlarge")
    assert price is not None
    start = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    opened = api.store.open_session(
        Session(profile=PROFILE, session_id="r", pool="g7e-2gpu", instance_type="g7e.12xlarge", started_at=start)
    )
    spans = [
        InstanceSpan(instance_id="i-1", started_at=start, stopped_at=start + timedelta(hours=2)),
        InstanceSpan(instance_id="i-2", started_at=start + timedelta(hours=1), stopped_at=start + timedelta(hours=1.5)),
    ]
    api.store.close_session(PROFILE, opened.session_id, start + timedelta(hours=2), "stop", "stopped", spans)
    status, body = api.call(api.event("ledger"))
    assert status == 200
    [row] = body["sessions"]
    assert (row["instances"], row["uptime_hours"], row["instance_hours"]) == (2, 2.0, 2.5)
    assert row["cost_usd"] == body["total_cost_usd"] == round(2.5 * price.hourly_usd, 4)


def test_a_body_that_is_not_utf8_json_is_refused_before_parsing(api: Api) -> None:
    import base64

    event = api.event("start_profile")
    multipart = api.call({**event, "headers": {**event["headers"], "Content-Type": "multipart/form-data"}})
    assert multipart[0] == 415 and multipart[1]["field"] == "header.Content-Type"
    binary = api.call(
        {
            **event,
            "headers": {**event["headers"], "Idempotency-Key": "k2"},
            "body": base64.b64encode(b"\xff\xfe\x7f").decode(),
            "isBase64Encoded": True,
        }
    )
    assert binary[0] == 400 and binary[1]["field"] == "body"
    encoded = api.call(
        {
            **event,
            "headers": {**event["headers"], "Idempotency-Key": "k3"},
            "body": base64.b64encode(b'{"lease_minutes": 60}').decode(),
            "isBase64Encoded": True,
        }
    )
    assert encoded[0] == 202
    assert api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"][0]["status"] == "RUNNING"


def test_start_of_a_ready_profile_says_so_without_a_new_execution(api: Api) -> None:
    _ready(api, lease_min=30)
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", {"lease_minutes": 60})
    assert status == 200 and body["already"] is True and body["phase"] == "READY" and body["joined"] is False
    assert "is already READY since" in body["message"] and "(lease until" in body["message"]
    assert body["lease_deadline"] is not None and body["since"] is not None
    assert api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"] == []


def test_stop_of_a_stopped_profile_says_so_but_a_running_start_is_still_stopped(api: Api) -> None:
    status, body = api.request("POST", f"/profiles/{PROFILE}/stop")
    assert status == 200 and body["already"] is True and "is already STOPPED" in body["message"]
    assert api.sfn.list_executions(stateMachineArn=api.stop_arn)["executions"] == []
    started = api.request("POST", f"/profiles/{PROFILE}/start")[1]  # its state is still STOPPED: the flow runs
    status, stop = api.request("POST", f"/profiles/{PROFILE}/stop")
    assert status == 202 and stop["already"] is False and stop["execution_id"].startswith("stop-")
    api.sfn.stop_execution(executionArn=started["execution_arn"])


def test_the_ledger_and_the_listed_price_use_the_price_key(api: Api) -> None:
    price, own = load_catalog().instance("us-east-1", "g7e.12xlarge"), load_catalog().instance("us-east-1", "g7e.2xlarge")
    assert price is not None and own is not None and price.hourly_usd != own.hourly_usd
    start = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    opened = api.store.open_session(
        Session(
            profile=OTHER,
            session_id="k",
            pool="g7e-1gpu",
            instance_type="g7e.2xlarge",
            price_key="g7e.12xlarge",
            started_at=start,
        )
    )
    api.store.close_session(OTHER, opened.session_id, start + timedelta(hours=2), "stop", "stopped")
    status, body = api.request("GET", f"/ledger?profile={OTHER}")
    assert status == 200 and body["total_cost_usd"] == round(2 * price.hourly_usd, 4)

    # The price a profile is listed with is its pool's price_key's, not its instance type's.
    def hourly() -> Any:
        return {p["name"]: p["hourly_usd"] for p in api.request("GET", "/profiles")[1]}[OTHER]

    assert hourly() == own.hourly_usd  # the pool's own instance type
    ssm = boto3.client("ssm", region_name="us-east-1")
    parameter = os.environ["SERVINGCTL_REGISTRY"].removeprefix("ssm:") + "/pools/g7e-1gpu"
    pool = json.loads(ssm.get_parameter(Name=parameter)["Parameter"]["Value"]) | {"price_key": "g7e.12xlarge"}
    ssm.put_parameter(Name=parameter, Value=json.dumps(pool), Type="String", Overwrite=True)
    parameters.clear_caches()  # a new container would read it at once; this one caches it
    assert hourly() == price.hourly_usd


def test_a_lease_at_the_profiles_maximum_starts_and_a_minute_over_is_a_400(api: Api) -> None:
    status, started = api.request("POST", f"/profiles/{PROFILE}/start", {"lease_minutes": 720})
    assert status == 202 and started["execution_arn"]
    status, body = api.request("POST", f"/profiles/{OTHER}/start", {"lease_minutes": 721})
    assert status == 400 and body["field"] == "body.lease_minutes"
    assert body["message"] == f"lease_minutes: must be between 5 and 720 minutes (the max_lease_minutes of {OTHER}); got 721"
    assert [
        json.loads(api.sfn.describe_execution(executionArn=e["executionArn"])["input"])["profile"]
        for e in api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"]
    ] == [PROFILE]  # nothing started for 721
