"""The cost simulator checked against the twin: a short trace replayed live, time-scaled, gives the
starts, stops and GPU seconds that `servingctl costs simulate` computes for its wake policy.

The replay runs on a clock FACTOR times faster than the wall clock (servingctl.shared.clock.ScaledClock),
shared by the sweep (its idle decisions) and the ALB (the minutes its RequestCount is stamped
with): the 5-minute idle window passes in 30 real seconds. The test plays the waker (the wake path
is built elsewhere): a request that finds the profile stopped starts it and is sent once it is
READY. The sweep runs every scaled minute, as the real one would every `--sweep-minutes 1`.

Measured live, in scaled seconds: each start from its execution's start to READY, each stop from the
sweep's decision to the stop flow's end (instance terminated), GPU time from a start's request to
its instance gone. The simulator gets the same trace, the live starts as the profile's start
history (taken in order) and the live stops' mean as the stop time, and must agree on the number
of starts and stops exactly and on GPU seconds within TOLERANCE_S per start and stop: one sweep
period (a scaled minute), for a sweep or a request that ran late on a busy machine (a real second
late is FACTOR scaled seconds).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from servingctl.costs.simulate import Settings, StartModel, simulate
from servingctl.costs.trace import parse_trace
from servingctl.shared.clock import ScaledClock, SystemClock
from servingctl_twin.twin import Twin, function_name

from .conftest import DELAYS, POLL, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

PROFILE = "s-replay"
IDLE_WINDOW = 5  # minutes: the registry's least
FACTOR = 10.0  # scaled seconds per real second: a scaled minute is 6 real seconds
# The trace, in scaled minutes from the replay's start: a wake, two requests inside the window, the
# idle stop; a second wake, one request inside the window, the idle stop. No request falls on the
# minute a stop becomes due (which of a request and a sweep of the same instant comes first is luck).
TRACE_MINUTES = (0.0, 6.0, 10.5, 19.0, 26.5)
TOLERANCE_S = 60.0  # per start and per stop: one sweep period


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin with one profile on its own pool, idle stop after 5 minutes."""
    path = registry_with(tmp_path_factory.mktemp("registry"), (PROFILE,))
    document = json.loads(path.read_text())
    document["profiles"][PROFILE]["idle"] = {"enabled": True, "window_minutes": IDLE_WINDOW}
    path.write_text(json.dumps(document))
    with Twin(path, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS) as running:
        yield running


