"""The README demo (`make demo`): the user's main path, end to end, through the REST API.

Brings the local twin up in its own process (`servingctl local up`, real vLLM on CPU by default,
its output in a log file), then runs the commands a person would type: status, start --wait
(phases shown as they pass), starts (the start's timeline per phase, with a chart), bench --profile (2 input
lengths x 2 concurrencies, measured by the
worker "inside the VPC"; the report table, the cost comparison, report.md, vLLM-compatible files and
charts, the server's metrics over time), one scenario measured again and `report --compare` of the
two stored runs (intervals, verdicts, fingerprints), a saturation sweep with an SLO (the concurrency
found, its goodput, the cost per 1M output tokens at the SLO), stop --wait, and the ledger. Whatever happens, it
stops the twin (which stops every model
server), checks that none of its processes is left, and says where the files are.

    python -m servingctl_twin.demo [--model-server vllm|sim] [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from servingctl_cli.main import main as servingctl
from servingctl_twin.modelserver import free_port, vllm_available

PROFILE = "deepseek-v4-flash"  # priced in the catalog: the run gets its cost comparison
# The tiny model serves 2048 tokens of context: inputs and answers stay inside it. One worker per
# scenario: here every worker shares this machine's cores with the model server, so splitting a
# client-bound scenario cannot add client capacity (in AWS each Lambda worker has its own vCPU).
MATRIX = [
    "--input-tokens",
    "256,1024",
    "--concurrency",
    "1,4",
    "--warmup",
    "1",
    "--rounds",
    "3",
    "--max-tokens",
    "128",
    "--max-workers",
    "1",
]
# The second run repeats the busiest scenario (12 requests a side: enough for intervals; its 3
# rounds are too few for output tok/s, and the comparison says so).
AGAIN = [
    "--input-tokens",
    "256",
    "--concurrency",
    "4",
    "--warmup",
    "1",
    "--rounds",
    "3",
    "--max-tokens",
    "128",
    "--max-workers",
    "1",
]
# The saturation sweep: the highest concurrency (up to 16) at which 90 % of requests get their first
# token within 1 s and finish within 10 s, and the p90 TTFT stays under 1 s; short answers keep it
# under a minute on this machine's vLLM.
SWEEP = [
    "--input-tokens",
    "256",
    "--sweep",
    "--slo",
    "ttft_ms=1000,e2e_s=10,ttft_ms:p90=1000",
    "--slo-share",
    "0.9",
    "--sweep-max-concurrency",
    "16",
    "--warmup",
    "1",
    "--rounds",
    "2",
    "--max-tokens",
    "32",
    "--max-workers",
    "1",
]
UP_TIMEOUT_S = 180.0
STOP_GRACE_S = 60.0
# Orphans that end on their own once the twin is gone (multiprocessing's resource tracker exits when its
# last client's pipe closes, after its cleanup) get this long before they count as left running.
ORPHAN_GRACE_S = 10.0


def _say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def descendants(pid: int) -> list[int]:
    """Every live process below pid (Linux /proc): the twin's model servers run in their own sessions."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _start_time(pid: int) -> int | None:
    """When pid started (clock ticks after boot, /proc's starttime); None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, started: int | None) -> bool:
    """The process noted as (pid, started) still runs: not gone, not a zombie, and its pid not reused
    by another process since (pids wrap around on a busy machine: killing the new owner would be wrong)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and _start_time(pid) == started


class TwinProcess:
    """`servingctl local up` as a child process; stop() ends it and everything it started."""

    def __init__(self, workdir: Path, model_server: str, time_scale: float) -> None:
        self.workdir = workdir
        self.log_path = workdir / "twin.log"
        self.api_port = free_port()
        self.argv = [
            sys.executable,
            "-m",
            "servingctl_cli.main",
            "local",
            "up",
            "--model-server",
            model_server,
            "--time-scale",
            f"{time_scale:g}",
            "--port",
            str(free_port()),
            "--api-port",
            str(self.api_port),
            # The demo drives every stop itself; a sweep would race its scripted steps.
            "--no-sweep",
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.children: set[tuple[int, int | None]] = set()  # (pid, its start time)

    @property
    def api_url(self) -> str:
        """The twin's REST API."""
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        """Launch the twin and wait until its API answers (or it exits, showing its log)."""
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ.copy()
        )
        deadline = time.monotonic() + UP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the twin exited ({self.proc.returncode}):\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.api_url}/openapi.json", timeout=1, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the twin's API did not answer within {UP_TIMEOUT_S:.0f} s; see {self.log_path}")

    def remember_children(self) -> None:
        """Note the twin's current descendants (model servers), to check they are gone after stop()."""
        if self.proc is not None:
            self.children |= {(pid, _start_time(pid)) for pid in descendants(self.proc.pid)}

    def stop(self) -> list[int]:
        """SIGTERM (the twin stops its model servers, world and moto), SIGKILL after a grace period;
        returns the pids of processes that had to be killed."""
        if self.proc is None:
            return []
        self.remember_children()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while any(_alive(pid, started) for pid, started in self.children) and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = []
        for pid, started in sorted(self.children):
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed


