"""Hostile requests against the twin's HTTP API (its API Gateway in front of the real handler): wrong
types, coercible strings, unknown and misspelled fields, duplicate keys, invalid JSON, an oversized
body, values one past each bound, wrong methods, unsigned and wrongly signed calls, another
account's principal. Each is a 4xx naming the input at fault (its location: body, query, path,
header) or giving API Gateway's own answer (a body the API's model refuses: its request validator's
400, whose detail names a property not allowed or missing, or the type or bound broken), and nothing
stored changes: the table's items and the
flows' executions are the same after all of them. The same values at their bounds are accepted.

Prints the figure: how many hostile requests were tried and their answers by status."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import httpx
import pytest
from botocore.credentials import Credentials

from servingctl_cli.sigv4 import SigV4
from servingctl_twin.apigateway.apigw import MAX_PAYLOAD_BYTES, Principal
from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

PROFILE = "nemotron-nano"
MAX_STARTS = 100  # GET /profiles/{name}/starts?limit=
MAX_RUNS = 200  # GET /benchmarks?limit=
FAST = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}  # wait-loop pacing on the twin's clock
OTHER_ACCOUNT = Principal("arn:aws:iam::210987654321:user/mallory", "AKIAOTHERACCOUNT0001", "other-secret", "AIDAMALLORY")
NOT_SIGNED = {"message": "Missing Authentication Token"}
# API Gateway's request validator (json-schema-validator) in the detail of its BAD_REQUEST_BODY answer.
TYPE = "instance type ({}) does not match any allowed primitive type (allowed: [{}])"
INTEGER_OR_NULL = TYPE.replace("{}]", '"integer","null"]')
BOOLEAN = TYPE.replace("{}]", '"boolean"]')
NOT_ALLOWED = "object instance has properties which are not allowed by the schema: "
MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
    "Access Key and signing method. Consult the service documentation for details."
)


@dataclass
class Hostile:
    """One hostile request and what must come back: status, and the location named (fields) or the
    exact answer of API Gateway."""

    name: str
    method: str
    path: str
    body: Any = None  # JSON-encoded unless bytes
    status: int = 400
    fields: list[str] | None = None
    says: str | None = None  # in the message
    answer: dict[str, str] | None = None  # the whole body (API Gateway's refusals)
    detail: str | None = None  # a body the model refuses: in API Gateway's validator detail
    headers: dict[str, str] = field(default_factory=dict)
    auth: str = "signed"  # signed | unsigned | wrong-secret | unknown-key | wrong-region | expired | tampered | other-account


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0) as running:
        assert running.api is not None
        running.api.add_principal(OTHER_ACCOUNT)
        yield running


def _cases(twin: Twin) -> list[Hostile]:
    assert twin.registry is not None
    spec = twin.registry.profiles[PROFILE]
    lease_max, poll_max, deadline_max = spec.max_lease_minutes, spec.limits.max_poll_interval_s, spec.limits.max_start_deadline_s
    start, keepalive = f"/profiles/{PROFILE}/start", f"/profiles/{PROFILE}/keepalive"
    return [
        # wrong types
        Hostile("lease as a word", "POST", start, {"lease_minutes": "thirty"}, detail=INTEGER_OR_NULL.format("string")),
        Hostile("flag as a word", "POST", start, {"allow_shared_pool": "yes"}, detail=BOOLEAN.format("string")),
        Hostile("poll as text", "POST", start, {"poll": "fast"}, detail=TYPE.format("string", '"null","object"')),
        Hostile("body as a list", "POST", start, [1, 2], detail=TYPE.format("array", '"object"')),
        Hostile("keepalive minutes as a list", "POST", keepalive, {"minutes": [30]}, detail=INTEGER_OR_NULL.format("array")),
        Hostile("benchmark rounds as text", "POST", "/benchmarks", {"profile": PROFILE, "rounds": "3"}, says="rounds"),
        # coercible strings and values
        Hostile("lease as a numeric string", "POST", start, {"lease_minutes": "30"}, detail=INTEGER_OR_NULL.format("string")),
        Hostile("lease as true", "POST", start, {"lease_minutes": True}, detail=INTEGER_OR_NULL.format("boolean")),
        Hostile("lease as 30.0", "POST", start, {"lease_minutes": 30.0}, detail=INTEGER_OR_NULL.format("number")),
        Hostile("flag as 1", "POST", start, {"allow_shared_pool": 1}, detail=BOOLEAN.format("integer")),
        Hostile("flag as 'true'", "POST", start, {"allow_shared_pool": "true"}, detail=BOOLEAN.format("string")),
        Hostile("keepalive minutes as true", "POST", keepalive, {"minutes": True}, detail=INTEGER_OR_NULL.format("boolean")),
        Hostile("keepalive minutes as '30'", "POST", keepalive, {"minutes": "30"}, detail=INTEGER_OR_NULL.format("string")),
        Hostile(
            "stop poll as '5'",
            "POST",
            f"/profiles/{PROFILE}/stop",
            {"poll": {"interval_s": "5"}},
            detail=TYPE.format("string", '"integer"'),
        ),
        # unknown and misspelled fields
        Hostile("unknown field", "POST", start, {"colour": "red"}, detail=NOT_ALLOWED + '["colour"]'),
        Hostile("misspelled lease", "POST", start, {"lease_minute": 60}, detail=NOT_ALLOWED + '["lease_minute"]'),
        Hostile("misspelled keepalive", "POST", keepalive, {"minute": 60}, detail=NOT_ALLOWED + '["minute"]'),
        Hostile("misspelled nested", "POST", start, {"poll": {"interval": 5}}, detail=NOT_ALLOWED + '["interval"]'),
        Hostile(
            "benchmark without a profile",
            "POST",
            "/benchmarks",
            {"rounds": 1},
            detail='object has missing required properties (["profile"])',
        ),
        Hostile("unknown benchmark field", "POST", "/benchmarks", {"profile": PROFILE, "concurency": [1]}, says="concurency"),
        Hostile(
            "unknown query parameter", "GET", f"/profiles/{PROFILE}/starts?limt=5", fields=["query.limt"], says="allowed: limit"
        ),
        Hostile("query parameter on a POST", "POST", f"{start}?dry_run=1", {}, fields=["query.dry_run"]),
        # duplicate keys and invalid JSON
        Hostile(
            "duplicate key", "POST", start, b'{"lease_minutes": 60, "lease_minutes": 30}', fields=["body"], says="'lease_minutes'"
        ),
        Hostile(
            "duplicate nested key",
            "POST",
            start,
            b'{"poll": {"interval_s": 5, "interval_s": 50}}',
            fields=["body"],
            says="'interval_s'",
        ),
        Hostile("invalid JSON", "POST", start, b'{\n  "lease_minutes": 60,\n}', detail="line 3, column 1"),
        Hostile("truncated JSON", "POST", keepalive, b'{"minutes": ', detail="line 1, column 13"),
        Hostile("not UTF-8", "POST", start, b'{"lease_minutes": "\xff"}', detail="Invalid UTF-8"),
        Hostile(
            "not JSON at all",
            "POST",
            start,
            b"lease=30",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            status=415,
            fields=["header.Content-Type"],
        ),
        Hostile(
            "oversized body",
            "POST",
            start,
            b'{"x": "' + b"a" * MAX_PAYLOAD_BYTES + b'"}',
            status=413,
            answer={"message": "Request Too Long"},
        ),
        # one past each bound
        Hostile(
            "lease below its minimum",
            "POST",
            start,
            {"lease_minutes": 4},
            detail="numeric instance is lower than the required minimum (minimum: 5, found: 4)",
        ),
        Hostile(
            "lease above the profile's maximum",
            "POST",
            start,
            {"lease_minutes": lease_max + 1},
            fields=["body.lease_minutes"],
            says=f"between 5 and {lease_max}",
        ),
        Hostile(
            "poll interval above the registry's limit",
            "POST",
            start,
            {"poll": {"interval_s": poll_max + 1, "max_interval_s": poll_max + 1}},
            fields=["body.poll.interval_s", "body.poll.max_interval_s"],
            says=f"between 1 and {poll_max}",
        ),
        Hostile(
            "poll interval of zero",
            "POST",
            start,
            {"poll": {"interval_s": 0}},
            detail="numeric instance is lower than the required minimum (minimum: 1, found: 0)",
        ),
        Hostile(
            "deadline above the registry's limit",
            "POST",
            start,
            {"deadlines": {"capacity_s": deadline_max + 1}},
            fields=["body.deadlines.capacity_s"],
            says=f"between 1 and {deadline_max}",
        ),
        Hostile(
            "keepalive of zero minutes",
            "POST",
            keepalive,
            {"minutes": 0},
            detail="numeric instance is lower than the required minimum (minimum: 1, found: 0)",
        ),
        Hostile("keepalive above the maximum lease", "POST", keepalive, {"minutes": lease_max + 1}, fields=["body.minutes"]),
        Hostile("starts limit of zero", "GET", f"/profiles/{PROFILE}/starts?limit=0", fields=["query.limit"], says="at least 1"),
        Hostile(
            "starts limit one past",
            "GET",
            f"/profiles/{PROFILE}/starts?limit={MAX_STARTS + 1}",
            fields=["query.limit"],
            says=f"at most {MAX_STARTS}",
        ),
        Hostile(
            "runs limit one past", "GET", f"/benchmarks?limit={MAX_RUNS + 1}", fields=["query.limit"], says=f"at most {MAX_RUNS}"
        ),
        Hostile(
            "Idempotency-Key one past 128",
            "POST",
            start,
            {},
            headers={"Idempotency-Key": "k" * 129},
            fields=["header.Idempotency-Key"],
        ),
        Hostile(
            "benchmark concurrency of zero",
            "POST",
            "/benchmarks",
            {"profile": PROFILE, "concurrencies": [0]},
            says="concurrencies",
        ),
        # unknown names in the path
        Hostile("unknown profile", "POST", "/profiles/nope/start", {}, status=404, fields=["path.name"]),
        Hostile("unknown execution", "GET", "/executions/start-nope", status=404, fields=["path.execution_id"]),
        # wrong methods: API Gateway answers a method the API does not define as it answers no token
        Hostile("DELETE a profile", "DELETE", f"/profiles/{PROFILE}", status=403, answer=NOT_SIGNED),
        Hostile("PUT a start", "PUT", start, {}, status=403, answer=NOT_SIGNED),
        Hostile("GET a start", "GET", start, status=403, answer=NOT_SIGNED),
        Hostile("PATCH the ledger", "PATCH", "/ledger", {}, status=403, answer=NOT_SIGNED),
        Hostile("unknown route", "GET", "/admin", status=403, answer=NOT_SIGNED),
        # unsigned and wrongly signed calls, another account's principal
        Hostile("unsigned start", "POST", start, {}, status=403, answer=NOT_SIGNED, auth="unsigned"),
        Hostile("unsigned read", "GET", "/profiles", status=403, answer=NOT_SIGNED, auth="unsigned"),
        Hostile("wrong secret", "POST", start, {}, status=403, answer={"message": MISMATCH}, auth="wrong-secret"),
        Hostile(
            "unknown access key",
            "POST",
            start,
            {},
            status=403,
            answer={"message": "The security token included in the request is invalid."},
            auth="unknown-key",
        ),
        Hostile(
            "signed for another region",
            "GET",
            "/profiles",
            status=403,
            answer={"message": "Credential should be scoped to a valid region, not 'eu-west-1'. "},
            auth="wrong-region",
        ),
        Hostile("signature ten minutes old", "POST", start, {}, status=403, says="Signature expired", auth="expired"),
        Hostile(
            "body changed after signing",
            "POST",
            start,
            {"lease_minutes": 60},
            status=403,
            answer={"message": MISMATCH},
            auth="tampered",
        ),
        Hostile(
            "another account's principal",
            "POST",
            start,
            {},
            status=403,
            auth="other-account",
            says=f"User: {OTHER_ACCOUNT.arn} is not authorized to perform: execute-api:Invoke on resource: "
            f"arn:aws:execute-api:us-east-1:********9012:twinapi001/local/POST{start}",
        ),
        Hostile("another account reads", "GET", "/profiles", status=403, auth="other-account", says="is not authorized"),
    ]


def _auth(twin: Twin, kind: str) -> httpx.Auth | None:
    if kind == "unsigned":
        return None
    if kind == "wrong-secret":
        return SigV4(Credentials("AKIATWINLOCALUSER000", "not-the-secret"), twin.region)
    if kind == "unknown-key":
        return SigV4(Credentials("AKIANOBODYKNOWSTHIS0", "whatever"), twin.region)
    if kind == "wrong-region":
        return SigV4(Credentials("AKIATWINLOCALUSER000", "twin-local-secret-access-key"), "eu-west-1")
    if kind == "other-account":
        return twin.api_auth(OTHER_ACCOUNT)
    return twin.api_auth()


def _send(twin: Twin, case: Hostile) -> httpx.Response:
    assert twin.api_url is not None
    content = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode() if case.body is not None else None
    headers = ({"Content-Type": "application/json"} if content is not None else {}) | case.headers
    with httpx.Client(base_url=twin.api_url, timeout=120) as client:
        request = client.build_request(case.method, case.path, content=content, headers=headers)
        if case.auth == "expired":
            with mock.patch(
                "botocore.auth.get_current_datetime", return_value=datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=10)
            ):
                request = next(twin.api_auth().auth_flow(request))
        elif case.auth == "tampered":
            request = next(twin.api_auth().auth_flow(request))
            changed = json.dumps({"lease_minutes": 600}).encode()
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx.Request(case.method, request.url, headers=headers, content=changed)
        else:
            auth = _auth(twin, case.auth)
            if auth is not None:
                request = next(auth.auth_flow(request))
        return client.send(request)


def _stored(twin: Twin) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Every item of the state table, and every execution of every flow."""
    table = twin.client("dynamodb").get_paginator("scan").paginate(TableName=twin.table_name)
    items = sorted((item for page in table for item in page["Items"]), key=lambda i: json.dumps(i, sort_keys=True))
    sfn = twin.client("stepfunctions")
    executions = {
        arn: sorted(e["executionArn"] for e in sfn.list_executions(stateMachineArn=arn)["executions"])
        for arn in twin.state_machines.values()
    }
    return items, executions


