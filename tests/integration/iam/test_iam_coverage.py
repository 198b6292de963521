"""IAM coverage on the twin: every AWS call each handler makes during full runs (start, stop, a
benchmark that starts, splits, merges and stops, the sweep, the API's routes) is allowed by that
function's role as template.yaml deploys it (after the SAM transform), matching the action, the
resource ARN and the conditions; the twin answers AccessDenied to anything else, as AWS would.

The figures (calls recorded, distinct actions, statements never used) are printed by the test:
`pytest -q -s tests/integration/iam -k coverage`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from servingctl.runs.scoped import RunScopes
from servingctl.shared.clock import OffsetClock
from servingctl.shared.environment import BenchWorkerSettings
from servingctl.store import DynamoStore
from servingctl.store.benchmarks import ResultExists, RunStatus
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl.store.dynamodb import profile_key
from servingctl_twin import iam
from servingctl_twin.twin import Twin, function_name
from servingctl_twin.world import Delays

POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
START = {"poll": POLL, "deadlines": {"capacity_s": 60, "task_s": 60, "health_s": 60}}
STOP = {"poll": POLL, "deadlines": {"lock_s": 120, "drain_s": 60, "terminate_s": 60}}
PROFILE, BENCHED = "nemotron-nano", "deepseek-v4-flash"
ECS_BENCHMARK = {
    "profile": BENCHED,
    "start": True,
    "start_options": START,
    "stop_options": STOP,
    "runner": "ecs",
    "input_tokens": [64],
    "concurrencies": [2],
    "warmup": 1,
    "rounds": 2,
    "max_tokens": 16,
}
# The variable the twin sets to the bench worker's run role (the worker's settings read it).
RUN_ROLE = BenchWorkerSettings.model_fields["run_role"].alias or ""
BENCH_TASK = "servingctl-bench"  # the benchmark task definition's family: its calls are recorded under it
# Statements the runs never need, each with the reason it is still granted.
DATASET_RUN = "20261206T000000Z-iam"
NEVER_USED = {
    "sweep/DeadLetterQueuePolicy/0": "Lambda itself sends a failed asynchronous sweep to the queue (SAM's DeadLetterQueue)",
    # AWS checks both when the capacity fallback's UpdateAutoScalingGroup names a launch template (its
    # tag specifications, its instance profile's role); the twin evaluates the RunInstances part only.
    "profile_steps/ProfileStepsFunctionRolePolicy0/TagPoolLaunches": "the launch template's tag specifications, checked by AWS",
    "profile_steps/ProfileStepsFunctionRolePolicy0/PassInstanceRole": "the launch template's instance profile, checked by AWS",
    # Only a run_benchmark execution that dies without recording its end needs it: the full runs end
    # well; tests/integration/runs/test_run_ends.py aborts, times out and fails runs under IAM.
    "sweep/SweepFunctionRolePolicy0/EndDeadBenchmarkRuns": "the sweep's FAILED record of a run whose execution died",
    # The full runs wake no profile and run no profile of several replicas (the reference registry has
    # neither): tests/integration/control/test_wake_twin.py and test_replicas.py run those paths.
    "waker/WakerFunctionRolePolicy0/ReadWakeItems": "the waker: a request to a sleeping profile",
    "waker/WakerFunctionRolePolicy0/ListProfiles": "the waker: a request to a sleeping profile",
    "waker/WakerFunctionRolePolicy0/ReadRegistry": "the waker: a request to a sleeping profile",
    "waker/WakerFunctionRolePolicy0/StartOrJoinStarts": "the waker: a request to a sleeping profile",
    "waker/WakerFunctionRolePolicy0/SeeRunningStops": "the waker: a request to a sleeping profile",
    "profile_steps/ProfileStepsFunctionRolePolicy0/RouteProfileRules": "only a wake-on-request profile's rule is pointed",
    "profile_steps/ProfileStepsFunctionRolePolicy0/BoundServiceScaling": "only a profile of several replicas",
    "sweep/SweepFunctionRolePolicy0/PublishReplicaLoad": "only a profile of several replicas",
    # runs cancel: tests/integration/runs/test_run_ends.py cancels a run under the API's role.
    "api/ApiFunctionRolePolicy0/CancelRuns": "a run cancelled (POST /benchmarks/{run_id}/cancel)",
}


@pytest.fixture(scope="module")
def twin(cfn: dict) -> Iterator[Twin]:
    """A twin whose functions run under their template.yaml roles, with the REST API."""
    with Twin(model_server="sim", time_scale=10.0, delays=Delays().scaled(0.1), api_port=0, iam_template=cfn) as running:
        yield running


def _scopes(twin: Twin) -> RunScopes:
    """The bench worker's BenchRunRole sessions, as deps_from_settings makes them (its calls run as the caller)."""
    return RunScopes(os.environ[RUN_ROLE], twin.table_name, twin.bucket_name)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _wait(api: httpx.Client, execution_id: str) -> dict[str, Any]:
    """GET /executions/{id} until it leaves RUNNING (a liveness bound, not a timing check)."""
    deadline = time.monotonic() + 180
    while True:
        progress = api.get(f"/executions/{execution_id}").json()
        if progress["status"] != "RUNNING":
            return progress
        assert time.monotonic() < deadline, f"{execution_id} still RUNNING"
        time.sleep(0.5)


