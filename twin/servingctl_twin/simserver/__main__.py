"""``python -m servingctl_twin.simserver``: same flags as ``servingctl local simserver``."""

from __future__ import annotations

import argparse
import sys

from servingctl_twin.simserver.command import add_arguments, run


def main() -> int:
    """Parse the flags and serve."""
    parser = argparse.ArgumentParser(
        prog="python -m servingctl_twin.simserver", description="OpenAI-compatible simulator of a vLLM server."
    )
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
