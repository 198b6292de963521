"""Start-up time of the `servingctl` command, as ratios against a peer measured in the same run.

Each command runs N times (default 10) as a fresh process and the median wall time is reported,
with the median of the peer (`python -m json.tool --help`: the same interpreter starting, parsing
arguments and exiting, which is the floor any Python CLI pays) and the ratio between them:

- `servingctl --help`;
- `servingctl status` and `servingctl status NAME` against a local twin started for the run
  (`servingctl local up` on free ports, found through its state file in a temporary cache dir).

    .venv/bin/python benchmarks/cli_startup.py [--runs 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEER = [sys.executable, "-m", "json.tool", "--help"]
PROFILE = "deepseek-v4-flash"


def servingctl() -> list[str]:
    """The console script next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("servingctl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "servingctl_cli.main"]


def median_s(command: list[str], runs: int, env: dict[str, str]) -> float:
    """Median wall time of `runs` fresh processes (the first run warms the page cache and is dropped)."""
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return statistics.median(times[1:])


def start_twin(env: dict[str, str], cache: Path) -> subprocess.Popen[bytes]:
    """`servingctl local up` on free ports; returns once its state file names its API."""
    twin = subprocess.Popen(
        [*servingctl(), "local", "up", "--port", "0", "--api-port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    state = cache / "servingctl" / "twin.json"
    while not (state.exists() and "api_url" in state.read_text()):  # recorded as starting first, then with its URL
        if twin.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the twin did not come up")
        time.sleep(0.2)
    return twin


def measure(runs: int) -> dict[str, Any]:
    """Medians of the peer and of each servingctl command, and their ratios."""
    cache = Path(tempfile.mkdtemp(prefix="servingctl-startup-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "80"}
    env.pop("SERVINGCTL_API_URL", None)
    commands = {"servingctl --help": [*servingctl(), "--help"]}
    twin = start_twin(env, cache)
    try:
        commands["servingctl status"] = [*servingctl(), "status"]
        commands[f"servingctl status {PROFILE}"] = [*servingctl(), "status", PROFILE]
        peer = median_s(PEER, runs, env)
        figures = {name: median_s(command, runs, env) for name, command in commands.items()}
    finally:
        os.killpg(twin.pid, signal.SIGINT)
        twin.wait(timeout=60)
        shutil.rmtree(cache, ignore_errors=True)
    return {
        "runs": runs,
        "load_average": os.getloadavg(),
        "peer": {"command": " ".join(PEER[1:]), "median_s": peer},
        "commands": {name: {"median_s": s, "ratio_to_peer": s / peer} for name, s in figures.items()},
    }


def main() -> int:
    """Print the figures (a table, or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="processes per command (median; default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    result = measure(args.runs)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"median of {args.runs} runs, load average {', '.join(f'{x:.2f}' for x in result['load_average'])}")
    print(f"  {'python ' + result['peer']['command']:32} {result['peer']['median_s']:7.3f} s   (peer)")
    for name, figure in result["commands"].items():
        print(f"  {name:32} {figure['median_s']:7.3f} s   x{figure['ratio_to_peer']:.1f} the peer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