def _run_id(directory: Path) -> str:
    """The run id of the results a `bench --profile --output DIR` wrote."""
    return json.loads((directory / "results.json").read_text())["metadata"]["run_id"]


def _run(*argv: str) -> int:
    """One servingctl command, shown as the person would type it."""
    print(f"\n$ servingctl {' '.join(argv)}", flush=True)
    return servingctl([*argv, "--local"])


def run_demo(output: Path, *, model_server: str = "vllm", time_scale: float = 20.0, workdir: Path | None = None) -> int:
    """The whole demo; returns 0 when every step succeeded and nothing was left running."""
    began = time.monotonic()
    workdir = workdir or Path(tempfile.mkdtemp(prefix="servingctl-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    saved = {key: os.environ.get(key) for key in ("XDG_CACHE_HOME", "COLUMNS", "SERVINGCTL_API_URL")}
    # The twin records where its API is under $XDG_CACHE_HOME: a private one for the demo.
    os.environ["XDG_CACHE_HOME"] = str(workdir / "cache")
    os.environ.pop("SERVINGCTL_API_URL", None)
    twin = TwinProcess(workdir, model_server, time_scale)
    steps: list[tuple[str, int]] = []
    left: list[int] = []
    try:
        _say(
            f"starting the local twin (emulated AWS, the real state machines and Lambda handlers, "
            f"model server: {model_server}, AWS's delays / {time_scale:g}); log: {twin.log_path}"
        )
        twin.start()
        steps.append(("status", _run("status")))
        _say(f"start {PROFILE}: lock, scale out, wait for capacity, task, ALB health, smoke test")
        steps.append(("start", _run("start", PROFILE, "--wait")))
        twin.remember_children()
        _say(
            "the start's timeline: each phase from its source (EC2, ECS, the containers' CloudWatch Logs with "
            "vLLM's own lines, the ALB, the smoke test), with a chart"
        )
        steps.append(("starts", _run("starts", PROFILE, "--chart", str(output / "starts.png"))))
        if steps[-1][1] == 0:
            _say("benchmark 2 input lengths x 2 concurrencies from inside the VPC (run_benchmark), then the report")
            steps.append(("bench", _run("bench", "--profile", PROFILE, *MATRIX, "--label", "demo", "--output", str(output))))
            if steps[-1][1] == 0:
                _say(
                    "measure one scenario again and compare the two stored runs: each change with its 95 % interval, "
                    "a verdict only when the interval says so, and both runs' fingerprints"
                )
                again = output / "again"
                steps.append(
                    ("bench again", _run("bench", "--profile", PROFILE, *AGAIN, "--label", "demo again", "--output", str(again)))
                )
                if steps[-1][1] == 0:
                    first, second = (_run_id(path) for path in (output, again))
                    steps.append(("compare", _run("report", second, "--compare", first, "--output", str(output / "compare"))))
            _say(
                "saturation sweep with an SLO: the highest concurrency meeting it (doubling, then bisection, stopping "
                "once the server is over-saturated), its goodput and the cost per 1M output tokens at the SLO"
            )
            steps.append(
                ("sweep", _run("bench", "--profile", PROFILE, *SWEEP, "--label", "demo sweep", "--output", str(output / "sweep")))
            )
        _say(f"stop {PROFILE}: drain, release the pool, wait for termination, close the ledger session")
        steps.append(("stop", _run("stop", PROFILE, "--wait")))
        _say("what the session cost (uptime x the instance's hourly price)")
        steps.append(("ledger", _run("costs", "ledger", "--profile", PROFILE)))
    finally:
        _say("stopping the twin and every model server")
        left = twin.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    wall = time.monotonic() - began
    failed = [name for name, code in steps if code != 0]
    print(f"\nnothing left running: {'yes' if not left else f'no, killed {left}'}")
    print(
        f"files: {output.resolve()} (report.md, results.json, vllm/*.json, output_tok_s.png, ttft.png, "
        f"server_metrics.png, starts.png; compare/: the second run against the first; "
        f"sweep/: the saturation sweep, sweep.png its search); "
        f"twin log: {twin.log_path}"
    )
    print(f"demo wall time: {wall:.0f} s; steps: " + ", ".join(f"{n} {'ok' if c == 0 else 'FAILED'}" for n, c in steps))
    (workdir / "demo.json").write_text(json.dumps({"wall_s": wall, "steps": dict(steps), "left_running": left}))
    return 1 if failed or left else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the demo."""
    parser = argparse.ArgumentParser(prog="python -m servingctl_twin.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-server",
        choices=["vllm", "sim"],
        default="vllm",
        help="the model server the twin starts for the profile (default: real vLLM on CPU)",
    )
    parser.add_argument("--output", default="demo-output", help="where the report files go (default ./demo-output)")
    parser.add_argument("--time-scale", type=float, default=20.0, help="divide AWS's delays by this (default 20)")
    args = parser.parse_args(argv)
    if args.model_server == "vllm" and not vllm_available():
        print("the real vLLM or the tiny model is not built: run `make vllm` (make demo does)", file=sys.stderr)
        return 2
    return run_demo(Path(args.output), model_server=args.model_server, time_scale=args.time_scale)


if __name__ == "__main__":
    sys.exit(main())
