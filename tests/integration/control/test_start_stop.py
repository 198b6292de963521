"""start_profile and stop_profile on the twin: the real ASL files and handlers against emulated AWS."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from servingctl_twin.twin import ExecutionResult, Twin

SHARED = "qwen3-coder"  # shares deepseek-v4-flash's pool in the test registry (conftest)
Probe = Any  # conftest.Probe (conftest modules are not importable under --import-mode=importlib)


def _assert_ready(probe: Probe, profile: str, result: ExecutionResult) -> None:
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    service = probe.service(profile)
    assert (service["desiredCount"], service["runningCount"]) == (1, 1)
    group = probe.group(profile)
    assert group["DesiredCapacity"] == 1
    assert [i["LifecycleState"] for i in group["Instances"]] == ["InService"]
    assert probe.targets(profile) == ["healthy"]
    state = probe.state(profile)
    assert state.phase == "READY" and state.execution == result.arn
    assert set(state.phase_seconds) >= {"capacity", "task", "health", "total"}
    assert state.lease_deadline is not None
    assert probe.locks(profile) == []
    # The endpoint the registry names (the ALB) really serves the profile's model, under its routing header.
    spec = probe.registry.profiles[profile]
    models = httpx.get(
        f"{spec.endpoint_url}/v1/models", headers={spec.routing_header.name: spec.routing_header.value}, timeout=10
    ).json()
    assert [m["id"] for m in models["data"]] == [probe.registry.profiles[profile].model]


def _assert_stopped(probe: Probe, profile: str, result: ExecutionResult) -> None:
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    probe.assert_nothing_running(profile)
    state = probe.state(profile)
    assert state.phase == "STOPPED" and state.session_id is None
    assert probe.locks(profile) == []
    assert probe.targets(profile) == []


def test_start_then_stop_runs_the_model_and_releases_everything(twin: Twin, probe: Probe) -> None:
    started = probe.start("nemotron-nano", "a")
    _assert_ready(probe, "nemotron-nano", started)
    entered = started.states_entered()
    assert entered[:6] == ["PrepareStart", "AcquireLock", "CheckCurrent", "BranchOnCurrent", "GuardPool", "ScaleOut"]
    assert entered[-3:] == ["RunSmokeTest", "RecordReady", "ReleaseLock"]

    stopped = probe.stop("nemotron-nano", "a")
    _assert_stopped(probe, "nemotron-nano", stopped)
    [session] = [s for s in probe.sessions("nemotron-nano") if s.start_execution == started.arn]
    assert session.stop_execution == stopped.arn and session.close_reason == "stopped"
    assert session.instance_type == "g7e.2xlarge" and session.uptime_s and session.uptime_s > 0
    assert probe.stopped_tasks("nemotron-nano")[-1]["stoppedReason"].startswith("Scaling activity initiated by")


def test_start_when_ready_answers_at_once_and_stop_when_stopped_too(twin: Twin, probe: Probe) -> None:
    first = probe.start("nemotron-nano", "b1")
    _assert_ready(probe, "nemotron-nano", first)
    launches = len(twin.world.events_of("launch"))

    again = probe.start("nemotron-nano", "b2")
    assert again.status == "SUCCEEDED"
    assert "ScaleOut" not in again.states_entered()
    assert again.output["current"]["ready"] is True
    assert len(twin.world.events_of("launch")) == launches  # nothing new was launched
    assert probe.state("nemotron-nano").execution == first.arn  # READY still belongs to the first start
    assert probe.locks("nemotron-nano") == []

    _assert_stopped(probe, "nemotron-nano", probe.stop("nemotron-nano", "b1"))
    idle = probe.stop("nemotron-nano", "b2")
    assert idle.status == "SUCCEEDED"
    assert "ScaleInService" not in idle.states_entered()
    _assert_stopped(probe, "nemotron-nano", idle)


def test_two_concurrent_starts_one_does_the_work(twin: Twin, probe: Probe) -> None:
    sfn = twin.client("stepfunctions")
    machine = twin.state_machines["start_profile"]
    body = probe.start_input("nemotron-nano")

    # The same name and input joins the running execution (the API's idempotent start).
    first = sfn.start_execution(stateMachineArn=machine, name="start-nemotron-nano-c", input=json.dumps(body))
    joined = sfn.start_execution(stateMachineArn=machine, name="start-nemotron-nano-c", input=json.dumps(body))
    assert joined["executionArn"] == first["executionArn"]
    # Another name while the first holds the lock is refused cleanly: LockHeld, nothing undone.
    probe.wait_for("the first start holds the lock", lambda: bool(probe.locks("nemotron-nano")))
    other = twin.run("start_profile", body, name="start-nemotron-nano-c2")
    assert other.status == "FAILED" and other.error == "LockHeld"
    assert first["executionArn"].rsplit(":", 1)[-1] in other.cause

    done = twin.wait_execution(first["executionArn"])
    _assert_ready(probe, "nemotron-nano", done)
    assert len([e for e in twin.world.events_of("launch") if "g7e-1gpu" in e.detail]) >= 1
    assert len(probe.group("nemotron-nano")["Instances"]) == 1
    _assert_stopped(probe, "nemotron-nano", probe.stop("nemotron-nano", "c"))


def test_stop_during_a_start_rolls_the_start_back_and_stops(twin: Twin, probe: Probe) -> None:
    start_arn = twin.start_execution("start_profile", probe.start_input("nemotron-nano"), name="start-nemotron-nano-d")
    probe.wait_for("an instance launching", lambda: bool(probe.group("nemotron-nano")["Instances"]))
    stopped = probe.stop("nemotron-nano", "d")
    start = twin.wait_execution(start_arn)
    assert start.status == "FAILED" and start.error == "StopRequested", (start.error, start.cause)
    assert "RollBack" in start.states_entered()
    _assert_stopped(probe, "nemotron-nano", stopped)


def test_two_profiles_on_one_pool_share_the_instance_and_stopping_one_keeps_it(twin: Twin, probe: Probe) -> None:
    first = probe.start("deepseek-v4-flash", "e")
    _assert_ready(probe, "deepseek-v4-flash", first)
    instance = probe.group(SHARED)["Instances"][0]["InstanceId"]

    refused = probe.start(SHARED, "e1")
    assert refused.status == "FAILED" and refused.error == "PoolBusy"
    assert "deepseek-v4-flash" in refused.cause
    assert probe.service(SHARED)["desiredCount"] == 0
    assert probe.state("deepseek-v4-flash").phase == "READY"  # the refusal touched nothing of the holder

    shared = probe.start(SHARED, "e2", allow_shared_pool=True)
    _assert_ready(probe, SHARED, shared)
    assert [i["InstanceId"] for i in probe.group(SHARED)["Instances"]] == [instance]

    kept = probe.stop(SHARED, "e2")
    assert kept.status == "SUCCEEDED"
    assert (probe.service(SHARED)["desiredCount"], probe.service(SHARED)["runningCount"]) == (0, 0)
    assert probe.state(SHARED).phase == "STOPPED"
    group = probe.group("deepseek-v4-flash")
    assert group["DesiredCapacity"] == 1 and [i["InstanceId"] for i in group["Instances"]] == [instance]
    assert probe.state("deepseek-v4-flash").phase == "READY" and probe.targets("deepseek-v4-flash") == ["healthy"]

    _assert_stopped(probe, "deepseek-v4-flash", probe.stop("deepseek-v4-flash", "e"))
    probe.assert_nothing_running(SHARED)


def test_starts_of_two_pools_run_in_parallel(twin: Twin, probe: Probe) -> None:
    results: dict[str, ExecutionResult] = {}

    def run(profile: str) -> None:
        results[profile] = probe.start(profile, "f")

    threads = [threading.Thread(target=run, args=(p,)) for p in ("nemotron-nano", "deepseek-v4-flash")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for profile, result in results.items():
        _assert_ready(probe, profile, result)
    for profile in results:
        _assert_stopped(probe, profile, probe.stop(profile, "f"))
