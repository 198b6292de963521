"""``servingctl local ...``: the local twin's commands (the simulator model server so far)."""

from __future__ import annotations

import argparse

from servingctl.local.simserver import command as simserver_command


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``local`` command group and its subcommands."""
    local = subparsers.add_parser("local", help="run parts of the system on this machine")
    local_sub = local.add_subparsers(dest="local_command", metavar="SUBCOMMAND", required=True)
    _register_simserver(local_sub)


def _register_simserver(local_sub: argparse._SubParsersAction) -> None:
    parser = local_sub.add_parser(
        "simserver",
        help="OpenAI-compatible model server simulating the reference vLLM deployment",
        description="Serve /v1/chat/completions, /tokenize, /health, /version, /v1/models and /metrics "
        "with vLLM's shapes and the reference deployment's timing (divided by --speed).",
    )
    simserver_command.add_arguments(parser)
    parser.set_defaults(func=simserver_command.run)
