"""Entry point of the `servingctl` command: collects the command groups of servingctl.cli.*."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import servingctl
import servingctl.cli


def build_parser() -> argparse.ArgumentParser:
    """Build the parser from every servingctl.cli module that defines register(subparsers)."""
    parser = argparse.ArgumentParser(
        prog="servingctl",
        description="Start, stop, benchmark and cost self-hosted LLM serving profiles on AWS GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"servingctl {servingctl.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(servingctl.cli.__path__), key=lambda m: m.name):
        if info.name == "main":
            continue
        module = importlib.import_module(f"servingctl.cli.{info.name}")
        if hasattr(module, "register"):
            module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit code (each command's func returns an int)."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
