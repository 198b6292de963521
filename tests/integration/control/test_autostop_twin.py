"""Auto-stop that respects work, on the twin: the real sweep Lambda (invoked as its schedule does,
with its clock moved past the lease), the real flows and the simulator model server of each task.

- Requests running on the model server keep a lease-expired profile up until they finish; a hard
  limit (max runtime) stops it despite them, once its drain is over.
- A benchmark run on a profile that was already READY holds it: its lease does not cut the run.
- The "Profile stopping soon" event reaches an EventBridge rule's target before the stop.

What is checked is what a user would see: the sweep's decisions, the record, the executions, the
streams, the AWS state and the events on the bus. Every test leaves the twin idle (sweep clock
back to the real one, nothing running).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx
import pytest

from servingctl.registry.models import ServingProfile
from servingctl.shared.clock import OffsetClock, SystemClock
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl_twin.twin import Twin, function_name

from .conftest import DELAYS, POLL, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

# One profile on its own pool per test (a start counts stopped tasks of its pool shortly before it).
LEASE, HARD, BENCH, WARN = "a-lease", "a-hard", "a-bench", "a-warn"
# Idle detection: a 5-minute window (the registry's least); QUIET gets no client request, VISITED one every 4 minutes.
QUIET, VISITED = "a-quiet", "a-visited"
IDLE_WINDOW = 5
LEASE_MINUTES = 5
# a-hard: READY for at most 10 minutes, then running requests get 5 more minutes to finish.
MAX_RUNTIME_MINUTES, DRAIN_MINUTES = 10, 5
PAST_LEASE = timedelta(minutes=LEASE_MINUTES + 1)
# Streams long enough to outlast the sweeps made while they run (~11 s for 16000 tokens at speed 10).
LONG_STREAM_TOKENS = 12_000
CUT_STREAM_TOKENS = 16_000
MATRIX = {"input_tokens": [64, 256], "concurrencies": [1, 2], "warmup": 1, "rounds": 2, "max_tokens": 600, "max_workers": 1}


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin with one profile per test on its own pool; a-hard has a 5-minute default lease and a
    10-minute max runtime with a 5-minute drain."""
    path = registry_with(tmp_path_factory.mktemp("registry"), (LEASE, HARD, BENCH, WARN, QUIET, VISITED))
    document = json.loads(path.read_text())
    for name in (QUIET, VISITED):
        document["profiles"][name]["idle"] = {"enabled": True, "window_minutes": IDLE_WINDOW}
    document["profiles"][HARD].update(
        default_lease_minutes=LEASE_MINUTES,
        autostop={"max_runtime_minutes": MAX_RUNTIME_MINUTES, "drain_minutes": DRAIN_MINUTES},
    )
    path.write_text(json.dumps(document))
    with Twin(path, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS) as running:
        yield running


@pytest.fixture
def sweep(twin: Twin) -> Iterator[Callable[[timedelta], dict[str, dict[str, Any]]]]:
    """Invoke the sweep function with its clock `ahead` of the real one: its decisions by profile.
    The sweep's clock is the real one again after the test."""
    assert twin.router is not None
    router = twin.router

    def run(ahead: timedelta) -> dict[str, dict[str, Any]]:
        router.module("sweep").CLOCK = OffsetClock(ahead)
        answer = twin.client("lambda").invoke(FunctionName=function_name("sweep"), Payload=json.dumps({"poll": POLL}).encode())
        body = json.loads(answer["Payload"].read())
        assert "FunctionError" not in answer, body
        assert not [r for r in body["repairs"] if r["stop"]], body["repairs"]  # the record and the cloud agree
        return {d["profile"]: d for d in body["decisions"]}

    yield run
    router.module("sweep").CLOCK = SystemClock()