class Replay:
    """The live replay: what it started, stopped and sent, in scaled time."""

    def __init__(self, twin: Twin, probe: Probe, clock: ScaledClock) -> None:
        self.twin, self.probe, self.clock = twin, probe, clock
        self.spec = probe.registry.profiles[PROFILE]
        self.sfn = twin.client("stepfunctions")
        self.starts: list[tuple[datetime, datetime]] = []  # request -> READY
        self.stops: list[tuple[datetime, datetime]] = []  # the sweep's decision -> instance gone
        self.sent: list[datetime] = []

    def _span(self, arn: str) -> tuple[datetime, datetime]:
        described = self.sfn.describe_execution(executionArn=arn)
        return self.clock.at(described["startDate"]), self.clock.at(described["stopDate"])

    def request(self) -> None:
        """One client request through the ALB, waking the profile first when it is stopped."""
        if self.probe.state(PROFILE).phase == "STOPPED":
            started = self.probe.start(PROFILE, f"wake{len(self.starts)}", lease_minutes=240)
            assert started.status == "SUCCEEDED", (started.error, started.cause)
            self.starts.append(self._span(started.arn))
        answer = httpx.post(
            self.spec.endpoint_url + "/v1/chat/completions",
            json={"model": self.spec.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            headers={self.spec.routing_header.name: self.spec.routing_header.value},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        self.sent.append(self.clock.now())

    def sweep(self) -> None:
        """Invoke the sweep as its schedule does; when it stops the profile, wait for the stop's end."""
        assert self.twin.load_balancers is not None
        self.twin.load_balancers.flush()
        decided = self.clock.now()
        answer = self.twin.client("lambda").invoke(
            FunctionName=function_name("sweep"), Payload=json.dumps({"poll": POLL}).encode()
        )
        body = json.loads(answer["Payload"].read())
        assert "FunctionError" not in answer, body
        decision = next((d for d in body["decisions"] if d["profile"] == PROFILE), None)  # none while STOPPED
        if decision is not None and decision["stop"]:
            assert (decision["action"], decision["reason"]) == ("stop-started", "idle"), decision
            self.probe.wait_for(f"{PROFILE} stopped", lambda: self.probe.state(PROFILE).phase == "STOPPED", timeout_s=120)
            self.probe.wait_for(
                "the stop flow's end",
                lambda: self.sfn.describe_execution(executionArn=decision["execution_arn"])["status"] != "RUNNING",
                timeout_s=60,
            )
            _, gone = self._span(decision["execution_arn"])
            self.stops.append((decided, gone))


def _min(moment: datetime, anchor: datetime) -> float:
    return round((moment - anchor).total_seconds() / 60, 2)


def _next_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def test_a_trace_replayed_live_matches_the_simulator(twin: Twin, probe: Probe) -> None:
    assert twin.router is not None and twin.load_balancers is not None
    anchor = _next_minute(datetime.now(UTC))
    clock = ScaledClock(anchor, FACTOR)
    trace = [anchor + timedelta(minutes=m) for m in TRACE_MINUTES]
    twin.router.module("sweep").CLOCK = clock
    twin.load_balancers.clock = clock.now
    replay = Replay(twin, probe, clock)
    try:
        pending = list(trace)
        next_sweep = anchor + timedelta(minutes=1)
        deadline = time.monotonic() + 600
        while pending or probe.state(PROFILE).phase != "STOPPED":
            assert time.monotonic() < deadline, "the replay did not end"
            now = clock.now()
            while pending and pending[0] <= now:
                pending.pop(0)
                replay.request()
            if clock.now() >= next_sweep:
                replay.sweep()
                next_sweep = _next_minute(clock.now())
            time.sleep(0.02)
    finally:
        twin.router.module("sweep").CLOCK = SystemClock()
        twin.load_balancers.clock = lambda: datetime.now(UTC)

    live_gpu_s = sum((gone - start[0]).total_seconds() for start, (_, gone) in zip(replay.starts, replay.stops, strict=True))
    start_s = tuple((ready - requested).total_seconds() for requested, ready in replay.starts)
    stop_s = statistics.mean((gone - decided).total_seconds() for decided, gone in replay.stops)

    # The trace as a user would give it, through the same reader as `costs simulate --trace`.
    rows = "".join(f"{t.isoformat()},100,4\n" for t in trace)
    requests = parse_trace("timestamp,input_tokens,output_tokens\n" + rows, "csv").requests
    settings = Settings(
        hourly_usd=12.17,
        api_input_usd_per_m=0.22,
        api_output_usd_per_m=0.66,
        idle_minutes=IDLE_WINDOW,
        sweep_s=60.0,
        stop_s=stop_s,
        start=StartModel(history_s=start_s, in_order=True),
        span=(anchor.replace(hour=0, minute=0), anchor.replace(hour=0, minute=0) + timedelta(days=2)),
    )
    wake = simulate(requests, settings).policy("wake")
    simulated_gpu_s = wake.gpu_hours * 3600
    tolerance = TOLERANCE_S * (wake.starts + wake.stops)
    print(
        f"FIGURE live vs simulated (scaled x{FACTOR:g}): starts {len(replay.starts)} vs {wake.starts}, stops "
        f"{len(replay.stops)} vs {wake.stops}, GPU s {live_gpu_s:.0f} vs {simulated_gpu_s:.0f} "
        f"(off by {abs(live_gpu_s - simulated_gpu_s):.0f} s, {abs(live_gpu_s - simulated_gpu_s) / live_gpu_s:.1%}; "
        f"tolerance {tolerance:.0f} s); live starts {[round(s) for s in start_s]} s, stops {stop_s:.0f} s"
    )
    print(
        "live: starts (request, READY) "
        + str([(_min(a, anchor), _min(b, anchor)) for a, b in replay.starts])
        + ", stops (decided, gone) "
        + str([(_min(a, anchor), _min(b, anchor)) for a, b in replay.stops])
        + ", sent "
        + str([_min(t, anchor) for t in replay.sent])
        + "; simulated sessions "
        + str([(_min(a, anchor), _min(b, anchor)) for a, b in wake.sessions])
        + " (scaled minutes from the replay's start)"
    )
    assert (len(replay.starts), len(replay.stops)) == (wake.starts, wake.stops) == (2, 2)
    assert math.isclose(live_gpu_s, simulated_gpu_s, abs_tol=tolerance), (live_gpu_s, simulated_gpu_s, tolerance)
    assert len(replay.sent) == len(trace)