def _sweep(twin: Twin, event: dict[str, Any], part: str = "decisions") -> list[dict[str, Any]]:
    """Invoke the sweep function as the schedule does; its decisions (or its repairs)."""
    answer = twin.client("lambda").invoke(FunctionName=function_name("sweep"), Payload=json.dumps(event).encode())
    body = json.loads(answer["Payload"].read())
    assert "FunctionError" not in answer, body
    return body[part]


def _phase(api: httpx.Client) -> str:
    """The profile's recorded phase, as GET /profiles/{name} answers it (any other answer fails, shown)."""
    answer = api.get(f"/profiles/{PROFILE}")
    assert answer.status_code == 200, (answer.status_code, answer.text)
    return answer.json()["phase"]


def _abort_a_start(twin: Twin, api: httpx.Client) -> None:
    """Start the profile and abort the execution from the console once it holds its locks."""
    aborted = api.post(f"/profiles/{PROFILE}/start", json=START).json()
    deadline = time.monotonic() + 120
    while _phase(api) != "STARTING":
        assert time.monotonic() < deadline, "the start never reached STARTING"
        time.sleep(0.2)
    twin.client("stepfunctions").stop_execution(executionArn=aborted["execution_arn"], cause="aborted from the console")


def _full_runs(twin: Twin) -> str:
    """What a user does: start, look, extend, stop through the API; benchmark with start and stop;
    let the sweep stop an expired lease and reconcile a start aborted from the console; a start
    taking the locks of an aborted one; a start that fails and rolls back. Returns the key of the missing shard
    the worker looked for."""
    assert twin.api_url is not None
    api = httpx.Client(base_url=twin.api_url, timeout=60, auth=twin.api_auth())
    assert api.get("/profiles").status_code == 200
    # With an Idempotency-Key, as the CLI sends one: Powertools keeps its record in the table.
    started = api.post(
        f"/profiles/{PROFILE}/start", json={"lease_minutes": 30, **START}, headers={"Idempotency-Key": "iam-coverage-1"}
    ).json()
    assert _wait(api, started["execution_id"])["status"] == "SUCCEEDED"
    assert _phase(api) == "READY"
    assert api.post(f"/profiles/{PROFILE}/keepalive", json={"minutes": 60}).status_code == 200
    assert api.get("/ledger", params={"profile": PROFILE}).status_code == 200
    stopped = api.post(f"/profiles/{PROFILE}/stop", json=STOP).json()
    assert _wait(api, stopped["execution_id"])["status"] == "SUCCEEDED"

    # A benchmark that starts the profile, splits a client-bound scenario (shards, then the merge
    # reads their records back from S3) and stops it.
    run = api.post(
        "/benchmarks",
        json={
            "profile": BENCHED,
            "start": True,
            "stop": True,
            "start_options": START,
            "stop_options": STOP,
            "input_tokens": [64],
            "concurrencies": [2],
            "warmup": 1,
            "rounds": 2,
            "max_tokens": 16,
            "client_cpu_limit": 0.0,
            "max_workers": 2,
        },
    ).json()
    result = twin.wait_execution(run["execution_arn"], timeout_s=300)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert "MergeShards" in result.states_entered()
    assert [r["run_id"] for r in api.get("/benchmarks").json()] == [run["run_id"]]
    [link] = api.get(f"/benchmarks/{run['run_id']}").json()["records_urls"].values()
    assert httpx.get(link, timeout=30).status_code == 200
    # A user's prompts: the API presigns their upload (the signer must be allowed the PUT), and a run
    # naming an upload that is not there is refused at once (S3 answers the API's HeadObject 403: it
    # may read runs/* but not list the bucket).
    prompts = b'{"prompt": "hello"}\n'
    upload = api.post(f"/benchmarks/{DATASET_RUN}/dataset", json={"size_bytes": len(prompts), "sha256": "0" * 64})
    assert upload.status_code == 200 and "X-Amz-Signature" in upload.json()["url"], upload.text
    described = {
        "sha256": "0" * 64,
        "prompts": 1,
        "input_bytes": 5,
        "max_input_bytes": 5,
        "output_tokens_bound": 8,
        "max_output_tokens": 8,
        "file": {"source": "p.jsonl", "format": "jsonl", "sha256": "0" * 64, "prompts": 1, "entries": 1},
    }
    refused = api.post("/benchmarks", json={"profile": BENCHED, "run_id": DATASET_RUN, "mode": "sustained", "dataset": described})
    assert refused.status_code == 400 and refused.json()["field"] == "body.dataset", refused.text
    # The same scenario on the ECS runner: the benchmark task's own calls, under its task role.
    on_ecs = api.post("/benchmarks", json={**ECS_BENCHMARK, "stop": True}).json()
    result = twin.wait_execution(on_ecs["execution_arn"], timeout_s=300)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert "RunScenarioOnEcs" in result.states_entered()

    # The sweep keeps a profile within its lease and stops it once the lease has run out.
    started = api.post(f"/profiles/{PROFILE}/start", json={"lease_minutes": 5, **START}).json()
    assert _wait(api, started["execution_id"])["status"] == "SUCCEEDED"
    assert [d["action"] for d in _sweep(twin, {"poll": POLL})] == ["kept"]
    assert twin.router is not None
    twin.router.module("sweep").CLOCK = OffsetClock(timedelta(minutes=6))
    [decision] = _sweep(twin, {"poll": POLL})
    assert decision["action"] == "stop-started", decision
    assert twin.wait_execution(decision["execution_arn"], timeout_s=180).status == "SUCCEEDED"

    # A start aborted from the console while it holds its locks: the next sweep finds the dead
    # owner, releases its locks and stops the profile.
    _abort_a_start(twin, api)
    [repair] = [r for r in _sweep(twin, {"poll": POLL}, "repairs") if r["stop"]]
    assert (repair["reason"], repair["action"]) == ("lock-owner-ended", "stop-started"), repair
    assert twin.wait_execution(repair["execution_arn"], timeout_s=180).status == "SUCCEEDED"
    # Aborted again, and started again at once: the new start finds the dead owner and takes its locks.
    _abort_a_start(twin, api)
    again = api.post(f"/profiles/{PROFILE}/start", json=START).json()
    assert _wait(api, again["execution_id"])["status"] == "SUCCEEDED"
    stopped = api.post(f"/profiles/{PROFILE}/stop", json=STOP).json()
    assert _wait(api, stopped["execution_id"])["status"] == "SUCCEEDED"

    # The merge's read of a shard whose records are missing (its worker died before writing them):
    # "no records", not a permission error.
    with iam.calling("bench_worker"), pytest.raises(KeyError, match="no records at s3://"):
        _, records, _ = _scopes(twin)(run["run_id"], None)
        records.get_records(missing := f"runs/{run['run_id']}/shards/in64-c2/9.jsonl.gz")

    # A start without capacity rolls back.
    twin.set_faults("capacity-unavailable")
    failed = api.post(f"/profiles/{PROFILE}/start", json=START).json()
    assert _wait(api, failed["execution_id"])["status"] == "FAILED"
    twin.set_faults()
    return missing


