"""`servingctl` as a person uses it: in a pseudo-terminal of 80 columns (the live views of every
command that follows an execution, Ctrl-C sent to the process group) and piped, against
`servingctl local up` run as its own process and found through its state file."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PROFILE = "deepseek-v4-flash"  # priced in the catalog: the Ctrl-C line names its hourly price
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
CLI = [sys.executable, "-m", "servingctl_cli.main"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A twin of its own (free ports, time x100), and the environment that finds it."""
    cache = tmp_path_factory.mktemp("cache")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "SERVINGCTL_API_URL")}
    env |= {"XDG_CACHE_HOME": str(cache), "TERM": "xterm-256color"}
    log = (cache / "twin.log").open("wb")
    twin = subprocess.Popen(
        [*CLI, "local", "up", "--port", "0", "--api-port", "0", "--time-scale", "100"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    state = cache / "servingctl" / "twin.json"
    deadline = time.monotonic() + 180
    while not (state.exists() and "api_url" in state.read_text()):  # recorded as starting first, then with its URL
        assert twin.poll() is None and time.monotonic() < deadline, (cache / "twin.log").read_text()[-3000:]
        time.sleep(0.2)
    yield env
    os.killpg(twin.pid, signal.SIGINT)
    assert twin.wait(timeout=120) == 0
    banner = (cache / "twin.log").read_text()
    assert (
        '"level":"INFO"' not in banner and '"_aws"' not in banner and "UserWarning" not in banner
    )  # quiet: no Lambda logs, no metrics
    assert "in memory only" in banner


def _in_terminal(argv: list[str], env: dict[str, str], columns: int = 80) -> tuple[subprocess.Popen[bytes], int]:
    """The command on a pseudo-terminal of `columns` x 24, in its own process group."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        [*CLI, *argv], env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, cwd=env["XDG_CACHE_HOME"]
    )
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
    return subprocess.run(
        [*CLI, *argv], env=env | {"COLUMNS": "80"}, capture_output=True, text=True, timeout=300, cwd=env["XDG_CACHE_HOME"]
    )  # where servingctl-runs/ lands


def test_empty_lists_and_unreachable_apis_say_so(env: dict[str, str]) -> None:
    # First in this module: nothing has run on this twin yet.
    runs = _piped(["runs"], env)
    assert runs.returncode == 0 and runs.stdout.startswith("no benchmark runs yet"), runs.stdout
    runs = _piped(["runs", "--profile", PROFILE], env)
    assert runs.returncode == 0 and runs.stdout.startswith(f"no benchmark runs yet of {PROFILE}"), runs.stdout
    ledger = _piped(["costs", "ledger"], env)
    assert ledger.returncode == 0 and ledger.stdout.startswith("no sessions in the ledger yet"), ledger.stdout
    stopped = _piped(["bench", "--profile", PROFILE], env)  # a STOPPED profile: the flag that starts it is named
    assert stopped.returncode == 1 and stopped.stderr == (
        f"servingctl bench: error: profile {PROFILE} is STOPPED, not READY; pass "
        "--start to start it first (and --stop to stop it afterwards)\n"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    down = _piped(["status", "--api-url", dead], env)
    assert down.returncode == 3 and f"error: cannot connect to {dead}" in down.stderr and "Traceback" not in down.stderr


def test_a_second_twin_on_a_busy_port_fails_at_once_naming_it(env: dict[str, str]) -> None:
    state = json.loads((Path(env["XDG_CACHE_HOME"]) / "servingctl" / "twin.json").read_text())
    port = state["api_url"].rsplit(":", 1)[1]
    second = subprocess.run(
        [*CLI, "local", "up", "--api-port", port, "--port", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 1 and f"port {port} on 127.0.0.1 (--api-port) is already in use" in second.stderr


def _phase(env: dict[str, str], phase: str) -> None:
    """Bring the profile to READY or STOPPED (start/stop --wait; 'already' when it is there)."""
    done = _piped(["start" if phase == "READY" else "stop", PROFILE, "--wait"], env)
    assert done.returncode == 0 and phase in done.stdout, done.stdout + done.stderr
    assert max(map(len, done.stdout.splitlines())) <= 80, done.stdout  # the closing line with its phases too


# A small run: the runs below start their profile first (--start), which is the time Ctrl-C comes in.
BENCH = ["--input-tokens", "64", "--concurrency", "1", "--rounds", "2", "--warmup", "0", "--max-tokens", "256"]
# From this machine, long enough to be interrupted after calibrating: the twin's simulator at x100 streams
# about 14,000 tok/s to one client, so 2 x 5 x 8000 tokens take several seconds.
LONG_BENCH = ["--input-tokens", "64,128", "--concurrency", "1", "--rounds", "5", "--warmup", "0", "--max-tokens", "8000"]


@dataclass(frozen=True)
class Follow:
    """A command that follows an execution, the phase it starts from, and what Ctrl-C must say."""

    argv: list[str]
    before: str  # the profile's phase when it starts
    machine: str  # the state machine of the execution it follows
    after: str  # what `servingctl wait ID` prints once the execution ends
    stop_words: str  # how the line says to stop it
    when: str = "RUNNING"  # on screen once the follow is up (the live view's title, or a run's first line)
    setup: list[str] | None = None  # run first (piped); its output holds the id the argv's "{id}" stands for


# `wait STOP` is `wait START`'s code with `stop --wait`'s words; on the twin a stop ends in a few seconds,
# less than a second process takes to start and attach on a loaded machine, so it is not driven here.
FOLLOWS = {
    "start --wait": Follow(
        ["start", PROFILE, "--wait"],
        "STOPPED",
        "servingctl-start-profile",
        f"{PROFILE} READY in",
        f"stop it: servingctl stop {PROFILE}",
    ),
    "wait START": Follow(
        ["wait", "{id}"],
        "STOPPED",
        "servingctl-start-profile",
        f"{PROFILE} READY in",
        f"stop it: servingctl stop {PROFILE}",
        setup=["start", PROFILE],
    ),
    "stop --wait": Follow(
        ["stop", PROFILE, "--wait"],
        "READY",
        "servingctl-stop-profile",
        f"{PROFILE} STOPPED in",
        f"check: servingctl status {PROFILE}",
    ),
    "bench --profile --start --stop": Follow(
        ["bench", "--profile", PROFILE, "--start", "--stop", *BENCH],
        "STOPPED",
        "servingctl-run-benchmark",
        "output",
        "which the run stops when it ends; re-attach",
        when=f"on {PROFILE}",
    ),
    "wait RUN": Follow(
        ["wait", "{id}"],
        "STOPPED",
        "servingctl-run-benchmark",
        "output",
        "which stays up after the run; re-attach",
        when=" s] ",
        setup=["bench", "--profile", PROFILE, "--start", "--no-wait", *BENCH],
    ),
}


def _screen(shown: str) -> list[str]:
    """The terminal's lines (each redraw of a live view moves the cursor: lines are split there)."""
    return [row for row in ANSI.sub("\n", shown).splitlines() if row.strip()]


def _interrupt(argv: list[str], env: dict[str, str], when: str) -> tuple[int, list[str], str]:
    """Run argv on an 80-column terminal, press Ctrl-C once `when` is on screen; exit code, screen, raw output."""
    proc, master = _in_terminal(argv, env)
    try:
        shown = _read_until(master, proc, when, timeout_s=120)
        assert when in ANSI.sub("", shown), shown  # the follow is up
        os.killpg(proc.pid, signal.SIGINT)
        shown += _read_until(master, proc, None, timeout_s=60)
        code = proc.wait(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, _screen(shown), shown


@pytest.mark.parametrize("name", FOLLOWS)
def test_ctrl_c_in_a_follow_says_what_keeps_running_and_wait_re_attaches(name: str, env: dict[str, str]) -> None:
    case = FOLLOWS[name]
    _phase(env, case.before)
    argv = case.argv
    if case.setup:
        submitted = _piped(case.setup, env)
        found = re.search(r"servingctl wait (\S+?)[;\s]", submitted.stdout)
        assert submitted.returncode == 0 and found, submitted.stdout + submitted.stderr
        argv = [found[1] if word == "{id}" else word for word in argv]
    code, rows, shown = _interrupt(argv, env, when=case.when)
    print("\n".join(rows[-6:]))
    assert code == 130 and "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown
    [line] = [row for row in rows if row.startswith("interrupted:")]
    found = re.search(r"; re-attach: servingctl wait (\S+);", line)
    assert found, line
    execution = found[1] if case.machine != "servingctl-run-benchmark" else f"bench-{found[1]}"
    assert (
        f"it keeps running in Step Functions (arn:aws:states:us-east-1:123456789012:execution:{case.machine}:{execution})" in line
    )
    assert "a g7e.12xlarge (12.17 USD/h)" in line and case.stop_words in line, line
    view = [row for row in rows if not row.startswith("interrupted:")]
    assert view and max(len(row) for row in view) <= 80, view  # the live view fits the terminal

    # Re-attaching follows the same execution to its end.
    attached = _piped(["wait", found[1]], env)
    print(attached.stdout)
    assert attached.returncode == 0 and case.after in attached.stdout, attached.stdout + attached.stderr


def test_ctrl_c_in_a_bench_from_this_machine_says_nothing_keeps_running(env: dict[str, str]) -> None:
    _phase(env, "READY")
    detail = json.loads(_piped(["status", PROFILE, "--json"], env).stdout)
    endpoint, header = detail["endpoint_url"], detail["routing_header"].replace(": ", ":")  # the ALB routes by the header
    code, rows, shown = _interrupt(
        ["bench", "--endpoint", endpoint, "--model", PROFILE, "--header", header, *LONG_BENCH], env, when="calibrated"
    )
    assert code == 130 and "Traceback" not in shown and "KeyboardInterrupt" not in shown, shown
    assert [row for row in rows if row.startswith("interrupted:")] == [
        f"interrupted: nothing written, nothing left running (the benchmark ran from this machine against {endpoint})"
    ]


def test_status_fits_80_columns_and_start_and_stop_say_already(env: dict[str, str]) -> None:
    _phase(env, "READY")
    again = _piped(["start", PROFILE, "--wait"], env)
    assert again.returncode == 0 and f"{PROFILE} is already READY since" in again.stdout, again.stdout + again.stderr
    detail = json.loads(_piped(["status", PROFILE, "--json"], env).stdout)
    status = _piped(["status", PROFILE], env)
    print(status.stdout)
    lines = status.stdout.splitlines()
    assert max(len(row) for row in lines) <= 80 and any(detail["instances"][0]["instance_id"] in row for row in lines)
    assert f"endpoint     {detail['endpoint_url']}" in status.stdout and "cost so far  0." in status.stdout
    assert detail["execution"].rsplit(":", 1)[-1] in status.stdout

    # keepalive with about 2 h left (the default lease): 30 min would shorten it, so it is kept and said so;
    # the profile's maximum (12 h) moves it to now + 720 min; one past the maximum is refused naming the flag.
    kept = _piped(["keepalive", PROFILE, "--minutes", "30"], env)
    assert max(map(len, kept.stdout.splitlines())) <= 80, kept.stdout
    left = re.fullmatch(
        rf"{PROFILE}: lease already ends at \S+ \S+ UTC \((\d+) min from now\), later than now \+ 30 min: "
        r"kept, not shortened",
        " ".join(kept.stdout.split()),
    )  # wrapped at 80 columns
    assert kept.returncode == 0 and left and 90 <= int(left[1]) <= 120, kept.stdout
    longest = _piped(["keepalive", PROFILE, "--minutes", "720"], env)
    assert longest.returncode == 0 and longest.stdout.startswith(f"{PROFILE}: lease now ends at "), longest.stdout
    assert "(720 min from now)" in " ".join(longest.stdout.split())
    refused = _piped(["keepalive", PROFILE, "--minutes", "721"], env)
    assert refused.returncode == 1 and "--minutes must be between 1 and 720 minutes" in refused.stderr, refused.stderr

    _phase(env, "STOPPED")
    assert "is already STOPPED since" in _piped(["stop", PROFILE], env).stdout
