"""The twin's commands in `servingctl` (its `servingctl.commands` entry point): the one-line help that
`servingctl --help` lists without loading the twin, and the parser, loaded from command.py only when
`servingctl local ...` runs."""

from __future__ import annotations

import argparse

HELP = "run parts of the system on this machine (the local twin, the simulator)"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``local`` command group (servingctl_twin.command)."""
    from servingctl_twin.command import register as register_local

    register_local(subparsers)
