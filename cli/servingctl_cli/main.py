"""Entry point of the `servingctl` command.

Start-up is kept short: only the module of the command being run is imported (a rich table, httpx,
pydantic, boto3, the benchmark engine or matplotlib load only for the commands that use them), and
`servingctl --help` imports none of them. COMMANDS names each command's module and one-line help;
other distributions add commands through the `servingctl.commands` entry points (the twin adds
`local`), each a module with HELP and register().
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

import servingctl

# command -> (module that registers it, one-line help shown by `servingctl --help`).
EXIT_PIPE = 2  # a closed pipe ends as a usage error does: one line on stderr, exit 2

COMMANDS: dict[str, tuple[str, str]] = {
    "start": ("profiles", "start a serving profile (202: the start runs in Step Functions)"),
    "stop": ("profiles", "stop a serving profile (preempts a running start)"),
    "status": ("profiles", "every profile's phase, or one profile in detail"),
    "keepalive": ("profiles", "set a READY profile's lease to now + minutes"),
    "wait": ("profiles", "re-attach to a running start, stop or benchmark run and follow it"),
    "starts": ("starts", "a profile's latest starts: time per phase, p50/p90 and a chart"),
    "bench": ("bench", "benchmark an OpenAI-compatible endpoint or a deployed profile"),
    "runs": ("runs", "benchmark runs stored by the control plane, newest first"),
    "report": ("report", "report a stored benchmark run, optionally against a baseline"),
    "costs": ("costs", "cost per token: self-hosted vs managed API, price catalog, ledger"),
    "config": ("config", "the settings in effect (flag > environment > config file) and where each comes from"),
    "completion": ("completion", "a shell completion script: servingctl completion bash|zsh|fish"),
    "doctor": ("doctor", "check what a first start needs: credentials, stack, quota, AMI, weights, network, API"),
    "weights": ("weights", "upload a model's weights to the S3 location its profile syncs from"),
    "endpoint": ("endpoint", "a profile's URL and header, with curl and OpenAI SDK snippets"),
    "logs": ("logs", "a profile's model server logs from CloudWatch Logs, optionally followed"),
}
PLUGIN_GROUP = "servingctl.commands"


def summary(command: str) -> str:
    """The one-line help of a command (its module passes it to add_parser)."""
    return COMMANDS[command][1]


def plugins() -> dict[str, str]:
    """Commands other installed distributions add: command -> module (the twin's `local`)."""
    return {point.name: point.value for point in entry_points(group=PLUGIN_GROUP) if point.name not in COMMANDS}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: every command listed, and the full flags of `command` (all commands when None)."""
    parser = argparse.ArgumentParser(
        prog="servingctl",
        description="Start, stop, benchmark and cost self-hosted LLM serving profiles on AWS GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"servingctl {servingctl.__version__}")
    parser.add_argument(
        "-o",
        "--output",
        dest="output_format",
        choices=("table", "json", "yaml"),
        help="output format of every command (default: $SERVINGCTL_OUTPUT, the config file's output, else table)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    added = plugins()
    modules = {name: f"servingctl_cli.{module}" for name, (module, _) in COMMANDS.items()} | added
    wanted = [command] if command in modules else list(modules) if command is None else []
    for module in dict.fromkeys(modules[name] for name in wanted):
        importlib.import_module(module).register(subparsers)
    for name, (_, text) in COMMANDS.items():
        if name not in subparsers.choices:  # listed for --help, its flags loaded only when it runs
            subparsers.add_parser(name, help=text, add_help=False)
    for name, module in added.items():
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=importlib.import_module(module).HELP, add_help=False)
    return parser


def _command(argv: Sequence[str]) -> str:
    """The command word of argv ('' when there is none yet, e.g. `servingctl --help`)."""
    words = iter(argv)
    for word in words:
        if word in ("-o", "--output"):  # the global flag's value is not the command
            next(words, None)
        elif not word.startswith("-"):
            return word
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (each command's func returns an int)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # httpx imports its own command line (click, pygments, rich: about a second) when those are
    # installed, which moto's server brings; servingctl never uses it.
    # None in sys.modules makes the import raise ImportError (importlib's way to block a module).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    args = build_parser(_command(argv)).parse_args(argv)
    from servingctl_cli import config  # after parsing: `--help` loads no pydantic

    try:
        config.apply(args)
    except config.ConfigError as exc:
        return config.fail(args.command, exc)
    try:
        code = _yaml(args) if args.output_format == "yaml" else int(args.func(args) or 0)
        sys.stdout.flush()  # a reader gone after the last line is found here, not at exit
        return code
    except KeyboardInterrupt:  # commands that leave something running say what themselves
        print(f"servingctl {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _pipe_closed(args.command)


def _yaml(args: argparse.Namespace) -> int:
    """Run the command with JSON output and print that as YAML."""
    import contextlib
    import io

    from servingctl_cli.config import as_yaml

    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            code = int(args.func(args) or 0)
    finally:  # what was printed before an interrupt is still shown
        sys.stdout.write(as_yaml(buffer.getvalue()))
    return code


def _pipe_closed(command: str) -> int:
    """The reader of stdout went away (`servingctl status | head -1`): one line, exit 2."""
    import os

    # Python flushes stdout again at exit and would print its own traceback: point it at /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    print(f"servingctl {command}: error: output closed early (the reading end of the pipe went away)", file=sys.stderr)
    return EXIT_PIPE


if __name__ == "__main__":
    sys.exit(main())
