"""Cold start vs warm start of the reference profile on the twin, phase by phase, from the start
timeline the controller records, and the controller's own overhead per phase (measured).

The world plays AWS with the documented figures below (simulated seconds, divided by --factor);
the production poll settings are divided by the same factor, so the controller polls exactly as
deployed. Two pools serve the same profile shape (deepseek-v4-flash, g7e.12xlarge, TP 2):

- cold: the reference's pool without a warm pool: EC2 launches and boots a new instance, its
  empty volume pulls the image and syncs the 168 GB checkpoint, vLLM compiles;
- warm: a warm pool that reuses instances on scale-in: its second start takes the stopped instance
  back (EC2 start, no first boot) with the image layers, the weights and the compile cache still
  on its volume (the first start fills the volume and is reported as "warm instance, cold volume").

- prepared: a warm pool with a launch lifecycle hook (reuse on scale-in off, as ECS supports): the
  pool's instance was prepared while it waited (Warmed:Pending:Wait: image pull, weights sync, a vLLM
  run that filled the compile cache) and stopped; the start takes it (EC2 start, the hook again,
  completed at once) and skips the pull, the download and the compile;
- cold, streamed: the cold start with the weights streamed from S3 by the Run:ai model streamer
  (--load-format runai_streamer on an s3:// path): no prefetch pass, vLLM's load reads S3 instead
  of gp3 (a world of its own: the twin's delays are per world).

A warm instance was launched and registered before the request: its EC2 LaunchTime and ECS
registeredAt belong to no start, so its capacity wait shows as task placement (from the request).

Durations are the timeline's phases (each mark from its AWS source; see servingctl.control.timeline)
x factor. Controller overhead is measured: for each mark, the time from the mark in the world to the
controller recording it (seen_at - at), in real seconds and x factor (the poll wait dominates it and
scales with the factor; the Lambda's own run time does not, so the scaled figure is an upper bound).
The ratio warm / cold total is the figure to watch.

Also: the GPU minutes and cost of refilling a prepared warm pool after a scale-in (launch, boot and
the prepare step, at the catalog's price).

    .venv/bin/python benchmarks/start_timeline.py [--factor 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3

from servingctl.control.timeline import LABELS, overheads, spans
from servingctl.store import DynamoStore
from servingctl.store.models import StartRecord
from servingctl_twin.twin import REFERENCE_REGISTRY, Twin
from servingctl_twin.world import Delays

PROFILE = "deepseek-v4-flash"
WARM = "ref-warm"  # the same profile on a pool with a warm pool that reuses instances
# Production poll settings (the contract's) and the registry's start deadlines.
POLL = {"interval_s": 15, "max_interval_s": 60, "backoff": 1.5}
DEADLINES = {"capacity_s": 900, "task_s": 2400, "health_s": 2400}

# The world's phase durations (simulated seconds) and where each comes from.
REFERENCE = Delays(
    # EC2 launch + first boot of the ECS GPU AMI (cloud-init, user data, NVIDIA driver): the
    # capacity provider's instance warm-up of the reference (FACTS.md section 1: 300 s) is what AWS
    # is told a new instance needs before it serves; launch 120 s + registration 60 s stays inside it.
    launch_s=120.0,
    register_s=60.0,
    provision_s=5.0,  # awsvpc ENI attach: "an overhead of several seconds" (ECS docs, Optimize task launch time)
    # The vLLM image (~10 GB compressed, vllm/vllm-openai 0.26) pulled through the NAT gateway:
    # ECS docs call images of tens of GB the case where pull time dominates; 120 s is the world default.
    pull_s=120.0,
    # 168 GB checkpoint (FACTS.md section 1) synced from S3 to gp3 at 1000 MiB/s: the registry's
    # weights_pass_s, 161 s (Terraform derives it from weights_gb and cache_throughput_mibps).
    prefetch_s=161.0,
    # RUNNING -> /health: vLLM reads the weights back from gp3 (another 161 s pass), torch.compile
    # (vLLM logs tens of seconds to minutes, "torch.compile takes 28.77 s in total" in a vLLM
    # issue's log; 60 s here, the warm helper's compile_cache_s), CUDA graph capture and KV-cache
    # profiling ("Graph capturing finished in 17 secs", "init engine ... took 34.11 seconds": vLLM
    # issue #20264), then the API server: 161 + 60 + 34 = 255 s.
    load_s=255.0,
    # ALB health checks (interval 30 s, healthy threshold 2: FACTS.md section 1) are the target
    # group's settings, which the twin's ALB follows (servingctl_twin.elbv2), not world delays.
    # Warm pool: EC2 starts a stopped instance and skips the first boot (the ECS docs' pre-initialized
    # instances); 40 s is the world's default. Image layers on the volume: a manifest check (5 s).
    warm_start_s=40.0,
    warm_pull_s=5.0,
    # What a warm volume saves: the S3 sync (the prefetch finds its marker and exits: prefetch_s
    # skipped by the world) and torch.compile (60 s, the cache in VLLM_CACHE_ROOT read instead).
    # Not the weights' read from gp3 into the GPUs: a stopped instance lost its page cache.
    weights_sync_s=0.0,
    compile_cache_s=60.0,
)


PREPARED = "ref-prep"  # the same profile on a pool whose warm pool prepares its instances
# The Run:ai model streamer from S3: the anchor (its own figures: 14.3 s against 48 s for the
# safetensors loader) on Llama-3-8B's 15 GB is about 1.05 GB/s. An assumption until measured on a
# g7e in the deployment's region: 168 GB / 1.05 GB/s = 160 s, in place of the 161 s gp3 read.
STREAM_GB_S = 1.05
WEIGHTS_GB = 168.0
STREAMED = replace(
    REFERENCE,
    prefetch_s=0.0,  # no sync to the volume: the streamer reads S3 while vLLM loads
    load_s=round(WEIGHTS_GB / STREAM_GB_S) + 60.0 + 34.0,  # stream + torch.compile + capture and API server
)


def _refill_cost(factor: float) -> dict[str, Any]:
    """What one refill of a prepared warm pool costs after a scale-in: the new instance's GPU time
    (launch and first boot, then the prepare step) at the catalog's hourly price."""
    from servingctl.costs import load_catalog

    document = json.loads(REFERENCE_REGISTRY.read_text())
    pool = document["pools"][document["profiles"][PROFILE]["pool"]]
    price = load_catalog().instance(document["region"], pool.get("price_key") or pool["instance_type"])
    seconds = REFERENCE.launch_s + REFERENCE.pull_s + REFERENCE.prefetch_s + REFERENCE.load_s
    hourly = price.hourly_usd if price else None
    return {
        "instance_type": pool["instance_type"],
        "gpu_minutes": round(seconds / 60, 1),
        "hourly_usd": hourly,
        "usd_per_refill": round(seconds / 3600 * hourly, 2) if hourly else None,
    }


