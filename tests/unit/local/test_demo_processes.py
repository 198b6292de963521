"""The demo's check that nothing it started is left running: a noted process counts as left only
while the same process (pid and start time) runs, never a later process that got its pid."""

from __future__ import annotations

import subprocess

from servingctl.local.demo import _alive, _start_time


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
