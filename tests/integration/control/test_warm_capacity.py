"""Warm capacity and the capacity fallback on the twin: a start takes the warm pool's stopped instance
(no launch, a warm volume on its second use), the stop parks it back in the pool stopped, and a
start without capacity for the pool's instance type moves to its alternates, or fails when none is
left, with nothing running either way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from servingctl_twin.twin import Twin

from .conftest import DELAYS, TIME_SCALE, warm_pool_registry

Probe = Any  # conftest.Probe (conftest modules are not importable under --import-mode=importlib)
WARM = "w-warm"  # on a pool whose warm pool reuses instances on scale-in
FALLBACK = "nemotron-nano"  # pool g7e-1gpu: g7e.2xlarge, then g7e.4xlarge, then g7e.8xlarge


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin of this module's registry."""
    with Twin(
        warm_pool_registry(
            tmp_path_factory.mktemp("registry"),
            WARM,
            "w-pool",
            "servingctl-test-warm",
            {"pool_state": "Stopped", "min_size": 0, "reuse_on_scale_in": True},
            "9",
        ),
        model_server="sim",
        time_scale=TIME_SCALE,
        delays=DELAYS,
    ) as running:
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
    probe.wait_for(
        "a stopped instance in the warm pool", lambda: [i["LifecycleState"] for i in _warm(probe, WARM)] == ["Warmed:Stopped"]
    )
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
    assert (
        state.capacity_note
        == "g7e.2xlarge: insufficient-capacity (InsufficientInstanceCapacity); moved to g7e.4xlarge (option 2 of 3)"
    )
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
    assert "could not launch g7e.8xlarge: insufficient-capacity (InsufficientInstanceCapacity): Could not launch" in result.cause
    assert "alternates tried before: g7e.2xlarge: insufficient-capacity: " in result.cause
    assert "; g7e.4xlarge: insufficient-capacity: " in result.cause
    assert "RollBack" in result.states_entered()
    probe.assert_nothing_running(FALLBACK)
    state = probe.state(FALLBACK)
    assert state.phase == "FAILED" and "CapacityUnavailable" in (state.last_error or "")
    assert probe.locks(FALLBACK) == []
    assert len(_events(twin, "launch-failed", "g7e-1gpu")) >= 3


def _launch_failures(twin: Twin, pool: str) -> list[str]:
    """The world's failed launches of the pool, oldest first: "<class> (<type>)"."""
    return [d.split(": ", 1)[1] for d in _events(twin, "launch-failed", pool)]


