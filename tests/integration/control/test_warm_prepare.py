"""A warm pool prepared before it stops, on the twin: the pool's launch lifecycle hook holds each new
pool instance in Warmed:Pending:Wait while its user data's prepare step runs (pull, weights, compile
run), then it stops with the pool's profile on its volume; a start from it passes the hook again
(Pending:Wait, completed at once), skips the pull, the download and the compile, and is READY
sooner; the stop terminates it (reuse on scale-in stays off, as ECS supports) and the refill runs
the prepare step again on a fresh instance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from servingctl_twin.twin import Twin

from .conftest import DELAYS, TIME_SCALE, warm_pool_registry

Probe = Any  # conftest.Probe
PREPARED = "w-prep"


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin of this module's registry."""
    with Twin(
        warm_pool_registry(
            tmp_path_factory.mktemp("registry"),
            PREPARED,
            "p-pool",
            "servingctl-test-prep",
            {"pool_state": "Stopped", "min_size": 0, "prepare": True, "max_group_prepared_capacity": 1},
            "8",
        ),
        model_server="sim",
        time_scale=TIME_SCALE,
        delays=DELAYS,
    ) as running:
        yield running


def _warm(probe: Probe) -> list[dict[str, Any]]:
    name = probe.registry.pool_of(PREPARED).asg_name
    return probe.asg.describe_warm_pool(AutoScalingGroupName=name)["Instances"]


def _events(twin: Twin, kind: str, text: str) -> list[str]:
    assert twin.world is not None
    return [e.detail for e in twin.world.events_of(kind) if text in e.detail]


def test_a_prepared_warm_instance_skips_pull_download_and_compile_and_the_refill_prepares_again(twin: Twin, probe: Probe) -> None:
    seen: set[str] = set()

    def parked() -> bool:
        states = [i["LifecycleState"] for i in _warm(probe)]
        seen.update(states)
        return states == ["Warmed:Stopped"]

    probe.wait_for("a prepared instance stopped in the warm pool", parked, timeout_s=120)
    assert "Warmed:Pending:Wait" in seen  # the hook held it while the prepare step ran
    [instance] = [i["InstanceId"] for i in _warm(probe)]
    assert _events(twin, "warm-prepared", instance)

    started = probe.start(PREPARED, "prep-1")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    state = probe.state(PREPARED)
    assert state.phase == "READY" and state.warm_start is True
    assert [i["InstanceId"] for i in probe.group(PREPARED)["Instances"]] == [instance]
    assert _events(twin, "pending-wait", instance)  # the hook again on its way into service
    # Its volume holds what the prepare step put there: the prefetch container says so in its log.
    assert _events(twin, "task-running", PREPARED)[-1].endswith("(warm volume: weights and compile cache kept)")
    [record] = [r for r in probe.store.list_starts(PREPARED) if r.execution == started.arn]
    marks = {m.name: m.at for m in record.marks}
    pull = (marks["pull_stopped"] - marks["pull_started"]).total_seconds()
    # The image's layers are on the volume: a manifest check (warm_pull_s), not the pull (pull_s).
    assert pull < (DELAYS.pull_s / TIME_SCALE) / 2, pull

    stopped = probe.stop(PREPARED, "prep-1")
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    probe.assert_nothing_running(PREPARED)
    # Scale-in terminated it; the refill launches a fresh instance and prepares it before it stops.
    probe.wait_for("the refill prepared and stopped", lambda: [i["LifecycleState"] for i in _warm(probe)] == ["Warmed:Stopped"]
                   and _warm(probe)[0]["InstanceId"] != instance, timeout_s=120)  # fmt: skip
    [fresh] = [i["InstanceId"] for i in _warm(probe)]
    assert _events(twin, "warm-prepare", fresh) and _events(twin, "warm-prepared", fresh)
