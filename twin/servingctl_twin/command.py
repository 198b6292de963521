"""``servingctl local ...``: the local twin's commands, added to the command line by
servingctl_twin.plugin (the simulator model server, the twin itself).

`local up` is quiet by default: the banner, then one line per change in the simulated world
(instance launched, task running, target healthy, ...); --verbose adds the Lambda handlers' logs.
Its ports are checked before anything starts, so a busy one fails at once, naming the port.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import warnings
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from servingctl.wording import port_number
from servingctl_cli.client import EXIT_FAILED, clear_twin_state, read_twin_state, twin_state_path, write_twin_state
from servingctl_twin.faults import FAULTS, LAUNCH_FAILURES, check_fault
from servingctl_twin.plugin import HELP
from servingctl_twin.simserver import command as simserver_command

if TYPE_CHECKING:
    from servingctl_twin.twin import Twin

DEFAULT_TWIN_PORT = 8700  # the REST API's port when --api-port is not given
DEFAULT_AWS_PORT = 5000


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``local`` command group and its subcommands."""
    local = subparsers.add_parser("local", help=HELP)
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
        "Runs in the foreground; Ctrl-C stops everything. Its state (profile phases, executions, benchmark runs, "
        "the ledger) is in memory only and not kept across restarts: every `local up` starts a fresh world.",
    )
    parser.add_argument(
        "--model-server",
        choices=["sim", "vllm"],
        default="sim",
        help="model server started when a task runs: the simulator or vLLM on CPU (default sim)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        type=_fault,
        metavar="NAME",
        help="inject a fault (repeatable): "
        + ", ".join(sorted(FAULTS))
        + "; capacity-unavailable=TYPE fails only that instance type's launches, "
        "capacity-unavailable=TYPE:CLASS with AWS's message of one class: " + ", ".join(LAUNCH_FAILURES),
    )
    parser.add_argument(
        "--time-scale", type=_positive_float, default=10.0, help="divide AWS's delays by this factor (default 10)"
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_AWS_PORT,
        help=f"port of the emulated AWS endpoint (default {DEFAULT_AWS_PORT}; 0 picks a free one)",
    )
    parser.add_argument("--registry", default=None, help="profiles file (default: the reference's two profiles)")
    parser.add_argument(
        "--wake-on-request",
        action="append",
        default=[],
        metavar="PROFILE",
        help="this profile scales to zero and wakes on a request (503 with Retry-After meanwhile); repeatable",
    )
    parser.add_argument(
        "--api-port",
        type=port_number,
        default=DEFAULT_TWIN_PORT,
        help=f"port of the REST API on 127.0.0.1, OpenAPI at /openapi.json (default {DEFAULT_TWIN_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--no-sweep",
        dest="sweep",
        action="store_false",
        help="do not run the scheduled sweep (template.yaml's rate divided by --time-scale) nor deliver "
        "Step Functions status-change events to the reconciler",
    )
    parser.add_argument("--verbose", action="store_true", help="also print the Lambda handlers' logs and warnings")
    parser.set_defaults(func=_run_up)


