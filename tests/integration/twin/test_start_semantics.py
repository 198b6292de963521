"""What ECS and the start flow do together on the twin: a task whose target never turns healthy is
replaced once the service's health check grace period is over (as ECS does) and the start counts the
replacements against its task failure limit; a smoke test that fails once is retried to READY."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from servingctl.store import DynamoStore
from servingctl.store.models import Phase
from servingctl_twin.ecs.scheduler import ELB_UNHEALTHY_REASON
from servingctl_twin.twin import REFERENCE_REGISTRY, Twin
from servingctl_twin.world import Delays

POLL = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
# As in the reference (load 540 s, grace 1800 s) the model loads well inside the grace period, and the
# grace period outlasts the 10 failed checks (30 s here) that make a target unhealthy: ECS leaves a
# sick task alone until it is over.
DELAYS = Delays(load_s=200.0, health_grace_s=400.0).scaled(0.1)
SICK, SMOKE = "deepseek-v4-flash", "nemotron-nano"
MAX_TASK_FAILURES = 2


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    document = json.loads(REFERENCE_REGISTRY.read_text())
    document["profiles"][SICK]["start"] = {"max_task_failures": MAX_TASK_FAILURES}
    path: Path = tmp_path_factory.mktemp("registry") / "registry.json"
    path.write_text(json.dumps(document))
    with Twin(path, time_scale=10.0, delays=DELAYS) as running:
        yield running


def _start(twin: Twin, profile: str, name: str, health_s: int = 60) -> object:
    body = {"profile": profile, "poll": POLL, "deadlines": {"capacity_s": 60, "task_s": 60, "health_s": health_s}}
    return twin.run("start_profile", body, name=name, timeout_s=240)


def _stop(twin: Twin, profile: str, name: str) -> None:
    body = {"profile": profile, "poll": POLL, "deadlines": {"lock_s": 120, "drain_s": 60, "terminate_s": 60}}
    result = twin.run("stop_profile", body, name=name, timeout_s=240)
    assert result.status == "SUCCEEDED", (result.error, result.cause)


def test_unhealthy_tasks_are_replaced_after_the_grace_period_and_count_as_task_failures(twin: Twin) -> None:
    ecs = twin.client("ecs")
    spec = twin.registry.profiles[SICK]
    twin.set_faults("never-healthy")
    try:
        result = _start(twin, SICK, "start-sick", health_s=200)
    finally:
        twin.set_faults()
    # Not the health deadline: the replacements reached the limit first, with ECS's reason.
    assert result.status == "FAILED" and result.error == "TaskFailed", (result.error, result.cause)
    reason = ELB_UNHEALTHY_REASON.format(target_group=spec.target_group_arn)
    assert f"limit {MAX_TASK_FAILURES}" in result.cause and reason in result.cause
    arns = ecs.list_tasks(cluster=spec.cluster, serviceName=spec.service, desiredStatus="STOPPED")["taskArns"]
    replaced = [t for t in ecs.describe_tasks(cluster=spec.cluster, tasks=arns)["tasks"] if t["stoppedReason"] == reason]
    assert len(replaced) >= MAX_TASK_FAILURES and {t["stopCode"] for t in replaced} == {"ServiceSchedulerInitiated"}
    # Each replaced task ran at least the grace period (simulated seconds on the world's clock; the
    # events are stamped when logged, a world step after the decision, hence the one-second slack).
    events = [e for e in twin.world.events if e.detail.startswith(f"{SICK}:")]
    started = {e.detail.split()[1]: e.sim_s for e in events if e.kind == "task-running"}
    for event in (e for e in events if e.kind == "task-unhealthy"):
        assert event.sim_s - started[event.detail.split()[1]] >= DELAYS.health_grace_s - 1.0
    assert "RollBack" in result.states_entered()


def test_a_smoke_test_that_fails_once_is_retried_and_the_start_ends_ready(twin: Twin) -> None:
    twin.set_faults("smoke-fails-once")
    try:
        result = _start(twin, SMOKE, "start-smoke")
    finally:
        twin.set_faults()
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    failed = [e["taskFailedEventDetails"] for e in result.history if e["type"] == "TaskFailed"]
    assert [f["error"] for f in failed] == ["SmokeTestFailed"] and "503" in failed[0]["cause"]
    assert result.states_entered().count("RunSmokeTest") == 1 and result.output["smoke"]["ok"] is True
    resource = boto3.resource(
        "dynamodb",
        endpoint_url=twin.endpoint_url,
        region_name=twin.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    assert DynamoStore(twin.table_name, resource=resource).get_profile(SMOKE).phase == Phase.READY
    _stop(twin, SMOKE, "stop-smoke")
