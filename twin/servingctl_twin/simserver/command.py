"""Command-line flags of the simulator, shared by ``servingctl local simserver`` and ``python -m``."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from servingctl.wording import port_number
from servingctl_twin.simserver.config import FAULTS, FaultError, SimConfig, parse_faults


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulator's flags to ``parser``."""
    defaults = SimConfig()
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=8000, help="port (default 8000)")
    parser.add_argument("--model", default=defaults.model, help=f"served model name (default {defaults.model})")
    parser.add_argument("--speed", type=float, default=1.0, help="divide every duration by X (default 1)")
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=defaults.max_num_seqs,
        help=f"sequences batched at once (default {defaults.max_num_seqs})",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=defaults.max_num_batched_tokens,
        help=f"token budget per engine step (default {defaults.max_num_batched_tokens})",
    )
    parser.add_argument(
        "--mtp-tokens",
        type=int,
        default=defaults.mtp_tokens,
        help=f"MTP draft tokens per step, 0 = off (default {defaults.mtp_tokens})",
    )
    parser.add_argument(
        "--mtp-acceptance",
        type=float,
        default=defaults.mtp_acceptance,
        help=f"draft acceptance rate (default {defaults.mtp_acceptance})",
    )
    parser.add_argument(
        "--max-model-len", type=int, default=defaults.max_model_len, help=f"context length (default {defaults.max_model_len})"
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="inject a fault (repeatable): " + "; ".join(f"{k}: {v}" for k, v in FAULTS.items()),
    )
    parser.add_argument("--fault-seed", type=int, default=0, help="seed of the fault draws (default 0)")
    parser.add_argument(
        "--debug-timings",
        action="store_true",
        help="serve GET /debug/timings: per stream, monotonic ns of arrival and first chunks sent",
    )
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=0.0,
        help="at least MS between a stream's writes, one event per write (unless --batch-writes), "
        "as a real GPU server paces them (default 0: as fast as the engine steps)",
    )
    parser.add_argument(
        "--pace-phase",
        choices=["step", "stream"],
        default="step",
        help="with --pace-ms, when streams write: step = all at the engine's step instants, as "
        "vLLM does (default); stream = each pace-ms after its own last write, out of phase",
    )
    parser.add_argument(
        "--batch-writes",
        action="store_true",
        help="each write carries every event the stream has pending; with --pace-ms, many "
        "events per read for any client (default: one event per write)",
    )
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Build the config from parsed flags (raises FaultError or ValueError naming the flag)."""
    faults = parse_faults(args.fault, seed=args.fault_seed)
    try:
        return SimConfig(
            model=args.model,
            speed=args.speed,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            mtp_tokens=args.mtp_tokens,
            mtp_acceptance=args.mtp_acceptance,
            max_model_len=args.max_model_len,
            faults=faults,
            debug_timings=args.debug_timings,
            pace_ms=args.pace_ms,
            pace_phase=args.pace_phase,
            batch_writes=args.batch_writes,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "flags"
        raise ValueError(f"{flag}: {first['msg']}") from None


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; exit code 2 with a message on bad flags."""
    try:
        config = config_from_args(args)
    except (FaultError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from servingctl_twin.simserver.server import serve  # uvicorn and the app: only to serve

    serve(args.host, args.port, config, log_level=args.log_level)
    return 0
