"""Replicas on the twin: a profile of min 1 / max 3 replicas under a stepped load.

The real flows, the real sweep Lambda (which reads each model server's /metrics at its target and
publishes servingctl/RequestsPerReplica), the twin's Application Auto Scaling playing the target
tracking policy Terraform's module makes (a full batch, max_num_seqs = 2, per replica), the capacity
provider adding an instance per replica, one simulator model server per task behind the twin's ALB.

What a user would check: the start waits for min_replicas healthy; a rising load adds replicas
(tasks, instances, healthy targets) and the ALB spreads requests over them; a falling load takes
them back to the minimum with every stream finished whole; stop leaves 0 tasks and 0 instances.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from servingctl.costs import load_catalog, stored_session_cost
from servingctl_twin.twin import Twin, function_name
from servingctl_twin.world import Delays

from .conftest import POLL, TIME_SCALE, Probe
from .conftest import test_registry as registry_with

PROFILE = "r-scale"
MAX_REPLICAS = 3
BATCH = 2  # serving.max_num_seqs: the policy's target of running + waiting requests per replica
# The test delays, with target tracking's one-minute alarm period at 2 real seconds (its cooldowns
# scale with it): scale-out after 3 periods over the target (6 s), scale-in after 15 under 90 % of it.
DELAYS = Delays(alarm_period_s=200.0).scaled(0.1)
# Tokens of one streamed answer (about 2 s each on the simulator at the twin's speed).
STREAM_TOKENS = 2000
# A session budget the test stays well under (g7e.2xlarge at 3.36 USD/h: about 0.4 USD spent here).
BUDGET_USD = 2.0


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    """A twin with PROFILE at min 1 / max 3 replicas on a pool of its own."""
    path = registry_with(tmp_path_factory.mktemp("registry"), (PROFILE,))
    document = json.loads(path.read_text())
    document["profiles"][PROFILE].update(min_replicas=1, max_replicas=MAX_REPLICAS)
    document["profiles"][PROFILE]["autostop"] = document["profiles"][PROFILE].get("autostop", {}) | {
        "max_session_usd": BUDGET_USD
    }
    document["profiles"][PROFILE]["serving"]["max_num_seqs"] = BATCH
    path.write_text(json.dumps(document))
    with Twin(path, model_server="sim", time_scale=TIME_SCALE, delays=DELAYS) as running:
        yield running


@pytest.fixture
def probe(twin: Twin) -> Iterator[Probe]:
    """A Probe; everything down after a failed test."""
    checker = Probe(twin)
    yield checker
    assert twin.world is not None and twin.world.error is None, twin.world.error
    if checker.running_tasks(PROFILE) or checker.group(PROFILE)["Instances"]:
        checker.bring_down()


class Load:
    """N client threads each streaming one answer after another through the ALB; every answer's
    outcome is kept (a cut stream is one that ended without its finish reason or all its tokens)."""

    def __init__(self, url: str, header: dict[str, str]) -> None:
        self.url, self.header = url, header
        self.streams: list[threading.Thread] = []
        self.wanted = 0
        self.outcomes: list[str] = []
        self.lock = threading.Lock()

    def set(self, streams: int) -> None:
        """Keep this many streams going (threads past it end after their current answer)."""
        self.wanted = streams
        while len([t for t in self.streams if t.is_alive()]) < streams:
            thread = threading.Thread(target=self._run, args=(len(self.streams),), daemon=True)
            self.streams.append(thread)
            thread.start()

    def _run(self, number: int) -> None:
        with httpx.Client(timeout=120) as client:
            while number < self.wanted:
                self.outcomes_add(self._one(client))

    def outcomes_add(self, outcome: str) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def _one(self, client: httpx.Client) -> str:
        body = {
            "model": PROFILE,
            "messages": [{"role": "user", "content": "count"}],
            "max_tokens": STREAM_TOKENS,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        finish, tokens = None, 0
        try:
            with client.stream("POST", self.url + "/v1/chat/completions", json=body, headers=self.header) as answer:
                if answer.status_code != 200:
                    return f"HTTP {answer.status_code}"
                for line in answer.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    for choice in chunk.get("choices") or []:
                        finish = choice.get("finish_reason") or finish
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        except httpx.HTTPError as exc:
            return f"cut: {type(exc).__name__}"
        return "whole" if finish == "length" and tokens == STREAM_TOKENS else f"cut: finish {finish}, {tokens} tokens"

    def stop(self) -> None:
        """End every stream after its current answer and wait for them."""
        self.wanted = 0
        for thread in self.streams:
            thread.join(timeout=120)


def _sweep(twin: Twin) -> list[dict[str, Any]]:
    """The sweep Lambda's decisions about PROFILE (kept, or none before it is READY)."""
    answer = twin.client("lambda").invoke(FunctionName=function_name("sweep"), Payload=json.dumps({"poll": POLL}).encode())
    body = json.loads(answer["Payload"].read())
    assert "FunctionError" not in answer, body
    decided = [d for d in body["decisions"] if d["profile"] == PROFILE]
    assert [d["action"] for d in decided] in ([], ["kept"]), body["decisions"]
    return decided


