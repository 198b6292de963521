"""The twin starts and stops a REAL vLLM (CPU, tiny local model) through the real state machines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest

from servingctl.control.timeline import VLLM_SOURCE
from servingctl.local.modelserver import tiny_model_dir, vllm_available
from servingctl.local.twin import Twin
from servingctl.local.world import Delays
from servingctl.store import DynamoStore

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


def _dynamodb(twin: Twin) -> Any:
    return boto3.resource(
        "dynamodb",
        endpoint_url=twin.endpoint_url,
        region_name=twin.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


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
        r for r in DynamoStore(twin.table_name, resource=_dynamodb(twin)).list_starts(PROFILE) if r.execution == start.arn
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
    [server_started] = [e for e in twin.world.events_of("model-server-started") if e.detail.startswith(PROFILE)]
    pid = int(server_started.detail.rsplit(" ", 1)[-1])

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