def _registry(directory: Path) -> Path:
    """The reference registry, its deepseek pool without a warm pool, plus WARM on a copy of that
    pool whose warm pool reuses instances on scale-in, and PREPARED on a copy whose warm pool prepares."""
    document = json.loads(REFERENCE_REGISTRY.read_text())
    cold_pool = document["pools"][document["profiles"][PROFILE]["pool"]]
    cold_pool.pop("warm_pool", None)
    pool = json.loads(json.dumps(cold_pool))
    pool.update(
        asg_name="servingctl-bench-warm",
        capacity_provider="servingctl-bench-warm",
        warm_pool={"pool_state": "Stopped", "min_size": 0, "reuse_on_scale_in": True},
    )
    pool["asg_arn"] = pool["asg_arn"].replace(cold_pool["asg_name"], pool["asg_name"])
    document["pools"]["bench-warm"] = pool
    profile = json.loads(json.dumps(document["profiles"][PROFILE]))
    profile.update(
        service="servingctl-bench-warm",
        pool="bench-warm",
        model=WARM,
        target_group_arn=profile["target_group_arn"].replace(f"llm-{PROFILE}", f"llm-{WARM}")[:-1] + "7",
        routing_header={"name": "X-LLM-Profile", "value": WARM},
    )
    document["profiles"][WARM] = profile
    prepared_pool = json.loads(json.dumps(cold_pool))
    prepared_pool.update(
        asg_name="servingctl-bench-prep",
        capacity_provider="servingctl-bench-prep",
        warm_pool={"pool_state": "Stopped", "min_size": 0, "prepare": True, "max_group_prepared_capacity": 1},
    )
    prepared_pool["asg_arn"] = prepared_pool["asg_arn"].replace(cold_pool["asg_name"], prepared_pool["asg_name"])
    document["pools"]["bench-prep"] = prepared_pool
    prepared = json.loads(json.dumps(document["profiles"][PROFILE]))
    prepared.update(
        service="servingctl-bench-prep",
        pool="bench-prep",
        model=PREPARED,
        target_group_arn=prepared["target_group_arn"].replace(f"llm-{PROFILE}", f"llm-{PREPARED}")[:-1] + "6",
        routing_header={"name": "X-LLM-Profile", "value": PREPARED},
    )
    document["profiles"][PREPARED] = prepared
    path = directory / "registry.json"
    path.write_text(json.dumps(document))
    return path


