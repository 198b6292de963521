"""The config file, its precedence (flag > environment > file), --output table|json|yaml and
`status --watch`, as a person uses them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import servingctl_cli.runs  # noqa: F401 - bound `connect` at import: imported before a test patches it
from servingctl_cli import client, config, profiles
from servingctl_cli.main import main

PROFILES = [
    {
        "name": "nemotron-nano",
        "phase": "STOPPED",
        "pool": "g7e-1gpu",
        "model": "nvidia/Nemotron-Nano",
        "endpoint_url": "http://internal-alb.example",
        "routing_header": "X-LLM-Profile: nemotron-nano",
        "instance_type": "g7e.2xlarge",
        "hourly_usd": None,
        "lease_deadline": None,
        "last_error": None,
    }
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty per-user config place, no settings in the environment; returns the config file's path."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in [*config.ENV.values(), config.CONFIG_ENV]:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "config" / "servingctl" / "config.toml"
    path.parent.mkdir(parents=True)
    return path


def requests_to(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    """Every request's (URL, path, profile asked) once commands connect; the API answers the profile list."""
    seen: list[tuple[str, str, str | None]] = []

    def connect(args: Any) -> client.Client:
        def answer(request: httpx.Request) -> httpx.Response:
            seen.append((args.api_url, request.url.path, getattr(args, "region", None)))
            if request.url.path == "/profiles":
                return httpx.Response(200, json=PROFILES)
            profile = request.url.path.rstrip("/").split("/")[-2]
            already = {"execution_arn": None, "execution_id": None, "profile": profile, "action": "stop", "joined": False}
            return httpx.Response(200, json={**already, "already": True, "phase": "STOPPED", "message": "already STOPPED"})

        return client.Client(args.api_url or "http://127.0.0.1:1", local=True, transport=httpx.MockTransport(answer))

    monkeypatch.setattr(client, "connect", connect)
    return seen


def test_the_file_is_in_the_usual_place_and_says_where_each_setting_comes_from(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(home.parent.parent.parent))
    assert config.config_path() == home.parent.parent.parent / ".config" / "servingctl" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home.parent.parent))
    home.write_text('region = "eu-west-1"\noutput = "json"\nprofile = "nemotron-nano"\n')
    monkeypatch.setenv("SERVINGCTL_PROFILE", "deepseek-v4-flash")
    assert main(["config", "--output", "yaml"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["file"] == str(home) and shown["exists"] is True
    assert shown["region"] == {"value": "eu-west-1", "source": f"file {home}"}
    assert shown["profile"] == {"value": "deepseek-v4-flash", "source": "env SERVINGCTL_PROFILE"}
    assert shown["output"] == {"value": "yaml", "source": "flag"}
    assert shown["api_url"] == {"value": None, "source": "default"}


def test_precedence_is_flag_then_environment_then_file(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = requests_to(monkeypatch)
    home.write_text('api_url = "https://file.example/v1"\nregion = "eu-west-1"\nprofile = "nemotron-nano"\noutput = "json"\n')
    assert main(["stop"]) == 0  # everything from the file
    assert seen[-1] == ("https://file.example/v1", "/v1/profiles/nemotron-nano/stop", "eu-west-1")
    assert json.loads(capsys.readouterr().out)["already"] is True  # output = "json"

    monkeypatch.setenv("SERVINGCTL_PROFILE", "deepseek-v4-flash")
    monkeypatch.setenv("SERVINGCTL_REGION", "ap-northeast-1")
    monkeypatch.setenv("SERVINGCTL_OUTPUT", "table")
    monkeypatch.setenv("SERVINGCTL_API_URL", "https://env.example/v1")
    assert main(["stop"]) == 0  # the environment beats the file
    # the file's URL is not applied: client.connect reads $SERVINGCTL_API_URL itself
    assert seen[-1] == (None, "/profiles/deepseek-v4-flash/stop", "ap-northeast-1")
    assert capsys.readouterr().out == "already STOPPED\n"

    assert main(["stop", "other", "--region", "us-west-2", "--api-url", "https://flag.example/v1", "--output", "json"]) == 0
    assert seen[-1] == ("https://flag.example/v1", "/v1/profiles/other/stop", "us-west-2")  # flags beat both
    assert json.loads(capsys.readouterr().out)["message"] == "already STOPPED"


def test_without_a_name_anywhere_the_error_says_how_to_give_one(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests_to(monkeypatch)
    assert main(["start"]) == 2
    assert (
        f'NAME: give a profile name, or set one with SERVINGCTL_PROFILE or `profile = "..."` in {home}' in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('output = "xml"', "output: must be one of table, json, yaml; got 'xml'"),
        ('outptu = "json"', "outptu: is not a setting (allowed: api_url, region, output, profile)"),
        ('region = "Europe"', "region: must be an AWS region name, e.g. us-east-1; got 'Europe'"),
        ("region = 1", "region: must be an AWS region name, e.g. us-east-1; got 1"),
        ('api_url = "ftp://x"', "api_url: must be an http:// or https:// URL"),
        ('profile = "Big Model"', "profile: must be a profile name from the registry"),
        ("output = ", "not valid TOML"),
    ],
)
def test_a_bad_file_names_the_key_and_what_it_allows(
    text: str, said: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.write_text(text + "\n")
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servingctl status: error: {home}: ") and said in err and err.count("\n") == 1


def test_a_bad_output_in_the_environment_is_named(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVINGCTL_OUTPUT", "csv")
    assert main(["config"]) == 2
    assert "SERVINGCTL_OUTPUT: must be one of table, json, yaml; got 'csv'" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["before", "after"])
def test_output_yaml_and_json_give_the_same_data(
    where: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    requests_to(monkeypatch)
    flags = {fmt: (["--output", fmt, "status"] if where == "before" else ["status", "--output", fmt]) for fmt in ("json", "yaml")}
    assert main(flags["json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(flags["yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json == PROFILES
    assert main(["status", "--output", "table"]) == 0
    assert capsys.readouterr().out.startswith("PROFILE")


def test_watch_prints_again_until_ctrl_c_and_ends_with_0(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = requests_to(monkeypatch)
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) % 3 == 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(profiles.time, "sleep", sleep)
    monkeypatch.setattr(profiles._status, "__defaults__", (sleep,))
    assert main(["status", "--watch", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("--- ") == 3 and out.count("nemotron-nano") == 3  # a pipe gets each in turn, stamped
    assert naps == [5, 5, 5] and len(seen) == 3
    assert main(["status", "--watch", "--output", "json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [PROFILES] * 3 and naps[3:] == [2, 2, 2]  # the default: 2 s


@pytest.mark.parametrize(("seconds", "ok"), [("1", True), ("0", False), ("3600", True), ("3601", False)])
def test_watch_interval_limits(seconds: str, ok: bool, capsys: pytest.CaptureFixture[str]) -> None:
    if ok:
        assert profiles._watch_seconds(seconds) == int(seconds)
        return
    with pytest.raises(SystemExit) as ended:
        main(["status", "--watch", seconds])
    assert ended.value.code == 2
    assert f"argument --watch: {seconds} must be from 1 to 3600 seconds" in capsys.readouterr().err


def test_watch_refuses_yaml(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    requests_to(monkeypatch)
    assert main(["status", "--watch", "--output", "yaml"]) == 2
    assert "--watch prints a table or JSON lines (--output table|json), not yaml" in capsys.readouterr().err