class Stream:
    """One streaming chat completion against the profile's model server (through its routing
    header, as a client of the internal ALB sends it), read on a thread of its own."""

    def __init__(self, spec: ServingProfile, max_tokens: int) -> None:
        self.spec, self.max_tokens = spec, max_tokens
        self.tokens_seen = threading.Event()
        self.finish_reason: str | None = None
        self.done = False  # the server sent data: [DONE]
        self.error: str | None = None
        self.thread = threading.Thread(target=self._read, name=f"stream-{spec.model}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        body = {
            "model": self.spec.model,
            "messages": [{"role": "user", "content": "Tell me a very long story."}],
            "max_tokens": self.max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
        headers = {self.spec.routing_header.name: self.spec.routing_header.value}
        try:
            with httpx.stream(
                "POST",
                self.spec.endpoint_url.rstrip("/") + "/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=httpx.Timeout(120.0, connect=10.0),
            ) as answer:
                answer.raise_for_status()
                for line in answer.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        self.done = True
                        continue
                    for choice in json.loads(line.removeprefix("data: ")).get("choices", []):
                        if choice.get("delta", {}).get("content"):
                            self.tokens_seen.set()
                        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    @property
    def running(self) -> bool:
        """True while the client is still reading the stream."""
        return self.thread.is_alive()

    @property
    def complete(self) -> bool:
        """The whole answer arrived: max_tokens generated (finish_reason length) and [DONE]."""
        return self.finish_reason == "length" and self.done and self.error is None


def _stop_executions(twin: Twin, profile: str) -> list[str]:
    """Names of the stop_profile executions about the profile."""
    sfn = twin.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(stateMachineArn=twin.state_machines["stop_profile"])
    return [e["name"] for page in pages for e in page["executions"] if e["name"].startswith(f"stop-{profile}-")]


def _stopped_by_the_sweep(twin: Twin, probe: Probe, profile: str, decision: dict[str, Any], reason: str) -> None:
    """The sweep started a stop for reason; that stop succeeds and nothing of the profile runs."""
    assert (decision["stop"], decision["action"], decision["reason"]) == (True, "stop-started", reason), decision
    result = twin.wait_execution(decision["execution_arn"], timeout_s=180)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    assert probe.state(profile).phase == "STOPPED" and not probe.locks(profile)
    # Who did it: the sweep's own role, in the stop's input and on the record.
    requested_by = json.loads(result.describe["input"])["requested_by"]
    assert requested_by and probe.state(profile).stopped_by == requested_by
    probe.assert_nothing_running(profile)


def _ready(probe: Probe, profile: str, **extra: Any) -> None:
    started = probe.start(profile, "autostop", **extra)
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    assert probe.state(profile).phase == "READY"


def test_requests_running_keep_a_lease_expired_profile_up_until_they_finish(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    _ready(probe, LEASE, lease_minutes=LEASE_MINUTES)
    stream = Stream(probe.registry.profiles[LEASE], LONG_STREAM_TOKENS)
    probe.wait_for("the stream's first tokens", lambda: stream.tokens_seen.is_set() or not stream.running, timeout_s=60)
    assert stream.error is None, stream.error

    # The lease has run out, but the model server is streaming: kept, and nothing is stopped.
    kept = sweep(PAST_LEASE)[LEASE]
    assert (kept["stop"], kept["action"], kept["reason"]) == (False, "kept", "requests-running"), json.dumps(kept)
    assert kept["active_requests"] >= 1 and "lease ends at" in kept["detail"], kept
    assert _stop_executions(twin, LEASE) == []
    assert probe.state(LEASE).phase == "READY" and probe.service(LEASE)["runningCount"] == 1

    # The stream ends on its own, whole; the next sweep stops the profile for its lease.
    stream.thread.join(timeout=120)
    assert not stream.running and stream.complete, (stream.finish_reason, stream.done, stream.error)
    _stopped_by_the_sweep(twin, probe, LEASE, sweep(PAST_LEASE)[LEASE], "lease-expired")


def test_a_hard_limit_stops_it_despite_running_requests_after_the_drain(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    _ready(probe, HARD)  # the registry's 5-minute default lease
    spec = probe.registry.profiles[HARD]
    streams = [Stream(spec, CUT_STREAM_TOKENS) for _ in range(3)]
    probe.wait_for(
        "the streams' first tokens", lambda: all(s.tokens_seen.is_set() or not s.running for s in streams), timeout_s=60
    )
    assert [s.error for s in streams] == [None] * 3

    # Past the lease (soft): kept for the running requests.
    soft = sweep(PAST_LEASE)[HARD]
    assert (soft["action"], soft["reason"]) == ("kept", "requests-running"), soft
    # Past the max runtime (hard), within its drain: kept while the requests finish, with a warning.
    draining = sweep(timedelta(minutes=MAX_RUNTIME_MINUTES + 1))[HARD]
    assert (draining["stop"], draining["action"], draining["reason"]) == (False, "kept", "draining"), draining
    assert draining["stopping_soon"] and f"max runtime of {MAX_RUNTIME_MINUTES} minutes" in draining["detail"], draining
    assert _stop_executions(twin, HARD) == []
    # The drain is over: stopped whatever still runs. Fresh streams, so that on a busy machine the
    # two sweeps above have not already outlasted them: these are running when the stop comes.
    late = [Stream(spec, CUT_STREAM_TOKENS) for _ in range(2)]
    probe.wait_for("the late streams' first tokens", lambda: all(s.tokens_seen.is_set() or not s.running for s in late))
    assert [s.error for s in late] == [None] * 2
    hard = sweep(timedelta(minutes=MAX_RUNTIME_MINUTES + DRAIN_MINUTES + 1))[HARD]
    assert hard["active_requests"] >= 1 and "request(s) cut" in hard["detail"], hard
    _stopped_by_the_sweep(twin, probe, HARD, hard, "max-runtime")
    for stream in streams + late:
        stream.thread.join(timeout=60)
    assert not any(s.running for s in streams + late)
    assert not all(s.complete for s in late), "the stop cut no stream: they had all finished"


def test_a_benchmark_on_a_ready_profile_is_not_cut_by_its_lease(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    _ready(probe, BENCH, lease_minutes=LEASE_MINUTES)
    lease_deadline = probe.state(BENCH).lease_deadline
    assert lease_deadline is not None
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-lease-hold"
    run = twin.start_execution(
        "run_benchmark", {"profile": BENCH, "start": False, "stop": False, "run_id": run_id, **MATRIX}, name="bench-lease-hold"
    )
    probe.wait_for("the run holds the profile", lambda: probe.state(BENCH).held_by == run_id, timeout_s=120)
    held = probe.state(BENCH)
    assert held.held_until is not None and held.held_until > lease_deadline + timedelta(minutes=1), held

    # The lease has run out, the run holds the profile: kept.
    kept = sweep(PAST_LEASE)[BENCH]
    assert (kept["stop"], kept["action"], kept["reason"]) == (False, "kept", "held"), kept
    assert f"benchmark {run_id} holds it until" in kept["detail"], kept

    holds = {held.held_until}  # the hold is renewed per scenario while the run goes on
    sfn = twin.client("stepfunctions")
    while sfn.describe_execution(executionArn=run)["status"] == "RUNNING":
        state = probe.state(BENCH)
        assert state.phase == "READY", state
        if state.held_until is not None:
            holds.add(state.held_until)
        time.sleep(0.1)
    result = twin.wait_execution(run, timeout_s=240)
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    planned = [s["name"] for s in result.output["plan"]["scenarios"]]
    resource = boto3.resource(
        "dynamodb",
        endpoint_url=twin.endpoint_url,
        region_name=twin.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    runs = DynamoBenchmarkStore(twin.table_name, resource)
    assert len(planned) == 4 and sorted(s.name for s in runs.list_scenarios(run_id)) == sorted(planned)
    record = runs.get_run(run_id)
    assert record is not None and record.status.value == "SUCCEEDED"
    assert max(holds) > held.held_until, sorted(holds)  # renewed after the first hold
    assert _stop_executions(twin, BENCH) == []

    # The run gave the profile back: the next sweep stops it for its lease.
    after = probe.state(BENCH)
    assert (after.phase, after.held_by, after.held_until) == ("READY", None, None), after
    _stopped_by_the_sweep(twin, probe, BENCH, sweep(PAST_LEASE)[BENCH], "lease-expired")


def test_the_stopping_soon_warning_comes_before_the_stop(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    # What an operator subscribes: every servingctl event on the default bus, in order, to a FIFO queue.
    sqs, bus = twin.client("sqs"), twin.client("events")
    queue = sqs.create_queue(
        QueueName="servingctl-events.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    bus.put_rule(Name="servingctl-events", EventPattern=json.dumps({"source": ["servingctl"]}), State="ENABLED")
    bus.put_targets(
        Rule="servingctl-events", Targets=[{"Id": "queue", "Arn": queue_arn, "SqsParameters": {"MessageGroupId": "all"}}]
    )
    received: list[dict[str, Any]] = []

    def read() -> list[dict[str, Any]]:
        """Every event about WARN received so far, in the order published (with the queue's send time)."""
        while messages := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, AttributeNames=["SentTimestamp"]).get(
            "Messages"
        ):
            for message in messages:
                received.append(json.loads(message["Body"]) | {"sent_ms": int(message["Attributes"]["SentTimestamp"])})
                sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        return [e for e in received if e["detail"].get("profile") == WARN]

    try:
        _ready(probe, WARN, lease_minutes=LEASE_MINUTES)
        lease_deadline = probe.state(WARN).lease_deadline
        assert lease_deadline is not None

        # Within the warning time (15 minutes by default) of the lease's end: kept, with a warning.
        warned = sweep(timedelta(0))[WARN]
        assert (warned["action"], warned["stopping_soon"]) == ("kept", True), warned
        assert warned["next_stop"]["reason"] == "lease-expired"
        # Past the lease: stopped.
        stopping = sweep(PAST_LEASE)[WARN]
        _stopped_by_the_sweep(twin, probe, WARN, stopping, "lease-expired")
        probe.wait_for(
            "the 'Profile stopped' event", lambda: any(e["detail-type"] == "Profile stopped" for e in read()), timeout_s=30
        )

        events = read()
        kinds = [e["detail-type"] for e in events]
        assert kinds.count("Profile stopping soon") == 1, kinds
        assert kinds.index("Profile stopping soon") < kinds.index("Profile auto-stopped") < kinds.index("Profile stopped"), kinds
        warning = events[kinds.index("Profile stopping soon")]["detail"]
        assert (warning["stop_reason"], warning["hard"]) == ("lease-expired", False), warning
        stop_at = datetime.fromisoformat(warning["stop_at"])
        assert abs(stop_at - lease_deadline) < timedelta(milliseconds=1), (stop_at, lease_deadline)
        assert datetime.fromisoformat(warning["at"]) < stop_at and 0 < warning["minutes_left"] <= LEASE_MINUTES, warning
        assert f"servingctl keepalive {WARN}" in warning["answer"], warning
        auto_stopped = events[kinds.index("Profile auto-stopped")]["detail"]
        assert (auto_stopped["reason"], auto_stopped["execution_arn"]) == ("lease-expired", stopping["execution_arn"])
        # Published before the stop execution began.
        began = twin.client("stepfunctions").describe_execution(executionArn=stopping["execution_arn"])["startDate"]
        assert events[kinds.index("Profile stopping soon")]["sent_ms"] < began.timestamp() * 1000
    finally:
        bus.remove_targets(Rule="servingctl-events", Ids=["queue"])
        bus.delete_rule(Name="servingctl-events")
        sqs.delete_queue(QueueUrl=queue)


def test_the_idle_stop_fires_on_client_silence_whatever_the_controller_reads(
    twin: Twin, probe: Probe, sweep: Callable[[timedelta], dict[str, dict[str, Any]]]
) -> None:
    """Time moves a minute per sweep for both the sweep and CloudWatch (the ALB stamps its datapoints
    with the same moved clock), so every read the sweep makes would land in the window it reads next."""
    assert twin.load_balancers is not None
    balancers = twin.load_balancers
    _ready(probe, QUIET, lease_minutes=240)
    _ready(probe, VISITED, lease_minutes=240)
    visited = probe.registry.profiles[VISITED]
    offset = timedelta(0)
    balancers.clock = lambda: OffsetClock(offset).now()
    sent = 0
    stopped_at: int | None = None
    try:
        for minute in range(1, 2 * IDLE_WINDOW + 2):
            offset = timedelta(minutes=minute)
            if minute % (IDLE_WINDOW - 1) == 0:  # one client request every window - 1 minutes
                answer = httpx.get(
                    visited.endpoint_url + "/v1/models", headers={visited.routing_header.name: visited.routing_header.value}
                )
                assert answer.status_code == 200
                sent += 1
            balancers.flush()
            decisions = sweep(offset)
            kept = decisions[VISITED]
            assert (kept["stop"], kept["action"]) == (False, "kept"), (minute, kept)
            if stopped_at is None:
                quiet = decisions[QUIET]
                assert quiet["active_requests"] == 0, quiet  # the sweep read the model server's gauges
                if quiet["stop"]:
                    stopped_at = minute
                    _stopped_by_the_sweep(twin, probe, QUIET, quiet, "idle")
        assert stopped_at is not None and IDLE_WINDOW <= stopped_at <= IDLE_WINDOW + 2, stopped_at
        print(
            f"FIGURE idle stop: {QUIET} (no client request) stopped at the sweep {stopped_at} min after READY, "
            f"idle window {IDLE_WINDOW} min; {VISITED} kept by {sent} client requests, one every {IDLE_WINDOW - 1} min"
        )
        assert sent >= 2
    finally:
        balancers.clock = lambda: datetime.now(UTC)
    stop = probe.stop(VISITED, "visited")
    assert stop.status == "SUCCEEDED", (stop.error, stop.cause)
