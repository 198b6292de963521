"""The start timeline as a person sees it: `start --wait` in a real terminal (tmux, the pane read
back as it redraws) and piped, `status` during a start, and `servingctl starts` with its chart,
against `servingctl local up` run as its own process."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PROFILE = "nemotron-nano"
CLI = [sys.executable, "-m", "servingctl_cli.main"]
# Phases every start on the twin passes (the world's instance, task, prefetch and model server).
PHASES = (
    "instance boot and ECS registration",
    "image pull",
    "weights prefetch",
    "API server up",
    "ALB health checks",
    "smoke test first token",
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A twin of its own (free ports, time x100) and the environment that finds it."""
    cache = tmp_path_factory.mktemp("cache")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "SERVINGCTL_API_URL", "TMUX")}
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
    while not (state.exists() and "api_url" in state.read_text()):
        assert twin.poll() is None and time.monotonic() < deadline, (cache / "twin.log").read_text()[-3000:]
        time.sleep(0.2)
    yield env
    os.killpg(twin.pid, signal.SIGINT)
    assert twin.wait(timeout=120) == 0


def _piped(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv], env=env | {"COLUMNS": "80"}, capture_output=True, text=True, timeout=300, cwd=env["XDG_CACHE_HOME"]
    )


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """A tmux server of the test's own: its own socket (never the user's server), in the foreground (-D).

    A daemonised server needs /dev/null to be a character device (glibc's daemon() checks), which some
    sandboxes do not give; a foreground server runs anywhere a pty can be opened.
    """
    assert shutil.which("tmux"), "tmux not found: the live display is tested in a real terminal (apt-get install tmux)"
    socket, config = tmp_path / "tmux.sock", tmp_path / "tmux.conf"
    config.write_text("")
    server = subprocess.Popen(
        ["tmux", "-S", str(socket), "-f", str(config), "-D"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def run(*argv: str) -> str:
        done = subprocess.run(["tmux", "-S", str(socket), *argv], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"tmux {argv[0]}: exit {done.returncode}: {done.stderr}"
        return done.stdout

    deadline = time.monotonic() + 30
    while not socket.exists():
        assert server.poll() is None and time.monotonic() < deadline, f"tmux server: {server.communicate()[0]!r}"
        time.sleep(0.05)
    yield run
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, timeout=30)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def test_start_wait_in_a_terminal_shows_phases_as_they_complete_with_the_eta(
    env: dict[str, str], tmux: Callable[..., str]
) -> None:
    # A first start and stop give the profile a past start, so the second one has an ETA.
    first = _piped(["start", PROFILE, "--wait"], env)
    assert first.returncode == 0 and f"{PROFILE} READY in" in first.stdout, first.stdout + first.stderr
    assert _piped(["stop", PROFILE, "--wait"], env).returncode == 0

    session = f"servingctl-test-{uuid.uuid4().hex[:8]}"
    command = " ".join([*CLI, "start", PROFILE, "--wait"]) + "; echo EXIT=$?; sleep 120"
    exports = [f"{k}={v}" for k, v in env.items() if k in ("XDG_CACHE_HOME", "TERM", "PYTHONPATH", "PATH", "HOME")]
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "80",
        "-y",
        "30",
        "-c",
        env["XDG_CACHE_HOME"],
        "env",
        *exports,
        "sh",
        "-c",
        command,
    )
    screens: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while not screens or "EXIT=" not in screens[-1]:
            assert time.monotonic() < deadline, screens[-1] if screens else "no screen"
            screens.append(tmux("capture-pane", "-p", "-t", session))
            time.sleep(0.2)
    finally:
        tmux("kill-session", "-t", session)
    final = screens[-1]
    print(final)
    assert "EXIT=0" in final and f"{PROFILE} READY in" in final, final
    # While it ran: the phase in progress and READY's ETA from the past start, redrawn in place.
    during = [s for s in screens if "RUNNING" in s]
    # (read as text: at 80 columns a long phase name wraps the line)
    assert any(re.search(r"> now: .+; READY in ~\d+ s \(p50 of 1 past starts\)", " ".join(s.split())) for s in during), during[-1]
    # Phases appear as they complete: the screens show more of them as the start goes on.
    counts = [sum(label in s for label in PHASES) for s in during]
    assert counts == sorted(counts) and counts[0] < max(counts), counts
    # The last screen: every phase with how long it took, when, and what the past start took.
    for label in PHASES:
        row = next(line for line in final.splitlines() if line.strip().startswith(label))
        assert re.search(r"\d+\.\d s\s+\d+\.\d s\s+\d+\.\d s$", row), row
    assert _piped(["stop", PROFILE, "--wait"], env).returncode == 0


def test_start_wait_piped_prints_one_line_per_phase_and_status_shows_the_current_one(env: dict[str, str]) -> None:
    # A past start first (with -n, this module's tests may each have a twin of their own).
    assert _piped(["start", PROFILE, "--wait"], env).returncode == 0
    assert _piped(["stop", PROFILE, "--wait"], env).returncode == 0
    submitted = _piped(["start", PROFILE], env)
    execution = re.search(r"servingctl wait (\S+)", submitted.stdout)
    assert submitted.returncode == 0 and execution, submitted.stdout
    status = ""
    for _ in range(100):  # until the start has passed a phase (a liveness bound)
        status = _piped(["status", PROFILE], env).stdout
        if "  start " in status and " done at +" in status:
            break
        time.sleep(0.1)
    assert re.search(r"  start\s+\S.* done at \+\d+ s; now: ", " ".join(status.split("\n"))), status
    followed = _piped(["wait", execution[1]], env)
    lines = followed.stdout.splitlines()
    print(followed.stdout)
    assert followed.returncode == 0 and f"{PROFILE} READY in" in followed.stdout
    shown = [line for line in lines if re.match(r"\[ *-?\d+\.\d s\]   ", line)]
    labels = [re.sub(r"^\[ *-?\d+\.\d s\]   (.*?) \d+\.\d s.*$", r"\1", line) for line in shown]
    assert [label for label in labels if label in PHASES] == list(PHASES)  # in the order they passed, each once
    assert all(re.search(r"\(p50 \d+\.\d s\)$", line) for line in shown)  # past starts: the phase's median
    assert max(len(line) for line in lines) <= 80
    assert _piped(["stop", PROFILE, "--wait"], env).returncode == 0


def test_starts_lists_past_starts_with_p50_p90_and_writes_a_chart(env: dict[str, str]) -> None:
    for _ in range(2):  # (with -n, this module's tests may each have a twin of their own)
        assert _piped(["start", PROFILE, "--wait"], env).returncode == 0
        assert _piped(["stop", PROFILE, "--wait"], env).returncode == 0
    listed = _piped(["starts", PROFILE, "--chart", "starts.png"], env)
    print(listed.stdout)
    assert listed.returncode == 0, listed.stderr
    found = re.search(rf"^{PROFILE}: (\d+) start\(s\), \1 READY", listed.stdout)
    assert found and int(found[1]) >= 2, listed.stdout
    assert len(re.findall(r"^\d\d-\d\d \d\d:\d\d\s+READY\s+\d+\.\d", listed.stdout, re.M)) == int(found[1])
    for label in PHASES:
        assert re.search(rf"^\s*\d+\.\d\s+\d+\.\d\s+\d+\.\d  {label}$", listed.stdout, re.M), label
    chart = Path(env["XDG_CACHE_HOME"]) / "starts.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and listed.stdout.rstrip().endswith(f"chart: {chart.name}")
    # --limit at its bounds and one past them.
    assert _piped(["starts", PROFILE, "--limit", "1", "--json"], env).returncode == 0
    assert _piped(["starts", PROFILE, "--limit", "100", "--json"], env).returncode == 0
    for refused, why in (("0", "--limit must be at least 1"), ("101", "--limit must be at most 100")):
        answer = _piped(["starts", PROFILE, "--limit", refused], env)
        assert answer.returncode == 1 and why in answer.stderr, answer.stderr
