"""The demo's check that nothing it started is left running: a noted process counts as left only
while the same process (pid and start time) runs, never a later process that got its pid."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from servingctl_twin import demo
from servingctl_twin.demo import _alive, _start_time


def test_a_noted_process_is_alive_until_it_ends_and_a_reused_pid_is_not_it() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    started = _start_time(proc.pid)
    try:
        assert started is not None and _alive(proc.pid, started)
        # the same pid with another start time is another process: what a wrapped-around pid looks like
        assert not _alive(proc.pid, started - 1)
    finally:
        proc.kill()
        proc.wait()
    assert not _alive(proc.pid, started) and _start_time(proc.pid) is None


def test_an_orphan_that_ends_within_the_grace_is_not_left_one_that_stays_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "ORPHAN_GRACE_S", 3.0)
    twin = demo.TwinProcess(tmp_path, "sim", 50.0)
    twin.proc = subprocess.Popen(["true"])  # the twin itself has exited
    twin.proc.wait()
    cleaning = subprocess.Popen(["sleep", "1"])  # ends on its own, like multiprocessing's resource tracker
    staying = subprocess.Popen(["sleep", "60"])
    twin.children = {(p.pid, _start_time(p.pid)) for p in (cleaning, staying)}
    monkeypatch.setattr(twin, "remember_children", lambda: None)
    try:
        assert twin.stop() == [staying.pid]
    finally:
        staying.kill()
        for proc in (cleaning, staying):
            proc.wait()
