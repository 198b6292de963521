"""Entry point of the `servingctl` command.

Start-up is kept short: only the module of the command being run is imported (a rich table, httpx,
pydantic, boto3, the benchmark engine or matplotlib load only for the commands that use them), and
`servingctl --help` imports none of them. COMMANDS names each command's module and one-line help.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import servingctl

# command -> (module that registers it, one-line help shown by `servingctl --help`).
COMMANDS: dict[str, tuple[str, str]] = {
    "start": ("profiles", "start a serving profile (202: the start runs in Step Functions)"),
    "stop": ("profiles", "stop a serving profile (preempts a running start)"),
    "status": ("profiles", "every profile's phase, or one profile in detail"),
    "keepalive": ("profiles", "set a READY profile's lease to now + minutes"),
    "wait": ("profiles", "re-attach to a running start, stop or benchmark run and follow it"),
    "starts": ("starts", "a profile's latest starts: time per phase, p50/p90 and a chart"),
    "bench": ("bench", "benchmark an OpenAI-compatible endpoint or a deployed profile"),
    "runs": ("benchmarks", "benchmark runs stored by the control plane, newest first"),
    "report": ("report", "report a stored benchmark run, optionally against a baseline"),
    "costs": ("costs", "cost per token: self-hosted vs managed API, price catalog, ledger"),
    "local": ("local", "run parts of the system on this machine (the local twin, the simulator)"),
}


def summary(command: str) -> str:
    """The one-line help of a command (its module passes it to add_parser)."""
    return COMMANDS[command][1]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: every command listed, and the full flags of `command` (all commands when None)."""
    parser = argparse.ArgumentParser(
        prog="servingctl",
        description="Start, stop, benchmark and cost self-hosted LLM serving profiles on AWS GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"servingctl {servingctl.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = [command] if command in COMMANDS else list(COMMANDS) if command is None else []
    modules = dict.fromkeys(COMMANDS[name][0] for name in wanted)
    for module in modules:
        importlib.import_module(f"servingctl.cli.{module}").register(subparsers)
    for name, (_, text) in COMMANDS.items():
        if name not in subparsers.choices:  # listed for --help, its flags loaded only when it runs
            subparsers.add_parser(name, help=text, add_help=False)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The command word of argv ('' when there is none yet, e.g. `servingctl --help`)."""
    return next((word for word in argv if not word.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (each command's func returns an int)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # httpx imports its own command line (click, pygments, rich: about a second) when those are
    # installed, which moto's server brings; servingctl never uses it.
    # None in sys.modules makes the import raise ImportError (importlib's way to block a module).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    args = build_parser(_command(argv)).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # commands that leave something running say what themselves
        print(f"servingctl {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
