"""``servingctl local ...``: the local twin's commands (the simulator model server, the twin itself)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from servingctl.cli.main import summary
from servingctl.cli.client import clear_twin_state, write_twin_state
from servingctl.local.faults import FAULTS

DEFAULT_TWIN_PORT = 8700  # the REST API's port when --api-port is not given

if TYPE_CHECKING:
    from servingctl.local.twin import Twin

from servingctl.local.simserver import command as simserver_command


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``local`` command group and its subcommands."""
    local = subparsers.add_parser(
        "local", help=summary("local"))
    local_sub = local.add_subparsers(dest="local_command", metavar="SUBCOMMAND", required=True)
    _register_simserver(local_sub)
    _register_up(local_sub)


def _register_simserver(local_sub: argparse._SubParsersAction) -> None:
    parser = local_sub.add_parser(
        "simserver",
        help="OpenAI-compatible model server simulating the reference vLLM deployment",
        description="Serve /v1/chat/completions, /tokenize, /health, /version, /v1/models and /metrics "
        "with vLLM's shapes and the reference deployment's timing (divided by --speed).",
    )
    simserver_command.add_arguments(parser)
    parser.set_defaults(func=simserver_command.run)


def _register_up(local_sub: argparse._SubParsersAction) -> None:
    parser = local_sub.add_parser(
        "up",
        help="run the local twin of AWS until interrupted",
        description="Emulated AWS (moto) running the real state machines and Lambda handlers, a world simulator "
        "playing AWS's part with delays divided by --time-scale, and a real model server per running task. "
        "Runs in the foreground; Ctrl-C stops everything.",
    )
    parser.add_argument("--model-server", choices=["sim", "vllm"], default="sim",
                        help="model server started when a task runs: the simulator or vLLM on CPU (default sim)")
    parser.add_argument("--fault", action="append", default=[], choices=sorted(FAULTS), metavar="NAME",
                        help="inject a fault (repeatable): " + ", ".join(sorted(FAULTS)))
    parser.add_argument("--time-scale", type=_positive_float, default=10.0,
                        help="divide AWS's delays by this factor (default 10)")
    parser.add_argument("--port", type=int, default=5000, help="port of the emulated AWS endpoint (default 5000)")
    parser.add_argument("--registry", default=None, help="profiles file (default: the reference's two profiles)")
    parser.add_argument("--api-port", type=int, default=DEFAULT_TWIN_PORT,
                        help=f"port of the REST API on 127.0.0.1, OpenAPI at /openapi.json (default {DEFAULT_TWIN_PORT})")
    parser.set_defaults(func=_run_up)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _run_up(args: argparse.Namespace) -> int:
    """Start the twin, print its endpoints, echo the world's events until interrupted, then stop it."""
    from servingctl.local.modelserver import vllm_available
    from servingctl.local.twin import Twin  # noqa: F811 (moto loads only for this command)

    if args.model_server == "vllm" and not vllm_available():
        print("--model-server vllm: vLLM or the tiny model is not built; run `make vllm` first", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, _on_signal)
    twin = Twin(args.registry, model_server=args.model_server, faults=args.fault, time_scale=args.time_scale, port=args.port,
                api_port=args.api_port)
    try:
        twin.start()
        assert twin.api_url is not None
        # `servingctl start/stop/status` find the twin through this file, with poll settings scaled to its clock.
        write_twin_state(twin.api_url, _poll(twin))
        print(_banner(twin), flush=True)
        seen = 0
        while not stop.wait(0.2):
            assert twin.world is not None
            for event in twin.world.events[seen:]:
                print(f"[world t+{event.sim_s:7.0f}s] {event.kind:20} {event.detail}", flush=True)
            seen = len(twin.world.events)
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping the twin (model servers, world, moto)...", flush=True)
        clear_twin_state()
        twin.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0


def _poll(twin: Twin) -> dict[str, float]:
    """The flows' default pacing (15 s, x1.5, max 60 s) divided by the time scale, in whole seconds."""
    return {"interval_s": max(1, round(15 / twin.time_scale)), "max_interval_s": max(1, round(60 / twin.time_scale)), "backoff": 1.5}


def _banner(twin: Twin) -> str:
    from servingctl.local.twin import SSM_PARAMETER

    assert twin.registry is not None
    first = next(iter(twin.registry.profiles))
    # Wait states take whole seconds: production's 15 s / 60 s divided by the time scale, at least 1 s.
    poll = _poll(twin)
    start = twin.state_machines.get("start_profile", "<no statemachine/start_profile.asl.json>")
    stop = twin.state_machines.get("stop_profile", "<no statemachine/stop_profile.asl.json>")
    lines = [
        f"servingctl local twin is up (model server: {twin.model_server}, time scale x{twin.time_scale:g}, "
        f"faults: {', '.join(twin.faults) or 'none'})",
        f"  AWS endpoint     {twin.endpoint_url}  (region {twin.region}, any credentials)",
        f"  registry         {twin.registry_path}  (also SSM parameter {SSM_PARAMETER})",
        f"  table, bucket    {twin.table_name}, {twin.bucket_name}",
        f"  REST API         {twin.api_url}  (OpenAPI: {twin.api_url}/openapi.json; servingctl start/stop/status find it)",
        f"  start_profile    {start}",
        f"  stop_profile     {stop}",
    ]
    for name, profile in twin.registry.profiles.items():
        lines.append(f"  model server     {name}: {profile.endpoint_url} (runs while its ECS task runs)")
    lines += [
        "Start and stop a profile (Wait states are real seconds: pass poll settings divided by the time scale):",
        f"  export AWS_ENDPOINT_URL={twin.endpoint_url} AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x AWS_DEFAULT_REGION={twin.region}",
        f"  aws stepfunctions start-execution --state-machine-arn {start} --name start-{first}-1 "
        f"--input '{{\"profile\": \"{first}\", \"poll\": {json.dumps(poll)}}}'",
        f"  aws stepfunctions start-execution --state-machine-arn {stop} --name stop-{first}-1 "
        f"--input '{{\"profile\": \"{first}\", \"poll\": {json.dumps(poll)}}}'",
        "Ctrl-C stops every model server, the world and the endpoint.",
    ]
    return "\n".join(lines)