def _healthy(probe: Probe) -> int:
    return probe.targets(PROFILE).count("healthy")


def test_replicas_follow_a_stepped_load_and_stop_leaves_nothing(twin: Twin, probe: Probe) -> None:
    started = probe.start(PROFILE, "r1")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    assert (probe.service(PROFILE)["desiredCount"], _healthy(probe)) == (1, 1)
    spec = probe.registry.profiles[PROFILE]
    load = Load(spec.endpoint_url, {spec.routing_header.name: spec.routing_header.value})
    timeline: list[tuple[float, int, int]] = []  # (seconds since the load began, desired, healthy targets)
    budgets: list[tuple[int, str]] = []  # (healthy targets, the budget stop's detail) as the sweep saw them
    began = time.monotonic()
    sweeping = threading.Event()

    def sweeper() -> None:  # the sweep as a faster schedule would run it: the metric it publishes drives scaling
        while not sweeping.is_set():
            decided = _sweep(twin)
            healthy = _healthy(probe)
            timeline.append((round(time.monotonic() - began, 1), probe.service(PROFILE)["desiredCount"], healthy))
            stops = [d["next_stop"] for d in decided if d["next_stop"]]
            budgets.extend((healthy, stop["detail"]) for stop in stops if stop["reason"] == "budget")
            time.sleep(0.3)

    thread = threading.Thread(target=sweeper, daemon=True)
    thread.start()
    try:
        # 6 streams on 1 replica: 6 per replica against a target of 2 -> ceil(1 x 6 / 2) = 3, the maximum.
        load.set(6)
        probe.wait_for("3 replicas healthy under 6 streams", lambda: _healthy(probe) == MAX_REPLICAS, timeout_s=120)
        group = probe.group(PROFILE)
        assert group["DesiredCapacity"] == MAX_REPLICAS and len(group["Instances"]) == MAX_REPLICAS  # one instance each
        # The ALB spreads the streams over every replica: each model server is generating.
        probe.wait_for(
            "every replica serving",
            lambda: all(_generated(ip) > 0 for ip in _target_ips(probe)),
            timeout_s=30,
        )
        # 1 stream on 3 replicas: 0.33 per replica, under 90 % of the target -> back to the minimum,
        # the stream that runs meanwhile finishing whole (the scaled-in task drains first).
        load.set(1)
        probe.wait_for("back to 1 replica", lambda: probe.service(PROFILE)["desiredCount"] == 1, timeout_s=150)
        probe.wait_for("1 healthy target left", lambda: probe.targets(PROFILE) == ["healthy"], timeout_s=60)
        probe.wait_for(
            "the capacity provider lets 2 instances go", lambda: len(probe.group(PROFILE)["Instances"]) == 1, timeout_s=60
        )
    finally:
        load.stop()
        sweeping.set()
        thread.join(timeout=30)
    assert load.outcomes and set(load.outcomes) == {"whole"}, sorted(set(load.outcomes))
    peak = max(desired for _, desired, _ in timeline)
    assert peak == MAX_REPLICAS, timeline
    # The budget is counted on every instance: at 3 replicas the sweep saw 3 burning it.
    assert any(f"USD spent, {MAX_REPLICAS} instance(s) at 3.36 USD/h each" in detail for _, detail in budgets), budgets
    print("replicas over time (s, desired, healthy):", timeline[:: max(1, len(timeline) // 40)])

    stopped = probe.stop(PROFILE, "r1")
    assert stopped.status == "SUCCEEDED", (stopped.error, stopped.cause)
    probe.assert_nothing_running(PROFILE)
    scaling = probe.twin.client("application-autoscaling").describe_scalable_targets(ServiceNamespace="ecs")["ScalableTargets"]
    assert [(t["MinCapacity"], t["MaxCapacity"]) for t in scaling] == [(0, 0)]  # auto scaling cannot start it again
    # The ledger bills every instance that ran, each for its own time: the two scaled in ended first.
    [session] = probe.sessions(PROFILE)
    spans = sorted(session.instances, key=lambda i: i.stopped_at or session.started_at)
    assert len({i.instance_id for i in spans}) == MAX_REPLICAS and all(i.stopped_at for i in spans), spans
    assert session.stopped_at is not None and spans[-1].stopped_at == session.stopped_at
    assert all(session.started_at <= i.started_at < i.stopped_at <= session.stopped_at for i in spans if i.stopped_at)
    cost = stored_session_cost(load_catalog(), probe.registry.region, session, session.stopped_at)
    assert cost.instances == MAX_REPLICAS and cost.uptime_hours < cost.instance_hours < MAX_REPLICAS * cost.uptime_hours
    print(f"billed: {cost.instance_hours * 3600:.1f} instance-s over a {cost.uptime_hours * 3600:.1f} s session")


def _target_ips(probe: Probe) -> list[str]:
    arn = probe.registry.profiles[PROFILE].target_group_arn
    found = probe.elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
    return [f"{t['Target']['Id']}:{t['Target']['Port']}" for t in found if t["TargetHealth"]["State"] == "healthy"]


def _generated(address: str) -> float:
    text = httpx.get(f"http://{address}/metrics", timeout=5).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:generation_tokens_total"))
