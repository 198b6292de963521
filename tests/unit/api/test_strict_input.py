"""The handler reads input strictly: no coercion of the top-level fields, duplicate keys and unknown
query parameters refused by name, invalid JSON answered with its line and column, every error with
its location, and an Idempotency-Key that belongs to its caller."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

Api = Any  # conftest.Api (conftest modules are not importable under --import-mode=importlib)
PROFILE = "deepseek-v4-flash"
OTHER_CALLER = "arn:aws:sts::123456789012:assumed-role/llm-operators/bob"


def _executions(api: Api) -> list[dict[str, Any]]:
    return (
        api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"]
        + api.sfn.list_executions(stateMachineArn=api.stop_arn)["executions"]
    )


@pytest.mark.parametrize(
    ("action", "payload", "field", "expected"),
    [
        ("start", {"lease_minutes": "30"}, "lease_minutes", "must be a whole number"),
        ("start", {"lease_minutes": True}, "lease_minutes", "must be a whole number"),
        ("start", {"lease_minutes": 30.0}, "lease_minutes", "must be a whole number"),
        ("start", {"allow_shared_pool": 1}, "allow_shared_pool", "must be true or false"),
        ("start", {"allow_shared_pool": "true"}, "allow_shared_pool", "must be true or false"),
        ("keepalive", {"minutes": True}, "minutes", "must be a whole number"),
        ("keepalive", {"minutes": "30"}, "minutes", "must be a whole number"),
        ("stop", {"poll": {"interval_s": "5"}}, "poll.interval_s", "must be a whole number"),
    ],
)
def test_coercible_values_are_refused_naming_the_field_and_the_type(
    api: Api, action: str, payload: dict[str, Any], field: str, expected: str
) -> None:
    status, body = api.request("POST", f"/profiles/{PROFILE}/{action}", payload)
    assert status == 400, body
    assert body["field"] == f"body.{field}" and body["fields"] == [f"body.{field}"]
    assert body["message"] == f"invalid request: {field}: {expected}"
    assert _executions(api) == []


def test_the_same_values_uncoerced_are_accepted(api: Api) -> None:
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", {"lease_minutes": 30, "allow_shared_pool": True})
    assert status == 202, body


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b'{"lease_minutes": 60, "lease_minutes": 30}', "lease_minutes"),
        (b'{"poll": {"interval_s": 5, "interval_s": 50}}', "interval_s"),
    ],
)
def test_a_duplicate_key_is_refused_naming_it(api: Api, raw: bytes, key: str) -> None:
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", raw)
    assert status == 400 and body["field"] == "body" and body["fields"] == ["body"]
    assert body["message"] == f"body: duplicate key '{key}': each key may appear once in an object"
    assert _executions(api) == []


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b"{not json", "line 1, column 2: Expecting property name enclosed in double quotes"),
        (b'{\n  "lease_minutes": 60,\n}', "line 3, column 1: Expecting property name enclosed in double quotes"),
        (b'{"lease_minutes": 60', "line 1, column 21: Expecting ',' delimiter"),
    ],
)
def test_invalid_json_says_where_it_broke(api: Api, raw: bytes, where: str) -> None:
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", raw)
    assert status == 400 and body["field"] == "body" and body["fields"] == ["body"]
    assert body["message"] == f"body: not valid JSON at {where}"
    assert _executions(api) == []


def test_an_unknown_query_parameter_is_refused_by_name(api: Api) -> None:
    status, body = api.request("GET", f"/profiles/{PROFILE}/starts?limt=5")
    assert status == 400 and body["field"] == "query.limt" and body["fields"] == ["query.limt"]
    assert body["message"] == "invalid request: limt: is not a known query parameter (allowed: limit)"
    status, body = api.request("POST", f"/profiles/{PROFILE}/start?dry_run=1", {})
    assert status == 400 and body["field"] == "query.dry_run" and "(allowed: none)" in body["message"]
    assert _executions(api) == []
    status, body = api.request("GET", "/benchmarks?profil=x&limit=2")
    assert status == 400 and body["fields"] == ["query.profil"] and "(allowed: limit, profile)" in body["message"]
    # The declared ones still work (a query string is text: its numbers are read as numbers).
    assert api.request("GET", f"/profiles/{PROFILE}/starts?limit=5")[0] == 200


def test_every_error_names_its_location(api: Api) -> None:
    status, body = api.request("GET", f"/profiles/{PROFILE}/starts?limit=0")
    assert status == 400 and body["field"] == "query.limit"
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", {"lease_minutes": "x", "colour": "red"})
    assert status == 400 and body["field"] is None
    assert sorted(body["fields"]) == ["body.colour", "body.lease_minutes"]
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", {}, headers={"Idempotency-Key": "k" * 129})
    assert status == 400 and body["fields"] == ["header.Idempotency-Key"]
    status, body = api.request("POST", f"/profiles/{PROFILE}/start", {"poll": {"interval_s": 301, "max_interval_s": 301}})
    assert status == 400 and body["fields"] == ["body.poll.interval_s", "body.poll.max_interval_s"]
    assert _executions(api) == []


def test_an_idempotency_key_belongs_to_its_caller(api: Api) -> None:
    first_event = api.event("start_profile")
    status, first = api.call(first_event)
    assert status == 202
    api.sfn.stop_execution(executionArn=first["execution_arn"])
    # Another principal sending the same key and body gets an answer of its own, not alice's.
    other = copy.deepcopy(first_event)
    other["requestContext"]["identity"].update(userArn=OTHER_CALLER, caller="AROAEXAMPLEROLEID:bob")
    status, theirs = api.call(other)
    assert status == 202 and theirs["execution_arn"] != first["execution_arn"]
    assert len(api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"]) == 2
    assert json.loads(api.sfn.describe_execution(executionArn=theirs["execution_arn"])["input"])["requested_by"] == OTHER_CALLER
    # The first caller repeating its key still gets its first answer; with another body, a 409.
    assert api.call(api.event("start_profile")) == (202, first)
    reused = api.call(api.event("start_profile", body=json.dumps({"lease_minutes": 120})))
    assert reused[0] == 409 and reused[1]["fields"] == ["header.Idempotency-Key"]
    assert len(api.sfn.list_executions(stateMachineArn=api.start_arn)["executions"]) == 2
