"""The user's settings: `$XDG_CONFIG_HOME/servingctl/config.toml` (default `~/.config/servingctl/`),
the environment and the flags, in that order of strength (a flag beats the environment, which beats
the file), and `servingctl config`, which shows each setting, its value and where it came from.

Owns the file's keys and their checks (a bad file is an error naming the key and what it allows),
and filling a parsed command's unset flags from the environment and the file (apply()).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servingctl.wording import for_flags

OUTPUTS = ("table", "json", "yaml")
# setting -> the environment variable that sets it (beaten by the flag, beats the file).
ENV = {
    "api_url": "SERVINGCTL_API_URL",
    "region": "SERVINGCTL_REGION",
    "output": "SERVINGCTL_OUTPUT",
    "profile": "SERVINGCTL_PROFILE",
}
CONFIG_ENV = "SERVINGCTL_CONFIG"  # another file than the usual place (tests, several accounts)


class Settings(BaseModel):
    """The keys config.toml may hold, each optional."""

    model_config = ConfigDict(extra="forbid", strict=True)

    api_url: str | None = Field(None, pattern=r"^https?://\S+$")
    region: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    output: Literal["table", "json", "yaml"] | None = None
    profile: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")


# How a bad value is explained: the key, then what it allows (pydantic's pattern says a regex).
ALLOWED = {
    "api_url": "an http:// or https:// URL, e.g. https://abc123.execute-api.us-east-1.amazonaws.com/v1",
    "region": "an AWS region name, e.g. us-east-1",
    "output": "one of " + ", ".join(OUTPUTS),
    "profile": "a profile name from the registry (lowercase letters, digits and -), e.g. deepseek-v4-flash",
}


class ConfigError(Exception):
    """config.toml cannot be read or holds a bad key or value (the message names which)."""


@dataclass(frozen=True)
class Setting:
    """One setting's value and where it came from: flag, env NAME, file PATH, or default."""

    value: str | None
    source: str


def config_path() -> Path:
    """$SERVINGCTL_CONFIG, else $XDG_CONFIG_HOME/servingctl/config.toml (default ~/.config)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "servingctl" / "config.toml"


def load(path: Path | None = None) -> Settings:
    """The file's settings (all unset when there is no file); ConfigError names a bad key or value."""
    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_explained(exc)}") from None


def _explained(exc: ValidationError) -> str:
    """Each bad key with what it allows (an unknown key with the keys there are)."""
    parts = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            parts.append(f"{key}: is not a setting (allowed: {', '.join(Settings.model_fields)})")
        elif key in ALLOWED:
            parts.append(f"{key}: must be {ALLOWED[key]}; got {error.get('input')!r}")
        else:
            parts.append(for_flags([error], {}))
    return "; ".join(parts)


def resolve(name: str, flag: str | None, settings: Settings) -> Setting:
    """One setting by precedence: the flag, the environment, the file, else unset."""
    if flag is not None:
        return Setting(flag, "flag")
    env = os.environ.get(ENV[name])
    if env:
        return Setting(env, f"env {ENV[name]}")
    value = getattr(settings, name)
    if value is not None:
        return Setting(value, f"file {config_path()}")
    return Setting(None, "default")


def apply(args: argparse.Namespace) -> None:
    """Fill a parsed command's unset flags from the environment and the file (ConfigError if the
    file is bad, or the environment gives an output format that does not exist)."""
    settings = load()
    output = resolve("output", getattr(args, "output_format", None), settings)
    if output.value not in (None, *OUTPUTS):  # the flag is checked by argparse, the file by load()
        raise ConfigError(f"{ENV['output']}: must be one of {', '.join(OUTPUTS)}; got {output.value!r}")
    json_flag = getattr(args, "json", False)
    args.output_format = output.value or ("json" if json_flag else "table")
    args.output_source = output.source if output.value else "flag --json" if json_flag else "default"
    if hasattr(args, "json") and args.output_format in ("json", "yaml"):
        args.json = True  # the commands print JSON; yaml is converted from it (main.py)
    if hasattr(args, "api_url"):
        # The environment's URL is read by client.connect itself; the file's comes after it.
        if args.api_url is None and not os.environ.get(ENV["api_url"]) and not getattr(args, "local", False):
            args.api_url = settings.api_url
        args.region = resolve("region", args.region, settings).value
    if hasattr(args, "name") and getattr(args, "default_profile", False) and args.name is None:
        args.name = resolve("profile", None, settings).value
        if args.name is None:
            raise ConfigError(
                f'NAME: give a profile name, or set one with {ENV["profile"]} or `profile = "..."` in {config_path()}'
            )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `servingctl config`."""
    from servingctl_cli.client import add_output_argument
    from servingctl_cli.main import summary

    parser = subparsers.add_parser("config", help=summary("config"), description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_output_argument(parser)
    parser.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    """Each setting, its value and its source; the file's path and whether it exists."""
    settings = load()
    path = config_path()
    shown = {name: resolve(name, None, settings) for name in ENV}
    shown["output"] = Setting(args.output_format, args.output_source)
    if args.output_format != "table":
        print(
            json.dumps(
                {"file": str(path), "exists": path.exists()}
                | {k: {"value": s.value, "source": s.source} for k, s in shown.items()}
            )
        )
        return 0
    from servingctl import render

    print(render.note(f"config file: {path}" + ("" if path.exists() else " (none yet)")))
    rows = [(name, s.value or "-", s.source) for name, s in shown.items()]
    print(render.columns_with_notes(("setting", "value", "from"), rows, [None] * len(rows)))
    print(render.note("precedence: flag > environment (" + ", ".join(ENV.values()) + ") > file", prefix=""))
    return 0


def fail(command: str, exc: ConfigError) -> int:
    """A bad setting: one line and exit 2, as a bad flag."""
    print(f"servingctl {command}: error: {exc}", file=sys.stderr)
    return 2


def as_yaml(text: str) -> str:
    """A command's JSON output (one document, or one per line) as YAML documents; other text unchanged."""
    import yaml

    def dump(value: Any) -> str:
        return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)

    try:
        return dump(json.loads(text))
    except ValueError:
        pass
    try:
        documents = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        return text
    return "---\n".join(dump(document) for document in documents)