def _fault(text: str) -> str:
    try:
        return check_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _busy(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on host:port (0: a free port is picked, never busy)."""
    if port == 0:
        return False
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _refusal(args: argparse.Namespace) -> str | None:
    """Why the twin cannot start (a busy port, named with its flag), None when it can."""
    for flag, port in (("--api-port", args.api_port), ("--port", args.port)):
        if _busy(port):
            return f"port {port} on 127.0.0.1 ({flag}) is already in use; pass {flag} 0 for a free port, or another port"
    return None


def _quiet() -> None:
    """Keep the Lambda handlers' INFO logs, their metrics and Powertools' empty-metrics warning off the terminal."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    sys.stdout = _WithoutMetrics(sys.stdout)


class _WithoutMetrics:
    """A stream without the metric lines (EMF JSON, which Lambda would ship to CloudWatch) that the
    handlers print; Powertools' single_metric prints them even with metrics disabled."""

    def __init__(self, stream: TextIO) -> None:
        self._stream, self._partial, self._lock = stream, "", threading.Lock()

    def write(self, text: str) -> int:
        """Pass on every whole line but the metrics (the handlers print from several threads)."""
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:
                if not line.startswith('{"_aws":'):
                    self._stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        """Flush the terminal."""
        self._stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _run_up(args: argparse.Namespace) -> int:
    """Start the twin, print its endpoints, echo the world's events until interrupted, then stop it."""
    from servingctl_twin.modelserver import vllm_available

    refusal = _refusal(args)
    if refusal:
        print(f"servingctl local up: error: {refusal}", file=sys.stderr)
        return EXIT_FAILED
    if args.model_server == "vllm" and not vllm_available():
        print("--model-server vllm: vLLM or the tiny model is not built; run `make vllm` first", file=sys.stderr)
        return 2
    # `servingctl start/stop/status` find the twin through the state file, with poll settings scaled to its
    # clock; a twin already recorded there keeps its place (this one is reached with --api-url).
    other = read_twin_state()
    if other is None:
        write_twin_state(None)  # starting: commands typed meanwhile wait for it
    terminal = sys.stdout
    if not args.verbose:
        _quiet()
    from servingctl_twin.twin import Twin

    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, _on_signal)
    twin = Twin(
        args.registry,
        model_server=args.model_server,
        faults=args.fault,
        time_scale=args.time_scale,
        port=args.port,
        api_port=args.api_port,
        sweep=args.sweep,
        lambda_logs_to_terminal=args.verbose,
        wake_on_request=args.wake_on_request,
    )
    try:
        twin.start()
        assert twin.api_url is not None
        if other is None:
            write_twin_state(twin.api_url, twin.scaled_poll(), twin.region, twin.endpoint_url)
        print(_banner(twin, verbose=args.verbose), flush=True)
        if other is not None:
            print(
                f"note: another twin (pid {other['pid']}, {other.get('api_url') or 'starting'}) "
                f"is the one servingctl finds by default "
                f"({twin_state_path()}); reach this one with --api-url {twin.api_url}",
                flush=True,
            )
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
        sys.stdout = terminal
    return 0


def _banner(twin: Twin, *, verbose: bool = False) -> str:
    """What runs where, how to use it, and that its state lives only as long as the process."""
    from servingctl_twin.twin import SSM_PATH

    assert twin.registry is not None
    first = next(iter(twin.registry.profiles))
    lines = [
        f"servingctl local twin is up (model server: {twin.model_server}, time scale x{twin.time_scale:g}, "
        f"faults: {', '.join(twin.faults) or 'none'})",
        f"  REST API       {twin.api_url}  (servingctl finds it; or --api-url {twin.api_url})",
        f"  AWS endpoint   {twin.endpoint_url}  (region {twin.region}, any credentials)",
        f"  registry       SSM {SSM_PATH}/ (index, pools/<name>, profiles/<name>), from {twin.source_registry}",
        f"  table, bucket  {twin.table_name}, {twin.bucket_name}",
        "  state          in memory only: stopping the twin forgets every profile state, run and ledger entry",
    ]
    for name, profile in twin.registry.profiles.items():
        lines.append(
            f"  endpoint       {name}: {profile.endpoint_url} (its ALB; header {profile.routing_header.name}: "
            f"{profile.routing_header.value})"
        )
    lines.append(f"Try: servingctl start {first} --wait    then: servingctl status {first}")
    if verbose:
        poll = json.dumps(twin.scaled_poll())
        for stem in ("start_profile", "stop_profile"):
            arn = twin.state_machines.get(stem, f"<no statemachine/{stem}.asl.json>")
            lines.append(
                f"  aws stepfunctions start-execution --endpoint-url {twin.endpoint_url} --state-machine-arn {arn} "
                f'--input \'{{"profile": "{first}", "poll": {poll}}}\''
            )
    lines.append(
        "Below: one line per change in the simulated world"
        + ("" if verbose else " (--verbose adds the Lambda logs)")
        + ". Ctrl-C stops everything."
    )
    return "\n".join(lines)