def test_every_call_of_the_full_runs_is_allowed_by_its_functions_role(twin: Twin) -> None:
    missing = _full_runs(twin)
    assert twin.iam is not None
    calls = twin.iam.calls
    # The two refusals: S3's answers to the API's look for a dataset never uploaded and to the worker's
    # read of the missing shard (which it then lists).
    assert [f"{c}: {c.denied}" for c in calls if c.denied] == [
        f"api: s3.HeadObject s3:GetObject on arn:aws:s3:::{twin.bucket_name}/runs/{DATASET_RUN}/dataset.jsonl: Access Denied",
        f"bench_worker: s3.GetObject s3:GetObject on arn:aws:s3:::{twin.bucket_name}/{missing}: Access Denied",
    ]
    # smoke_test calls no AWS API
    assert {c.function for c in calls} == {"api", "profile_steps", "sweep", "bench_worker", BENCH_TASK}

    # A call signed with an assumed role's session (BenchRunRole) is allowed by that role's statements.
    used = {f"{c.role or c.function}/{name}" for c in calls for names in c.allowed_by for name in names}
    statements = {f"{function}/{name}" for function, policy in twin.iam.policies.items() for name, _ in policy.statements}
    never_used = sorted(statements - used)
    actions = Counter(r.action for c in calls for r in c.requests)
    print(
        f"\nIAM coverage: {len(calls)} calls recorded, {len(actions)} distinct actions, "
        f"{len(statements) - len(never_used)} of {len(statements)} statements used"
    )
    for function in sorted({c.function for c in calls}):
        mine = [r for c in calls if c.function == function for r in c.requests]
        called = {r.action for r in mine}
        granted = {a for _, st in twin.iam.policies[function].statements for a in _as_list(st.get("Action", []))}
        partitions = sorted({re.sub(r"#.+", "#*", k) for r in mine for k in r.context.get("dynamodb:LeadingKeys", ())})
        print(
            f"  {function}: {len(mine)} requests, {len(called)} actions, DynamoDB partitions {partitions}; "
            f"granted, never called: {sorted(granted - called)}"
        )
    print(f"  statements never used: {never_used}")
    assert set(never_used) == set(NEVER_USED), "a grant no run uses: drop it, or say in NEVER_USED why it stays"