def test_hostile_requests_are_refused_naming_the_input_and_change_nothing(twin: Twin) -> None:
    cases = _cases(twin)
    before = _stored(twin)
    answers: Counter[int] = Counter()
    wrong = []
    for case in cases:
        answer = _send(twin, case)
        answers[answer.status_code] += 1
        body = answer.json()
        problems = []
        if answer.status_code != case.status:
            problems.append(f"status {answer.status_code}, expected {case.status}")
        if case.answer is not None and body != case.answer:
            problems.append(f"answer {body}, expected {case.answer}")
        if case.fields is not None and body.get("fields") != case.fields:
            problems.append(f"fields {body.get('fields')}, expected {case.fields}")
        if case.detail is not None and (
            body.get("message") != "Invalid request body" or case.detail not in body.get("detail", "")
        ):
            problems.append(f"answer {body}, expected API Gateway's invalid body with {case.detail!r}")
        if case.says is not None and case.says not in (body.get("message") or body.get("Message") or ""):
            problems.append(f"message {body} lacks {case.says!r}")
        if problems:
            wrong.append(f"{case.name}: " + "; ".join(problems))
    after = _stored(twin)
    print(
        f"\nhostile requests: {len(cases)} tried; answers by status: "
        + ", ".join(f"{status}: {count}" for status, count in sorted(answers.items()))
    )
    assert wrong == []
    assert all(400 <= status < 500 for status in answers)
    assert after == before  # nothing stored changed: no item, no execution


