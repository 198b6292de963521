"""The command line's own environment variables, read through one object (the product's functions
read theirs through servingctl.shared.environment). A plain dataclass: every command, `--help`
included, reads it, and pydantic would cost each of them its import."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

API_URL_ENV = "SERVINGCTL_API_URL"
API_KEY_ENV = "SERVINGCTL_API_KEY"
PRICES_ENV = "SERVINGCTL_PRICES"
STACK_ENV = "SERVINGCTL_STACK"


@dataclass(frozen=True)
class CliSettings:
    """What the environment tells a command: where the API is, the model server's key, a price file,
    and where the CLI keeps its state."""

    api_url: str | None
    api_key: str | None
    prices: str | None
    cache_home: Path
    stack: str | None = None  # the SAM stack doctor, weights and logs read (default: samconfig.toml's name)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CliSettings:
        """The settings as the environment sets them now (default: this process's)."""
        source = os.environ if env is None else env
        return cls(
            api_url=source.get(API_URL_ENV) or None,
            api_key=source.get(API_KEY_ENV) or None,
            prices=source.get(PRICES_ENV) or None,
            cache_home=Path(source.get("XDG_CACHE_HOME") or Path.home() / ".cache"),
            stack=source.get(STACK_ENV) or None,
        )


def add_prices_argument(parser: argparse.ArgumentParser) -> None:
    """--prices FILE, defaulting to $SERVINGCTL_PRICES (the commands that price something)."""
    parser.add_argument(
        "--prices",
        default=CliSettings.from_env().prices,
        help=f"price file overriding the packaged catalog (default ${PRICES_ENV})",
    )