def test_a_call_the_role_does_not_allow_is_refused_like_aws(twin: Twin) -> None:
    assert twin.registry is not None
    spec = twin.registry.profiles[PROFILE]
    with iam.calling("sweep"), pytest.raises(ClientError) as refused:
        boto3.client("ecs").update_service(cluster=spec.cluster, service=spec.service, desiredCount=1)
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "is not authorized to perform: ecs:UpdateService on resource: arn:aws:ecs:" in str(refused.value)
    assert twin.iam is not None and str(twin.iam.calls[-1]).startswith("sweep: ecs.UpdateService")


def test_a_missing_record_is_denied_to_a_role_that_may_not_list_the_bucket(twin: Twin) -> None:
    # The API may read records (its presigned links) but not list the bucket: S3 answers 403, not 404.
    with iam.calling("api"), pytest.raises(ClientError) as denied:
        boto3.client("s3").get_object(Bucket=twin.bucket_name, Key="runs/no-such-run/in64-c1.jsonl.gz")
    assert denied.value.response["Error"]["Code"] == "AccessDenied"


def test_a_bench_task_whose_role_lacks_a_grant_fails_the_run_as_on_aws(twin: Twin) -> None:
    # BenchRunRole, as the task assumes it, without dynamodb:UpdateItem (as BenchTaskRole was before
    # this test found the gap): the task's hold on the profile is refused; on AWS the container exits 1
    # and runTask.sync fails the run.
    assert twin.tasks is not None and twin.iam is not None and twin.api_url is not None
    role, run_role = twin.tasks.roles[BENCH_TASK], os.environ[RUN_ROLE]
    without = tuple(
        (name, {**st, "Action": [a for a in _as_list(st["Action"]) if a != "dynamodb:UpdateItem"]})
        for name, st in role.assumable[run_role]
    )
    assert without != role.assumable[run_role]
    twin.tasks.roles[BENCH_TASK] = replace(role, assumable={run_role: without})
    before = len(twin.iam.calls)
    try:
        api = httpx.Client(base_url=twin.api_url, timeout=60, auth=twin.api_auth())
        run = api.post("/benchmarks", json={**ECS_BENCHMARK, "stop": True}).json()
        result = twin.wait_execution(run["execution_arn"], timeout_s=300)
    finally:
        twin.tasks.roles[BENCH_TASK] = role
    assert result.status == "FAILED"
    assert '"ExitCode": 1' in (result.cause or "") and "Essential container in task exited" in (result.cause or "")
    [refused] = [c for c in twin.iam.calls[before:] if c.function == BENCH_TASK and c.denied]  # decided once
    assert str(refused).startswith(f"{BENCH_TASK}: dynamodb.UpdateItem dynamodb:UpdateItem on arn:aws:dynamodb:")
    assert "is not authorized to perform: dynamodb:UpdateItem" in (refused.denied or "")
    assert api.get(f"/profiles/{BENCHED}").json()["phase"] == "STOPPED"  # the failed run still stopped it


# ---- item-level scope: a run's session touches only its run; profile steps delete only locks ----
def _two_runs(twin: Twin) -> tuple[Any, Any]:
    """The full runs' two benchmark runs (newest first; the failed run of another test left out),
    read by the test itself (no role)."""
    runs = [r for r in DynamoBenchmarkStore(twin.table_name).list_runs() if r.status == RunStatus.SUCCEEDED]
    assert len(runs) == 2, [r.run_id for r in runs]
    return runs[0], runs[1]


