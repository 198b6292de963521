"""How `servingctl bench --processes N` stops early, against the simulator over real HTTP: Ctrl-C as
a terminal sends it (to the whole process group, while the spread processes are still starting),
and a process that dies without a word."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servingctl.loadgen.runner import run_benchmark
from servingctl.schema.results import RunConfig
from servingctl_twin.simserver import Faults, SimConfig, running

MODEL = SimConfig().model


def _catching_sigint(pgid: int) -> int:
    """How many multiprocessing children of the process group are up far enough to turn SIGINT into
    KeyboardInterrupt (Python installed its handler: SigCgt in Linux's /proc status)."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            in_group = int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pgid
            if in_group and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
                status = (stat.parent / "status").read_text()
                count += bool(int(status.split("SigCgt:")[1].split()[0], 16) & 1 << (signal.SIGINT - 1))
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    return count


def _group_gone(pgid: int, timeout_s: float) -> bool:
    """Whether every process of the group ended within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_as_the_spread_starts_prints_no_traceback_and_leaves_no_process():
    # Ctrl-C at a terminal goes to the whole process group: the processes still importing the engine
    # get it too. Sent as soon as the scenario says it starts over 2 processes (they start for seconds).
    with running(SimConfig(speed=20, faults=Faults(stall_s=60))) as url:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servingctl_cli.main",
                "bench",
                "--endpoint",
                url,
                "--model",
                MODEL,
                "--input-tokens",
                "256",
                "--concurrency",
                "4",
                "--mode",
                "sustained",
                "--requests",
                "8",
                "--warmup",
                "0",
                "--max-tokens",
                "24",
                "--processes",
                "2",
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            # A shell's background job starts with SIGINT ignored, and so would the CLI: Ctrl-C as at a terminal.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if "over 2 processes" in line:
                    break
            deadline = time.monotonic() + 30
            while _catching_sigint(proc.pid) < 2 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            os.killpg(proc.pid, signal.SIGINT)  # both processes are up and still importing the engine
            err = "".join(seen) + proc.stderr.read()
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert "over 2 processes" in err and code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert f"interrupted: nothing written, nothing left running (the benchmark ran from this machine against {url})" in err
    assert _group_gone(proc.pid, 15)  # no process of the run is left (nor multiprocessing's resource tracker)


def test_a_process_killed_mid_run_is_named_counting_from_1_and_the_other_stopped():
    with running(SimConfig(speed=20, faults=Faults(stall_s=60))) as url:  # every stream stalls
        config = RunConfig(
            endpoint=url,
            model=MODEL,
            input_tokens=[256],
            concurrencies=[4],
            mode="sustained",
            requests=8,
            warmup=0,
            max_tokens=24,
            timeout_s=120.0,
        )

        async def kill_the_second() -> list:
            task = asyncio.create_task(run_benchmark(config, processes=2))
            deadline = time.monotonic() + 60
            while len(multiprocessing.active_children()) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            # started in order, named SpawnProcess-<n> with n counting up: the last one is the second process
            second = max(multiprocessing.active_children(), key=lambda p: int(p.name.rsplit("-", 1)[1]))
            os.kill(second.pid, signal.SIGKILL)  # as the out-of-memory killer would
            with pytest.raises(RuntimeError, match=re.escape("process 2 of 2 ended (exit code -9) without its measurement")):
                await task
            return multiprocessing.active_children()

        assert asyncio.run(kill_the_second()) == []
