"""ListExecutions and DescribeExecution lagging on the twin (the executions-lag fault: AWS documents
both as eventually consistent): the reconciler stops no live start and keeps no dead lock, and a stop
waiting for a start's lock takes it over only on a closed status of that one execution.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from servingctl_twin.twin import Twin, function_name

from .conftest import DELAYS, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

LIVE, DEAD, TAKEN, SEEN = "l-live", "l-dead", "l-taken", "l-seen"
# Longer than any of these tests waits for what it checks: every public read lags all along.
LAG_S = 60


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin running the deployed control loop (the sweep on its schedule, status-change events)."""
    registry = registry_with(tmp_path_factory.mktemp("registry"), (LIVE, DEAD, TAKEN, SEEN))
    with Twin(registry, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS, sweep=True) as running:
        yield running


def _entered(twin: Twin, arn: str) -> list[str]:
    events = twin.client("stepfunctions", internal=True).get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e]


def _start_until(probe: Probe, profile: str, state: str) -> str:
    arn = probe.twin.start_execution("start_profile", probe.start_input(profile), name=f"start-{profile}-lag")
    probe.wait_for(f"start of {profile} enters {state}", lambda: state in _entered(probe.twin, arn))
    return arn


def _stops_of(twin: Twin, profile: str) -> list[str]:
    listed = twin.client("stepfunctions", internal=True).list_executions(stateMachineArn=twin.state_machines["stop_profile"])
    return [e["executionArn"] for e in listed["executions"] if e["name"].startswith(f"stop-{profile}-")]


def test_the_fault_hides_a_just_started_execution_and_shows_a_just_ended_one_running(twin: Twin, probe: Probe) -> None:
    twin.set_faults("executions-lag=3")
    public = twin.client("stepfunctions")
    machine = twin.state_machines["stop_profile"]
    arn = twin.start_execution("stop_profile", probe.stop_input(SEEN), name=f"stop-{SEEN}-lag")
    seen: list[str] = []  # what public reads said, each change once

    def look() -> bool:
        try:
            status = public.describe_execution(executionArn=arn)["status"]
        except ClientError as exc:
            status = exc.response["Error"]["Code"]
        listed = {e["executionArn"]: e["status"] for e in public.list_executions(stateMachineArn=machine)["executions"]}
        # The list lags like DescribeExecution; read a moment later, it may be one step further on.
        order = ["ExecutionDoesNotExist", "RUNNING", "SUCCEEDED"]
        assert order.index(listed.get(arn, "ExecutionDoesNotExist")) >= order.index(status), (listed.get(arn), status)
        if not seen or seen[-1] != status:
            seen.append(status)
        return status == "SUCCEEDED"

    probe.wait_for("the lag passes", look, timeout_s=20)
    twin.set_faults()
    assert twin.wait_execution(arn).status == "SUCCEEDED"
    # Missing for 3 s after its start, then RUNNING until 3 s after its end, then as it is.
    assert seen == ["ExecutionDoesNotExist", "RUNNING", "SUCCEEDED"], seen


def test_the_reconciler_stops_no_start_it_cannot_see_yet(twin: Twin, probe: Probe) -> None:
    twin.set_faults(f"executions-lag={LAG_S}")
    arn = _start_until(probe, LIVE, "CheckCapacity")
    assert probe.state(LIVE).phase == "STARTING" and probe.locks(LIVE)
    assert twin.router is not None
    answer, error = twin.router(function_name("sweep"), json.dumps({"dry_run": False}).encode())
    assert error is None, answer
    [repair] = [r for r in json.loads(answer)["repairs"] if r["profile"] == LIVE]
    assert (repair["reason"], repair["action"]) == ("execution-running", "none"), repair
    result = twin.wait_execution(arn)
    assert result.status == "SUCCEEDED", result.describe
    assert probe.state(LIVE).phase == "READY"
    assert _stops_of(twin, LIVE) == []  # neither this reconcile nor a scheduled sweep stopped it
    twin.set_faults()
    assert probe.stop(LIVE, "after").status == "SUCCEEDED"
    probe.assert_nothing_running(LIVE)


def test_a_dead_start_s_lock_is_released_on_its_status_change_while_reads_still_say_running(twin: Twin, probe: Probe) -> None:
    # The start is older than the lag (visible), so only its end lags: reads say RUNNING after the abort.
    lag_s = 20
    twin.set_faults("never-healthy", f"executions-lag={lag_s}")
    began = time.monotonic()
    arn = twin.start_execution(
        "start_profile",
        probe.start_input(DEAD, deadlines={"capacity_s": 60, "task_s": 60, "health_s": 300}),
        name=f"start-{DEAD}-lag",
    )
    public = twin.client("stepfunctions")
    probe.wait_for(
        f"start of {DEAD} visible and waiting for health",
        lambda: time.monotonic() - began > lag_s + 1 and "CheckTargets" in _entered(twin, arn),
        timeout_s=120,
    )
    assert public.describe_execution(executionArn=arn)["status"] == "RUNNING"
    public.stop_execution(executionArn=arn, cause="aborted from the console")
    said: list[str] = []

    def released() -> bool:
        if any(lock.owner == arn for lock in probe.locks(DEAD)):
            return False
        said.append(public.describe_execution(executionArn=arn)["status"])
        return True

    probe.wait_for(f"{DEAD}: the dead start's locks released", released)
    # Released on the event's ABORTED while the public reads still lagged behind it (RUNNING).
    assert said == ["RUNNING"], said
    twin.set_faults()
    probe.wait_for(f"{DEAD}: STOPPED with no lock", lambda: probe.state(DEAD).phase == "STOPPED" and not probe.locks(DEAD))
    recorded = probe.state(DEAD).reconcile_reason
    assert recorded is not None and recorded.startswith("lock-owner-ended: "), recorded
    probe.assert_nothing_running(DEAD)


def test_a_stop_does_not_take_over_the_lock_of_a_start_it_cannot_see_yet(twin: Twin, probe: Probe) -> None:
    twin.set_faults(f"executions-lag={LAG_S}")
    start = _start_until(probe, TAKEN, "CheckCapacity")
    stop = twin.run("stop_profile", probe.stop_input(TAKEN), name=f"stop-{TAKEN}-lag")
    started = twin.wait_execution(start)
    twin.set_faults()
    assert stop.status == "SUCCEEDED", stop.describe
    # The start saw the stop's flag and rolled back, giving its locks back; nobody took them from it.
    assert (started.status, started.error) == ("FAILED", "StopRequested"), started.describe
    lock_answers = [
        json.loads(e["stateExitedEventDetails"]["output"])["lock"]
        for e in stop.history
        if e.get("stateExitedEventDetails", {}).get("name") == "AcquireLock"
    ]
    assert lock_answers and all("taken_over_from" not in a["progress"]["marks"] for a in lock_answers), lock_answers
    probe.assert_nothing_running(TAKEN)