def test_each_class_of_failed_launch_moves_on_or_stops_the_ladder_and_every_attempt_keeps_its_class(
    twin: Twin, probe: Probe
) -> None:
    # g7e.2xlarge is not offered in the zone, g7e.4xlarge has no capacity: both move on, the third type runs.
    twin.set_faults("capacity-unavailable=g7e.2xlarge:unsupported", "capacity-unavailable=g7e.4xlarge:insufficient-capacity")
    before = len(_launch_failures(twin, "g7e-1gpu"))
    result = probe.start(FALLBACK, "classes")
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    [instance] = probe.group(FALLBACK)["Instances"]
    assert _ec2_state(twin, instance["InstanceId"]) == ("running", "g7e.8xlarge")
    # Each attempt in RecordReady's answer (the "Profile ready" event's detail) with its class and EC2's code.
    [ready] = [
        json.loads(e["taskSucceededEventDetails"]["output"])["Payload"]
        for e in result.history
        if "capacity_fallbacks" in (e.get("taskSucceededEventDetails") or {}).get("output", "")
    ]
    attempts = [(a["instance_type"], a["class"], a["code"]) for a in ready["capacity_fallbacks"]]
    assert attempts == [
        ("g7e.2xlarge", "unsupported", "Unsupported"),
        ("g7e.4xlarge", "insufficient-capacity", "InsufficientInstanceCapacity"),
    ]
    assert all(a["reason"].endswith("Launching EC2 instance failed.") for a in ready["capacity_fallbacks"])
    state = probe.state(FALLBACK)
    assert (
        state.capacity_note
        == "g7e.4xlarge: insufficient-capacity (InsufficientInstanceCapacity); moved to g7e.8xlarge (option 3 of 3)"
    )
    # The world's launches in order (AWS retries a refused launch until the group is pointed elsewhere).
    assert list(dict.fromkeys(_launch_failures(twin, "g7e-1gpu")[before:])) == [
        "unsupported (g7e.2xlarge)",
        "insufficient-capacity (g7e.4xlarge)",
    ]
    twin.set_faults()
    _stop_and_check(probe, FALLBACK, "classes")


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (
            "vcpu-limit",
            'quota: VcpuLimitExceeded, Service Quotas L-DB2E81BA "Running On-Demand G and VT instances", limit 0 vCPUs',
        ),
        (
            "instance-limit",
            'quota: InstanceLimitExceeded, Service Quotas L-DB2E81BA "Running On-Demand G and VT instances", limit 0 instances',
        ),
        (
            "launch-template",
            (
                "launch-config (InvalidParameterValue): Could not launch On-Demand Instances. "
                "InvalidParameterValue - Value (arn:aws:iam::"
            ),
        ),
        (
            "ami",
            (
                "launch-config (InvalidAMIID.NotFound): Could not launch On-Demand Instances. "
                "InvalidAMIID.NotFound - The image id '[ami-"
            ),
        ),
    ],
)
def test_a_quota_or_launch_template_failure_ends_the_start_at_the_first_type_with_nothing_running(
    twin: Twin, probe: Probe, fault: str, says: str
) -> None:
    twin.set_faults(f"capacity-unavailable=g7e.2xlarge:{fault}")
    before = len(_launch_failures(twin, "g7e-1gpu"))
    result = probe.start(FALLBACK, f"no-ladder-{fault}")
    twin.set_faults()
    assert result.status == "FAILED" and result.error == "CapacityUnavailable", (result.error, result.cause)
    message = json.loads(result.cause or "{}")["errorMessage"]
    assert f"could not launch g7e.2xlarge: {says}" in message
    # The G alternates count against the spent quota (passed over); a broken template is every type's.
    assert message.endswith("; not tried: g7e.4xlarge, g7e.8xlarge (the same quota)") == fault.endswith("-limit")
    assert "alternates tried before" not in message
    assert set(_launch_failures(twin, "g7e-1gpu")[before:]) == {f"{fault} (g7e.2xlarge)"}
    assert "RollBack" in result.states_entered()
    probe.assert_nothing_running(FALLBACK)
    assert probe.state(FALLBACK).phase == "FAILED" and probe.locks(FALLBACK) == []
    assert probe.group(FALLBACK)["LaunchTemplate"]["LaunchTemplateId"] == probe.registry.pools["g7e-1gpu"].launch_template_id


def test_without_reuse_on_scale_in_the_stop_terminates_and_the_pool_refills_with_a_fresh_instance(
    twin: Twin, probe: Probe
) -> None:
    profile = "deepseek-v4-flash"  # the reference's g7e-2gpu: a warm pool with reuse on scale-in off (the default)
    assert probe.registry.pool_of(profile).warm_pool.reuse_on_scale_in is False
    probe.wait_for(
        "a stopped instance in the warm pool", lambda: [i["LifecycleState"] for i in _warm(probe, profile)] == ["Warmed:Stopped"]
    )
    [taken] = [i["InstanceId"] for i in _warm(probe, profile)]
    started = probe.start(profile, "no-reuse")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    assert probe.state(profile).warm_start is True and [i["InstanceId"] for i in probe.group(profile)["Instances"]] == [taken]
    _stop_and_check(probe, profile, "no-reuse")
    probe.wait_for(f"{taken} terminated", lambda: _ec2_state(twin, taken)[0] == "terminated")
    # The group launches a new instance into the pool, which stops after its first boot: its volume is empty.
    probe.wait_for(
        "a fresh stopped instance in the warm pool",
        lambda: [i["LifecycleState"] for i in _warm(probe, profile)] == ["Warmed:Stopped"],
    )
    [fresh] = [i["InstanceId"] for i in _warm(probe, profile)]
    assert fresh != taken and _ec2_state(twin, fresh)[0] == "stopped"
    assert _events(twin, "launch-into-warm-pool", fresh)
