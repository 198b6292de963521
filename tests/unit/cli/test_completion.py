"""`servingctl completion`: the bash script run by bash's own completion machinery (COMP_WORDS,
COMP_CWORD, the function `complete` registered), profile names from the cache `status` keeps or
from the API, and the fish and zsh scripts made from the same parser."""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import servingctl_cli.runs  # noqa: F401 - bound `connect` at import: imported before a test patches it
from servingctl_cli import client, completion
from servingctl_cli.main import COMMANDS, main, plugins

NAMES = ["deepseek-v4-flash", "nemotron-nano"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SERVINGCTL_API_URL", raising=False)
    return tmp_path


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def complete(bash_script: str, words: list[str], cache: Path) -> list[str]:
    """What bash offers for the last word, through the function the script registered with `complete`."""
    path = cache / "servingctl.bash"
    path.write_text(bash_script)
    bindir = Path(sys.executable).parent  # the `servingctl` the script calls for profile names
    program = (
        f"source {path}\n"
        'func=$(complete -p servingctl | sed -E "s/.*-F ([^ ]+) .*/\\1/")\n'
        'COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n'
        '"$func"; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(["bash", "-c", program, "bash", *words], capture_output=True, text=True, env=env, check=True)
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_subcommands_flags_and_choices(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bash = script("bash", capsys)
    assert complete(bash, ["servingctl", ""], cache) == [*COMMANDS, *plugins()]  # the twin adds `local`
    assert complete(bash, ["servingctl", "st"], cache) == ["start", "stop", "status", "starts"]
    assert complete(bash, ["servingctl", "costs", ""], cache) == ["compare", "slo", "simulate", "prices", "ledger", "idle"]
    assert complete(bash, ["servingctl", "status", "--wa"], cache) == ["--watch"]
    assert complete(bash, ["servingctl", "--output", ""], cache) == ["table", "json", "yaml"]
    assert complete(bash, ["servingctl", "-o", "yaml", "runs", "--out"], cache) == ["--output"]  # a flag's value skipped
    assert complete(bash, ["servingctl", "status", "--output", "j"], cache) == ["json"]
    assert complete(bash, ["servingctl", "local", "up", "--model-server", ""], cache) == ["sim", "vllm"]
    assert complete(bash, ["servingctl", "completion", ""], cache) == ["bash", "zsh", "fish"]


def test_bash_completes_profile_names_from_the_cache_status_keeps(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bash = script("bash", capsys)
    assert complete(bash, ["servingctl", "start", ""], cache) == []  # no cache, no API: nothing, no error
    answer = [
        {
            "name": n,
            "phase": "STOPPED",
            "pool": "p",
            "model": "m",
            "endpoint_url": "http://alb",
            "routing_header": f"X-LLM-Profile: {n}",
            "instance_type": "t",
        }
        for n in NAMES
    ]
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=answer))
    monkeypatch.setattr(client, "connect", lambda args: client.Client("http://127.0.0.1:1", local=True, transport=transport))
    assert main(["status"]) == 0
    capsys.readouterr()
    assert json.loads(completion.cache_path().read_text()) == NAMES
    assert complete(bash, ["servingctl", "start", ""], cache) == NAMES
    assert complete(bash, ["servingctl", "stop", "n"], cache) == ["nemotron-nano"]
    assert complete(bash, ["servingctl", "bench", "--profile", "d"], cache) == ["deepseek-v4-flash"]
    assert complete(bash, ["servingctl", "start", "nemotron-nano", ""], cache) == []  # NAME given once


def test_a_stale_cache_is_refreshed_from_the_api_and_kept_when_the_api_is_down(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    completion.remember_profiles(["old-profile"])
    fresh = time.time() - completion.PROFILES_FRESH_S + 60
    os.utime(completion.cache_path(), (fresh, fresh))
    assert completion.profile_names() == ["old-profile"]  # fresh enough: no request
    stale = time.time() - completion.PROFILES_FRESH_S - 1
    os.utime(completion.cache_path(), (stale, stale))
    assert completion.profile_names() == ["old-profile"]  # no API: the last names known
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=[{"name": n} for n in NAMES]))
    monkeypatch.setattr(client, "connect", lambda args: client.Client("http://127.0.0.1:1", local=True, transport=transport))
    assert completion.profile_names() == NAMES
    assert json.loads(completion.cache_path().read_text()) == NAMES


def test_zsh_runs_the_same_completion_through_bashcompinit(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zsh = script("zsh", capsys)
    bash = script("bash", capsys)
    assert zsh.splitlines()[1:3] == ["autoload -U +X compinit && compinit", "autoload -U +X bashcompinit && bashcompinit"]
    assert zsh.endswith(bash)


def shell(name: str) -> str:
    """The shell's binary (`make shells` installs zsh and fish): a missing one fails the test, not skips it."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: run `make shells` (Debian's zsh and fish)")
    return found


def shell_env(cache: Path) -> dict[str, str]:
    """servingctl on PATH (the scripts call it for profile names), the profile names cached, no user rc files."""
    completion.remember_profiles(NAMES)
    bindir = Path(sys.executable).parent
    return {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "XDG_CACHE_HOME": str(cache),
        "XDG_CONFIG_HOME": str(cache / "config"),
        "HOME": str(cache),
        "ZDOTDIR": str(cache),
        "TERM": "dumb",
    }


def _typed(master: int, proc: subprocess.Popen[bytes], keys: str, until: str, seen: bytes = b"") -> str:
    """Type keys on the shell's terminal; what it shows until `until` appears (a liveness bound: 30 s)."""
    os.write(master, keys.encode())
    deadline = time.monotonic() + 30
    while until.encode() not in seen:
        assert proc.poll() is None and time.monotonic() < deadline, seen.decode(errors="replace")
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            seen += os.read(master, 65536)
    return seen.decode(errors="replace")


def test_zsh_completes_profile_names_at_tab_in_an_interactive_zsh(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cache / "servingctl.zsh"
    path.write_text(script("zsh", capsys))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [shell("zsh"), "-f", "-i"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=shell_env(cache),
        start_new_session=True,
        cwd=Path(__file__).parents[3],  # the repository: files a fallback to file names would list
    )
    os.close(slave)
    try:
        _typed(master, proc, f"PS1='> '; source {path}; echo LOADED\n", "LOADED\r\n")
        # One profile starts with n: Tab completes it on the line, with the space after it.
        assert "servingctl stop nemotron-nano " in _typed(master, proc, "servingctl stop n\t", "nemotron-nano ")
        # Two names: Tab lists both (no files of the directory).
        listed = _typed(master, proc, "\x15servingctl start \t", "nemotron-nano\r\n")
        assert "deepseek-v4-flash  nemotron-nano" in listed.split("servingctl start ", 1)[1] and "Makefile" not in listed
        # Subcommands and a flag's choices, from the same tables as bash.
        assert "servingctl costs ledger " in _typed(master, proc, "\x15servingctl costs le\t", "ledger ")
        assert "--output json " in _typed(master, proc, "\x15servingctl status --output j\t", "json ")
    finally:
        proc.kill()
        proc.wait()
        os.close(master)


def fish_completes(fish_script: Path, line: str, cache: Path) -> list[str]:
    """What fish's own `complete -C` offers for the line, the script sourced (each candidate's first field)."""
    program = f"source {fish_script}; complete -C {shlex.quote(line)}"
    done = subprocess.run(
        [shell("fish"), "--no-config", "-c", program],
        capture_output=True,
        text=True,
        env=shell_env(cache),
        check=True,
        timeout=60,
    )
    return [row.split("\t")[0] for row in done.stdout.splitlines()]


def test_fish_completes_profile_names_subcommands_and_choices(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = cache / "servingctl.fish"
    path.write_text(script("fish", capsys))
    assert fish_completes(path, "servingctl start ", cache) == NAMES
    assert fish_completes(path, "servingctl stop n", cache) == ["nemotron-nano"]
    assert fish_completes(path, "servingctl costs le", cache) == ["ledger"]
    assert fish_completes(path, "servingctl status --output j", cache) == ["json"]


def test_fish_has_a_line_per_command_flag_and_choice(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fish = script("fish", capsys).splitlines()
    for command in COMMANDS:
        assert any(line.startswith(f"complete -c servingctl -n __fish_use_subcommand -a {command} -d ") for line in fish), command
    assert "complete -c servingctl -n '__fish_seen_subcommand_from status' -l watch -r -d" in "\n".join(fish)
    assert any("-l output -r -a 'table json yaml'" in line for line in fish)
    assert any(
        line.startswith("complete -c servingctl -n '__fish_seen_subcommand_from start' -a '(servingctl completion --profiles")
        for line in fish
    )


def test_no_shell_is_one_line_and_exit_2(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion"]) == 2
    assert capsys.readouterr().err == "servingctl completion: error: name a shell: bash, zsh or fish\n"