def _scaled(values: Mapping[str, float], factor: float) -> dict[str, Any]:
    return {k: v if k == "backoff" else max(1, math.ceil(v / factor)) for k, v in values.items()}


def _timeline(record: StartRecord, factor: float) -> dict[str, Any]:
    """Phases in simulated seconds, and the controller's overhead per mark (real and x factor)."""
    lag = overheads(record)
    phases = [
        {"mark": name, "phase": LABELS.get(name, name), "seconds": round(seconds * factor, 1), "at_s": round(since * factor, 1)}
        for name, seconds, since in spans(record)
    ]
    return {
        "phases": phases,
        "total_s": phases[-1]["at_s"] if phases else None,
        "overhead_real_s": {name: round(value, 3) for name, value in lag.items() if name != "requested"},
        "overhead_scaled_s": {name: round(value * factor, 1) for name, value in lag.items() if name != "requested"},
    }


def _wait_prepared(twin: Twin, timeout_s: float) -> None:
    """Until the prepared pool's instance has stopped after its prepare step."""
    assert twin.registry is not None
    name = twin.registry.pools["bench-prep"].asg_name
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = twin.client("autoscaling").describe_warm_pool(AutoScalingGroupName=name)["Instances"]
        if [i["LifecycleState"] for i in found] == ["Warmed:Stopped"]:
            return
        time.sleep(0.5)
    raise SystemExit("the prepared warm pool never held a stopped instance")


def measure(factor: float) -> dict[str, Any]:
    """A cold start, two starts on the reusing warm pool (the second one warm), one from a prepared
    warm pool, then (in a world whose weights stream from S3) a cold start; each followed by a stop."""
    if any(POLL[k] % factor for k in ("interval_s", "max_interval_s")):
        raise SystemExit(f"--factor must divide the poll settings {POLL} (Wait takes whole seconds)")
    execution_input = {"poll": _scaled(POLL, factor), "deadlines": _scaled(DEADLINES, factor)}
    timeout = 3600 / factor + 120
    results: dict[str, Any] = {}
    worlds = (
        (REFERENCE, (("cold", PROFILE), ("warm instance, cold volume", WARM), ("warm", WARM), ("prepared", PREPARED))),
        (STREAMED, (("cold, streamed", PROFILE),)),
    )
    for delays, runs in worlds:
        _run_world(factor, delays, runs, execution_input, timeout, results)
    cold, warm = results["cold"]["total_s"], results["warm"]["total_s"]
    return {
        "factor": factor,
        "profile": PROFILE,
        "poll": POLL,
        "load_average": os.getloadavg(),
        "starts": results,
        "warm_over_cold": round(warm / cold, 3) if cold and warm else None,
        "refill": _refill_cost(factor),
        "streamer": {"gb_per_s": STREAM_GB_S, "weights_gb": WEIGHTS_GB, "load_s": STREAMED.load_s},
        "measured_at": datetime.now().isoformat(timespec="seconds"),
    }


