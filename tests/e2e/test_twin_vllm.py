"""The twin starts and stops a REAL vLLM (CPU, tiny local model) through the real state machines."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from servingctl.control.timeline import VLLM_SOURCE
from servingctl.store import DynamoStore
from servingctl.store.benchmarks_dynamodb import DynamoBenchmarkStore
from servingctl_twin.modelserver import tiny_model_dir, vllm_available
from servingctl_twin.twin import Twin
from servingctl_twin.world import Delays

from .conftest import twin_dynamodb

PROFILE = "nemotron-nano"
POLL = {"interval_s": 1, "max_interval_s": 3, "backoff": 1.5}


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    if not vllm_available():
        message = f"real vLLM or the tiny model ({tiny_model_dir()}) not built: run `make vllm`"
        if os.environ.get("SERVINGCTL_REQUIRE_VLLM") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    # AWS's delays at 1/100; vLLM's own start-up (20-50 s on 2 cores) is real and not scaled.
    with Twin(model_server="vllm", time_scale=10, delays=Delays(load_s=0).scaled(0.1)) as running:
        yield running


def test_twin_starts_serves_and_stops_a_real_vllm(twin: Twin) -> None:
    start = twin.run(
        "start_profile",
        {"profile": PROFILE, "poll": POLL, "deadlines": {"capacity_s": 120, "task_s": 120, "health_s": 600}},
        name="start-nemotron-nano-e2e",
        timeout_s=900,
    )
    assert start.status == "SUCCEEDED", (start.error, start.cause)
    spec = twin.registry.profiles[PROFILE]
    url, header = spec.endpoint_url, {spec.routing_header.name: spec.routing_header.value}
    [server] = [address for name, address in twin.world.model_servers().items() if name == PROFILE]
    assert server != url  # the profile's endpoint is its ALB, which forwards to the task's server
    version = httpx.get(f"{url}/version", headers=header, timeout=10).json()
    assert "simulator" not in str(version).lower()  # the real vLLM answers, not the simulator
    assert start.output["smoke"]["models"] == [PROFILE]
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        headers=header,
        json={"model": PROFILE, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "ignore_eos": True},
        timeout=120,
    ).json()
    assert reply["usage"]["completion_tokens"] == 8
    # The start timeline read vLLM's own phases from its lines in the emulated CloudWatch Logs: on
    # CPU with --enforce-eager vLLM 0.32 prints load start, model init, weights loaded, engine
    # ready and the API server's startup (no torch.compile, no CUDA graphs).
    [record] = [
        r for r in DynamoStore(twin.table_name, resource=twin_dynamodb(twin)).list_starts(PROFILE) if r.execution == start.arn
    ]
    vllm_phases = [m.name for m in record.marks if m.source == VLLM_SOURCE]
    assert vllm_phases == [
        "vllm_load_started",
        "vllm_model_initialized",
        "vllm_weights_loaded",
        "vllm_engine_ready",
        "vllm_api_ready",
    ]
    assert record.mark("task_started").at <= record.mark("vllm_load_started").at <= record.mark("target_healthy").at
    print(f"vLLM phases read from the real vLLM CPU log on the twin: {len(vllm_phases)} ({', '.join(vllm_phases)})")
    # The README's quick tour benchmark through run_benchmark: vLLM on CPU is busy for its whole
    # length, and the ALB's health checks (the target group's 15 s interval, scaled; 10 s timeout in
    # real seconds; 4 failures) must not call it unhealthy, nor ECS replace the task.
    bench = twin.run(
        "run_benchmark",
        {"profile": PROFILE, "input_tokens": [256], "concurrencies": [1, 2], "rounds": 2, "max_tokens": 64},
        name="bench-nemotron-nano-e2e",
        timeout_s=900,
    )
    assert bench.status == "SUCCEEDED", (bench.error, bench.cause)
    runs = DynamoBenchmarkStore(twin.table_name, resource=twin_dynamodb(twin))
    [run] = [r for r in runs.list_runs() if r.execution == bench.arn]
    scenarios = runs.list_scenarios(run.run_id)
    assert run.status.value == "SUCCEEDED" and [s.name for s in scenarios] == ["in256-c1", "in256-c2"]
    assert all(s.summary.failed == 0 and s.summary.ok == 2 * s.summary.concurrency for s in scenarios)
    assert twin.world.events_of("task-unhealthy") == []  # the busy server stayed healthy
    [server_started] = [e for e in twin.world.events_of("model-server-started") if e.detail.startswith(PROFILE)]
    pid = int(server_started.detail.rsplit(" ", 1)[-1])  # one server: never replaced

    stop = twin.run("stop_profile", {"profile": PROFILE, "poll": POLL}, name="stop-nemotron-nano-e2e", timeout_s=600)
    assert stop.status == "SUCCEEDED", (stop.error, stop.cause)
    assert twin.world.model_servers() == {}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the vLLM process group is gone
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server}/health", timeout=5)  # the task's server is gone
    assert httpx.get(f"{url}/health", headers=header, timeout=5).status_code == 503  # no registered target
    group = twin.client("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=[twin.registry.pool_of(PROFILE).asg_name]
    )["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 0