def test_the_same_inputs_at_their_bounds_are_accepted(twin: Twin) -> None:
    assert twin.registry is not None
    spec = twin.registry.profiles[PROFILE]
    api = httpx.Client(base_url=twin.api_url or "", timeout=60, auth=twin.api_auth())
    assert api.get(f"/profiles/{PROFILE}/starts", params={"limit": MAX_STARTS}).status_code == 200
    assert api.get(f"/profiles/{PROFILE}/starts", params={"limit": 1}).status_code == 200
    assert api.get("/benchmarks", params={"limit": MAX_RUNS}).status_code == 200
    # The registry's poll limit on a stop of the STOPPED profile: accepted, and nothing to do.
    at_limit = {"interval_s": spec.limits.max_poll_interval_s, "max_interval_s": spec.limits.max_poll_interval_s}
    already = api.post(
        f"/profiles/{PROFILE}/stop", json={"poll": at_limit, "deadlines": {"lock_s": spec.limits.max_stop_deadline_s}}
    )
    assert already.status_code == 200 and already.json()["already"] is True, already.text
    body = {
        "lease_minutes": spec.max_lease_minutes,
        "allow_shared_pool": True,
        "poll": FAST,
        "deadlines": {"capacity_s": spec.limits.max_start_deadline_s},
    }
    started = api.post(f"/profiles/{PROFILE}/start", json=body, headers={"Idempotency-Key": "k" * 128})
    assert started.status_code == 202, started.text
    stopped = api.post(f"/profiles/{PROFILE}/stop", json={"poll": FAST})
    assert stopped.status_code == 202, stopped.text
    # Leave the twin quiet: the stop (which preempts the start) runs to its end.
    deadline = time.monotonic() + 180
    while api.get(f"/executions/{stopped.json()['execution_id']}").json()["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the stop never ended"
        time.sleep(1)
