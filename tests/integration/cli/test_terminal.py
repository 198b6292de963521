"""`servingctl` as a person uses it: in a pseudo-terminal of 80 columns (the live view of
`start --wait`, Ctrl-C sent to the process group) and piped, against `servingctl local up` run as
its own process and found through its state file."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PROFILE = "deepseek-v4-flash"  # priced in the catalog: the Ctrl-C line names its hourly price
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
CLI = [sys.executable, "-m", "servingctl.cli.main"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A twin of its own (free ports, time x100), and the environment that finds it."""
    cache = tmp_path_factory.mktemp("cache")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "SERVINGCTL_API_URL")}
    env |= {"XDG_CACHE_HOME": str(cache), "TERM": "xterm-256color"}
    log = (cache / "twin.log").open("wb")
    twin = subprocess.Popen([*CLI, "local", "up", "--port", "0", "--api-port", "0", "--time-scale", "100"], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state = cache / "servingctl" / "twin.json"
    deadline = time.monotonic() + 180
    while not state.exists():
        assert twin.poll() is None and time.monotonic() < deadline, (cache / "twin.log").read_text()[-3000:]
        time.sleep(0.2)
    yield env
    os.killpg(twin.pid, signal.SIGINT)
    assert twin.wait(timeout=120) == 0
    banner = (cache / "twin.log").read_text()
    assert '"level":"INFO"' not in banner and "UserWarning" not in banner  # quiet: no Lambda logs
    assert "in memory only" in banner


def _in_terminal(argv: list[str], env: dict[str, str], columns: int = 80) -> tuple[subprocess.Popen[bytes], int]:
    """The command on a pseudo-terminal of `columns` x 24, in its own process group."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([*CLI, *argv], env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    return proc, master


def _read_until(master: int, proc: subprocess.Popen[bytes], text: str | None, timeout_s: float) -> str:
    """What the program wrote to the terminal (escape sequences kept) until `text` appeared
    (None: until the process ended)."""
    seen = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the process ended and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        if text is not None and text in ANSI.sub("", seen.decode(errors="replace")):
            break
        if text is None and proc.poll() is not None and not ready:
            break
    return seen.decode(errors="replace")


def _piped(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], env=env | {"COLUMNS": "80"}, capture_output=True, text=True, timeout=300)


def test_ctrl_c_in_start_wait_says_what_keeps_running_and_wait_re_attaches(env: dict[str, str]) -> None:
    proc, master = _in_terminal(["start", PROFILE, "--wait"], env)
    try:
        shown = _read_until(master, proc, "capacity", timeout_s=120)
        assert "capacity" in shown, shown  # the live view is up
        os.killpg(proc.pid, signal.SIGINT)
        shown += _read_until(master, proc, None, timeout_s=60)
        assert proc.wait(timeout=60) == 130
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    # Each redraw of the live view moves the cursor: split the screen's lines there.
    rows = [row for row in ANSI.sub("\n", shown).splitlines() if row.strip()]
    print("\n".join(rows[-8:]))
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown
    [line] = [row for row in rows if row.startswith("interrupted:")]
    execution = re.search(r"servingctl wait (start-\S+);", line)
    assert execution and f"arn:aws:states:us-east-1:123456789012:execution:servingctl-start-profile:{execution[1]}" in line
    assert "g7e.12xlarge (12.17 USD/h)" in line and f"stop it: servingctl stop {PROFILE}" in line
    view = [row for row in rows if not row.startswith("interrupted:")]
    assert view and max(len(row) for row in view) <= 80, view  # the live view fits the terminal

    # Re-attaching follows the same execution to READY; a start of the READY profile starts nothing.
    attached = _piped(["wait", execution[1]], env)
    assert attached.returncode == 0 and f"{PROFILE} READY in" in attached.stdout, attached.stdout + attached.stderr
    again = _piped(["start", PROFILE, "--wait"], env)
    assert again.returncode == 0 and f"{PROFILE} is already READY since" in again.stdout, again.stdout + again.stderr
    detail = json.loads(_piped(["status", PROFILE, "--json"], env).stdout)
    assert detail["execution"].endswith(execution[1])  # still the execution that was interrupted

    status = _piped(["status", PROFILE], env)
    print(status.stdout)
    lines = status.stdout.splitlines()
    assert max(len(row) for row in lines) <= 80 and any(detail["instances"][0]["instance_id"] in row for row in lines)
    assert f"endpoint     {detail['endpoint_url']}" in status.stdout and "cost so far  0." in status.stdout

    stopped = _piped(["stop", PROFILE, "--wait"], env)
    assert stopped.returncode == 0 and f"{PROFILE} STOPPED in" in stopped.stdout, stopped.stdout + stopped.stderr
    assert "is already STOPPED since" in _piped(["stop", PROFILE], env).stdout


def test_a_second_twin_on_a_busy_port_fails_at_once_naming_it(env: dict[str, str]) -> None:
    state = json.loads((Path(env["XDG_CACHE_HOME"]) / "servingctl" / "twin.json").read_text())
    port = state["api_url"].rsplit(":", 1)[1]
    second = subprocess.run([*CLI, "local", "up", "--api-port", port, "--port", "0"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert second.returncode == 1 and f"port {port} on 127.0.0.1 (--api-port) is already in use" in second.stderr


def test_empty_lists_and_unreachable_apis_say_so(env: dict[str, str]) -> None:
    runs = _piped(["runs"], env)
    assert runs.returncode == 0 and runs.stdout.startswith("no benchmark runs yet")
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    down = _piped(["status", "--api-url", dead], env)
    assert down.returncode == 3 and f"error: cannot connect to {dead}" in down.stderr and "Traceback" not in down.stderr