def _run_world(
    factor: float,
    delays: Delays,
    runs: tuple[tuple[str, str], ...],
    execution_input: dict[str, Any],
    timeout: float,
    results: dict[str, Any],
) -> None:
    """Each (kind, profile) start and stop in one twin with these delays."""
    with tempfile.TemporaryDirectory() as tmp, Twin(_registry(Path(tmp)), time_scale=factor, delays=delays) as twin:
        resource = boto3.resource(
            "dynamodb", endpoint_url=twin.endpoint_url, region_name=twin.region, aws_access_key_id="x", aws_secret_access_key="x"
        )
        store = DynamoStore(twin.table_name, resource=resource)
        for number, (kind, profile) in enumerate(runs):
            if profile == PREPARED:
                _wait_prepared(twin, timeout)
            started = twin.run(
                "start_profile", {"profile": profile, **execution_input}, name=f"start-{profile}-b{number}", timeout_s=timeout
            )
            if started.status != "SUCCEEDED":
                raise SystemExit(f"{kind} start {started.status}: {started.error}: {started.cause}")
            [record] = [r for r in store.list_starts(profile) if r.execution == started.arn]
            results[kind] = _timeline(record, factor) | {"warm_start": store.get_profile(profile).warm_start}
            stopped = twin.run(
                "stop_profile",
                {"profile": profile, "poll": execution_input["poll"]},
                name=f"stop-{profile}-b{number}",
                timeout_s=timeout,
            )
            if stopped.status != "SUCCEEDED":
                raise SystemExit(f"{kind} stop {stopped.status}: {stopped.error}: {stopped.cause}")


def report(figures: dict[str, Any]) -> str:
    """Per phase: cold, warm-instance-cold-volume and warm seconds, and the controller's overhead."""
    starts = figures["starts"]
    kinds = list(starts)
    order: list[str] = []
    for kind in kinds:
        order += [p["mark"] for p in starts[kind]["phases"] if p["mark"] not in order]
    lines = [
        f"start timeline of {figures['profile']} on the twin (x{figures['factor']:g}; simulated seconds; "
        f"load average {', '.join(f'{x:.2f}' for x in figures['load_average'])})",
        f"{'phase':<36}" + "".join(f"{k[:18]:>20}" for k in kinds) + f"{'overhead (cold)':>22}",
    ]
    for mark in order:
        row = f"{LABELS.get(mark, mark):<36}"
        for kind in kinds:
            found = next((p for p in starts[kind]["phases"] if p["mark"] == mark), None)
            row += f"{found['seconds']:>20.1f}" if found else f"{'-':>20}"
        real = starts["cold"]["overhead_real_s"].get(mark)
        scaled = starts["cold"]["overhead_scaled_s"].get(mark)
        row += f"{real:>10.2f} s real {scaled:>6.1f}" if real is not None else f"{'-':>22}"
        lines.append(row)
    lines.append(f"{'total':<36}" + "".join(f"{starts[k]['total_s']:>20.1f}" for k in kinds))
    lines.append(f"warm / cold: {figures['warm_over_cold']}")
    refill = figures["refill"]
    lines.append(
        f"refill of a prepared warm pool after each scale-in: {refill['gpu_minutes']} GPU minutes of a {refill['instance_type']} "
        f"(launch, boot, prepare) = {refill['usd_per_refill']} USD at {refill['hourly_usd']} USD/h"
    )
    stream = figures["streamer"]
    lines.append(
        f"cold, streamed: vLLM's load {stream['load_s']:.0f} s with {stream['weights_gb']:.0f} GB streamed at "
        f"{stream['gb_per_s']} GB/s (assumed), no prefetch pass"
    )
    return "\n".join(lines)


def main() -> int:
    """Measure and print (or --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--factor", type=float, default=15.0, help="time compression of the world and the poll settings")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = measure(args.factor)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