def _denied(exc: pytest.ExceptionInfo[ClientError], action: str) -> None:
    assert exc.value.response["Error"]["Code"] in ("AccessDeniedException", "AccessDenied")
    assert "assumed-role/servingctl-BenchRunRole/bench-" in str(exc.value) and f"perform: {action}" in str(exc.value)


def test_a_bench_worker_session_is_denied_another_runs_item_and_object(twin: Twin) -> None:
    mine, other = _two_runs(twin)
    table = boto3.resource("dynamodb").Table(twin.table_name)
    before = table.get_item(Key={"pk": f"run#{other.run_id}", "sk": "run"})["Item"]
    objects = twin.client("s3").list_objects_v2(Bucket=twin.bucket_name, Prefix=f"runs/{other.run_id}/")["Contents"]
    with iam.calling("bench_worker"):
        runs, _records, profiles = _scopes(twin)(mine.run_id, mine.profile)
        assert runs.get_run(mine.run_id) == mine  # its own run: allowed
        session = _scopes(twin).session(mine.run_id, mine.profile)
        with pytest.raises(ClientError) as put:
            runs.update_run(other.run_id, other.updated_at, label="overwritten")
        _denied(put, "dynamodb:GetItem")
        with pytest.raises(ClientError) as item:  # a blind write, no read first
            session.client("dynamodb").put_item(
                TableName=twin.table_name, Item={"pk": {"S": f"run#{other.run_id}"}, "sk": {"S": "run"}}
            )
        _denied(item, "dynamodb:PutItem")
        with pytest.raises(ClientError) as obj:
            session.client("s3").put_object(Bucket=twin.bucket_name, Key=objects[0]["Key"], Body=b"overwritten")
        _denied(obj, "s3:PutObject")
        with pytest.raises(ClientError) as hold:  # another profile's record, beyond its own profile's hold
            profiles.update_profile_if(
                other.profile if other.profile != mine.profile else PROFILE, other.updated_at, {}, held_by=mine.run_id
            )
        _denied(hold, "dynamodb:GetItem")
    assert table.get_item(Key={"pk": f"run#{other.run_id}", "sk": "run"})["Item"] == before
    after = twin.client("s3").list_objects_v2(Bucket=twin.bucket_name, Prefix=f"runs/{other.run_id}/")["Contents"]
    assert [(o["Key"], o["ETag"]) for o in after] == [(o["Key"], o["ETag"]) for o in objects]


def test_the_benchmark_tasks_own_role_cannot_touch_the_table(twin: Twin) -> None:
    # Without assuming BenchRunRole the task's role (and the worker's) reaches no item at all.
    mine, _ = _two_runs(twin)
    for caller in (BENCH_TASK, "bench_worker"):
        with iam.calling(caller), pytest.raises(ClientError) as refused:
            DynamoBenchmarkStore(twin.table_name).get_run(mine.run_id)
        assert refused.value.response["Error"]["Code"] == "AccessDeniedException"


def test_profile_steps_are_denied_deleting_a_profile_record(twin: Twin) -> None:
    table = boto3.resource("dynamodb").Table(twin.table_name)
    before = table.get_item(Key=profile_key(BENCHED))["Item"]
    with iam.calling("profile_steps"), pytest.raises(ClientError) as refused:
        table.delete_item(Key=profile_key(BENCHED))
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "perform: dynamodb:DeleteItem" in str(refused.value)
    assert table.get_item(Key=profile_key(BENCHED))["Item"] == before
    assert DynamoStore(twin.table_name).get_profile(BENCHED).phase == before["phase"]


def test_a_second_workers_duplicate_scenario_write_is_refused_and_the_first_stays(twin: Twin) -> None:
    from datetime import UTC, datetime

    mine, _ = _two_runs(twin)
    unscoped = DynamoBenchmarkStore(twin.table_name)
    [first, *_] = unscoped.list_scenarios(mine.run_id)
    unscoped.update_run(mine.run_id, datetime.now(UTC), status=RunStatus.RUNNING)  # still measuring
    try:
        with iam.calling("bench_worker"):
            runs, _, _ = _scopes(twin)(mine.run_id, mine.profile)
            second = first.model_copy(
                update={"records_key": f"runs/{mine.run_id}/{first.name}.t9-r0.jsonl.gz", "written_at": datetime.now(UTC)}
            )
            with pytest.raises(ResultExists, match=f"scenario {first.name} is already written"):
                runs.put_scenario(second)  # allowed by IAM, refused by the write's condition
    finally:
        unscoped.update_run(mine.run_id, datetime.now(UTC), status=mine.status)
    assert unscoped.get_scenario(mine.run_id, first.name) == first
