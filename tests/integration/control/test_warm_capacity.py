"""Warm capacity and the capacity fallback on the twin: a start takes the warm pool's stopped instance
(no launch, a warm volume on its second use), the stop parks it back in the pool stopped, and a
start without capacity for the pool's instance type moves to its alternates, or fails when none is
left, with nothing running either way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servingctl.local.twin import REFERENCE_REGISTRY, Twin

from .conftest import DELAYS, TIME_SCALE

Probe = Any  # conftest.Probe (conftest modules are not importable under --import-mode=importlib)
WARM = "w-warm"  # on a pool whose warm pool reuses instances on scale-in
FALLBACK = "nemotron-nano"  # pool g7e-1gpu: g7e.2xlarge, then g7e.4xlarge, then g7e.8xlarge


def _registry(directory: Path) -> Path:
    """The reference registry plus WARM, a copy of deepseek-v4-flash on a copy of its pool whose
    warm pool returns instances at scale-in."""
    document = json.loads(REFERENCE_REGISTRY.read_text())
    pool = json.loads(json.dumps(document["pools"]["g7e-2gpu"]))
    pool.update(asg_name="servingctl-test-warm", capacity_provider="servingctl-test-warm")
    pool["asg_arn"] = pool["asg_arn"].replace("self-hosted-llm-poc-g7e-2gpu", pool["asg_name"])
    pool["warm_pool"] = {"pool_state": "Stopped", "min_size": 0, "reuse_on_scale_in": True}
    document["pools"]["w-pool"] = pool
    profile = json.loads(json.dumps(document["profiles"]["deepseek-v4-flash"]))
    profile.update(
        service="servingctl-test-warm", pool="w-pool", model=WARM,
        target_group_arn=profile["target_group_arn"].replace("llm-deepseek-v4-flash", f"llm-{WARM}")[:-1] + "9",
        routing_header={"name": "X-LLM-Profile", "value": WARM},
    )
    document["profiles"][WARM] = profile
    path = directory / "registry.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin of this module's registry."""
    with Twin(_registry(tmp_path_factory.mktemp("registry")), model_server="sim", time_scale=TIME_SCALE, delays=DELAYS) as running:
        yield running


def _warm(probe: Probe, profile: str) -> list[dict[str, Any]]:
    """DescribeWarmPool's instances of the profile's pool."""
    name = probe.registry.pool_of(profile).asg_name
    return probe.asg.describe_warm_pool(AutoScalingGroupName=name)["Instances"]


def _ec2_state(twin: Twin, instance_id: str) -> tuple[str, str]:
    """(state, instance type) of an instance as EC2 reports it."""
    [reservation] = twin.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    instance = reservation["Instances"][0]
    return instance["State"]["Name"], instance["InstanceType"]


def _events(twin: Twin, kind: str, text: str) -> list[str]:
    assert twin.world is not None
    return [e.detail for e in twin.world.events_of(kind) if text in e.detail]


def _stop_and_check(probe: Probe, profile: str, name: str) -> None:
    stopped = probe.stop(profile, name)
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    probe.assert_nothing_running(profile)
    assert probe.state(profile).phase == "STOPPED" and probe.locks(profile) == []


def test_a_warm_start_takes_the_stopped_instance_and_the_stop_parks_it_with_its_volume(twin: Twin, probe: Probe) -> None:
    # The pool fills itself: one instance launched into the warm pool and stopped, not in the group.
    probe.wait_for("a stopped instance in the warm pool", lambda: [i["LifecycleState"] for i in _warm(probe, WARM)] == ["Warmed:Stopped"])
    [parked] = [i["InstanceId"] for i in _warm(probe, WARM)]
    assert probe.group(WARM)["Instances"] == [] and _ec2_state(twin, parked)[0] == "stopped"

    first = probe.start(WARM, "warm-1")
    assert first.status == "SUCCEEDED", (first.error, first.cause)
    assert [i["InstanceId"] for i in probe.group(WARM)["Instances"]] == [parked] and _warm(probe, WARM) == []
    assert _ec2_state(twin, parked)[0] == "running"
    state = probe.state(WARM)
    assert state.phase == "READY" and state.warm_start is True and state.instance_type == "g7e.12xlarge"
    assert _events(twin, "launch-warm", parked) and not _events(twin, "launch", "w-pool")
    # A pool instance fresh from its first boot has nothing on its volume yet.
    assert any("cold volume" in d for d in _events(twin, "task-running", WARM))

    _stop_and_check(probe, WARM, "warm-1")
    # Back in the pool, stopped (not terminated): nothing runs, the volume stays.
    assert [(i["InstanceId"], i["LifecycleState"]) for i in _warm(probe, WARM)] == [(parked, "Warmed:Stopped")]
    assert _ec2_state(twin, parked)[0] == "stopped"
    assert not _events(twin, "terminated", parked)

    second = probe.start(WARM, "warm-2")
    assert second.status == "SUCCEEDED", (second.error, second.cause)
    assert probe.state(WARM).warm_start is True
    # The same instance again: its volume kept the image layers, the weights and the compile cache.
    assert [i["InstanceId"] for i in probe.group(WARM)["Instances"]] == [parked]
    assert _events(twin, "task-running", WARM)[-1].endswith("(warm volume: weights and compile cache kept)")
    _stop_and_check(probe, WARM, "warm-2")
    assert [i["LifecycleState"] for i in _warm(probe, WARM)] == ["Warmed:Stopped"]


