"""load_format runai_streamer on the twin: the weights go up with `servingctl weights upload`, the
profile's task has no prefetch container, and the REAL vLLM on CPU streams the tiny model from the
twin's S3 with the Run:ai model streamer (`--load-format runai_streamer` on the s3:// snapshot)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from servingctl.control.timeline import VLLM_SOURCE
from servingctl.store import DynamoStore
from servingctl_cli.client import write_twin_state
from servingctl_cli.main import main
from servingctl_twin.cloudwatch.logs import model_log_group
from servingctl_twin.ecs.scheduler import PREFETCH_CONTAINER
from servingctl_twin.modelserver import tiny_model_dir, vllm_available
from servingctl_twin.twin import REFERENCE_REGISTRY, WEIGHTS_PREFIX, Twin
from servingctl_twin.world import Delays

from .conftest import twin_dynamodb

PROFILE = "nemotron-nano"
REVISION = "5" * 40
POLL = {"interval_s": 1, "max_interval_s": 3, "backoff": 1.5}
# What vLLM 0.32 prints while the streamer reads the safetensors ("Loading safetensors using Runai
# Model Streamer: 21/21" on a terminal; its progress bar in a log).
STREAMER_LINE = "Runai Model Streamer"


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    if not vllm_available():
        message = f"real vLLM or the tiny model ({tiny_model_dir()}) not built: run `make vllm`"
        if os.environ.get("SERVINGCTL_REQUIRE_VLLM") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    document = json.loads(REFERENCE_REGISTRY.read_text())
    document["profiles"][PROFILE]["serving"].update(load_format="runai_streamer", revision=REVISION)
    path = tmp_path_factory.mktemp("registry") / "registry.json"
    path.write_text(json.dumps(document))
    with Twin(path, model_server="vllm", time_scale=10, delays=Delays(load_s=0).scaled(0.1), api_port=0) as running:
        yield running


def test_a_streamed_profile_loads_its_uploaded_weights_from_s3(
    twin: Twin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = twin.registry.profiles[PROFILE]
    ecs = twin.client("ecs")
    [service] = ecs.describe_services(cluster=spec.cluster, services=[spec.service])["services"]
    containers = ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]["containerDefinitions"]
    tree = f"{WEIGHTS_PREFIX}/models--{spec.serving.model_id.replace('/', '--')}"
    snapshot = f"s3://{twin.weights_bucket}/{tree}/snapshots/{REVISION}"
    assert [c["name"] for c in containers] == ["vllm"] and PREFETCH_CONTAINER not in str(containers)
    assert containers[0]["command"][:2] == ["--model", snapshot] and "runai_streamer" in containers[0]["command"]

    # The user's way in: the local model directory up to the snapshot the task definition streams.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SERVINGCTL_API_URL", raising=False)
    write_twin_state(twin.api_url, POLL, twin.region, twin.endpoint_url)
    assert main(["weights", "upload", str(tiny_model_dir()), "--profile", PROFILE]) == 0
    said = capsys.readouterr().out
    assert f"-> {snapshot.rsplit('/snapshots/', 1)[0]}" in said and "refs/main" not in said  # pinned: no ref needed
    uploaded = twin.client("s3").list_objects_v2(Bucket=twin.weights_bucket, Prefix=snapshot.split("/", 3)[3])
    assert {"config.json", "model.safetensors"} <= {o["Key"].rsplit("/", 1)[-1] for o in uploaded["Contents"]}

    start = twin.run(
        "start_profile",
        {"profile": PROFILE, "poll": POLL, "deadlines": {"capacity_s": 120, "task_s": 120, "health_s": 600}},
        name="start-nemotron-nano-streamed",
        timeout_s=900,
    )
    assert start.status == "SUCCEEDED", (start.error, start.cause)
    url, header = spec.endpoint_url, {spec.routing_header.name: spec.routing_header.value}
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        headers=header,
        json={"model": PROFILE, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "ignore_eos": True},
        timeout=120,
    ).json()
    assert reply["usage"]["completion_tokens"] == 8

    # vLLM's own lines, shipped to the profile's log group: the streamer read the weights, nothing synced them.
    events = twin.client("logs").filter_log_events(logGroupName=model_log_group(spec.service))["events"]
    text = "\n".join(e["message"] for e in events)
    assert STREAMER_LINE in text, text[-3000:]
    assert "servingctl prefetch" not in text
    starts = DynamoStore(twin.table_name, resource=twin_dynamodb(twin)).list_starts(PROFILE)
    [record] = [r for r in starts if r.execution == start.arn]
    names = [m.name for m in record.marks]
    assert "prefetch_started" not in names and "prefetch_finished" not in names
    assert "vllm_weights_loaded" in [m.name for m in record.marks if m.source == VLLM_SOURCE]

    stop = twin.run("stop_profile", {"profile": PROFILE, "poll": POLL}, name="stop-nemotron-nano-streamed", timeout_s=600)
    assert stop.status == "SUCCEEDED", (stop.error, stop.cause)
    assert twin.world.model_servers() == {}