def test_without_capacity_for_the_instance_type_the_start_moves_to_the_next_alternate(twin: Twin, probe: Probe) -> None:
    twin.set_faults("capacity-unavailable=g7e.2xlarge")
    result = probe.start(FALLBACK, "fallback")
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    [instance] = probe.group(FALLBACK)["Instances"]
    assert _ec2_state(twin, instance["InstanceId"]) == ("running", "g7e.4xlarge")
    state = probe.state(FALLBACK)
    assert state.instance_type == "g7e.4xlarge"
    assert state.capacity_note is not None and state.capacity_note.startswith("g7e.2xlarge: InsufficientInstanceCapacity; moved to g7e.4xlarge")
    [session] = [s for s in probe.sessions(FALLBACK) if s.start_execution == result.arn]
    assert (session.instance_type, session.price_key) == ("g7e.4xlarge", "g7e.4xlarge")
    assert session.capacity_note == state.capacity_note
    twin.set_faults()
    _stop_and_check(probe, FALLBACK, "fallback")


def test_no_capacity_for_any_alternate_fails_with_capacity_unavailable_and_rolls_back(twin: Twin, probe: Probe) -> None:
    twin.set_faults(*(f"capacity-unavailable={t}" for t in ("g7e.2xlarge", "g7e.4xlarge", "g7e.8xlarge")))
    result = probe.start(FALLBACK, "no-capacity")
    assert result.status == "FAILED" and result.error == "CapacityUnavailable", (result.error, result.cause)
    assert "could not launch g7e.8xlarge" in result.cause
    assert "alternates tried before: g7e.2xlarge:" in result.cause and "; g7e.4xlarge:" in result.cause
    assert "RollBack" in result.states_entered()
    probe.assert_nothing_running(FALLBACK)
    state = probe.state(FALLBACK)
    assert state.phase == "FAILED" and "CapacityUnavailable" in (state.last_error or "")
    assert probe.locks(FALLBACK) == []
    assert len(_events(twin, "launch-failed", "g7e-1gpu")) >= 3


def test_without_reuse_on_scale_in_the_stop_terminates_and_the_pool_refills_with_a_fresh_instance(twin: Twin, probe: Probe) -> None:
    profile = "deepseek-v4-flash"  # the reference's g7e-2gpu: a warm pool with reuse on scale-in off (the default)
    assert probe.registry.pool_of(profile).warm_pool.reuse_on_scale_in is False
    probe.wait_for("a stopped instance in the warm pool", lambda: [i["LifecycleState"] for i in _warm(probe, profile)] == ["Warmed:Stopped"])
    [taken] = [i["InstanceId"] for i in _warm(probe, profile)]
    started = probe.start(profile, "no-reuse")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    assert probe.state(profile).warm_start is True and [i["InstanceId"] for i in probe.group(profile)["Instances"]] == [taken]
    _stop_and_check(probe, profile, "no-reuse")
    probe.wait_for(f"{taken} terminated", lambda: _ec2_state(twin, taken)[0] == "terminated")
    # The group launches a new instance into the pool, which stops after its first boot: its volume is empty.
    probe.wait_for("a fresh stopped instance in the warm pool", lambda: [i["LifecycleState"] for i in _warm(probe, profile)] == ["Warmed:Stopped"])
    [fresh] = [i["InstanceId"] for i in _warm(probe, profile)]
    assert fresh != taken and _ec2_state(twin, fresh)[0] == "stopped"
    assert _events(twin, "launch-into-warm-pool", fresh)
