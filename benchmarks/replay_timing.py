"""How closely `servingctl bench --replay SPEED` keeps a trace's schedule, against the floor of this
machine's timers measured in the same run.

A trace of N requests (default 500) with Poisson timestamps at `--trace-rate` per second (seeded;
short prompts, 16 output tokens each) is written as JSONL and replayed at each `--speeds` (default
1, 4, 16) against the simulator (`servingctl_twin.simserver`, its own process, fast enough that no
request waits: `--concurrency` N caps nothing). Each request's send time (results.json's
`t_start_ns`, taken when its bytes are written) is compared with the file's schedule: (its timestamp
- the first one's) / SPEED after the first request's send. Errors are given in ms (p50, p99, max;
negative = early). The peer: a bare event loop in this process (uvloop, as the CLI's) sleeping to
the same schedule as servingctl's scheduler does, with no HTTP at all, just before servingctl's run:
what the machine's timers and scheduler alone cost.
The 1-minute load average is printed next to every row: the machine may be shared.

    .venv/bin/python benchmarks/replay_timing.py [--requests 500] [--speeds 1,4,16] [--output FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from servingctl.loadgen import aio
from servingctl.loadgen.outputs import read_results
from servingctl.loadgen.stats import summarize

ROOT = Path(__file__).resolve().parents[1]
MODEL = "replay-timing"


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def servingctl() -> list[str]:
    """The console script next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("servingctl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "servingctl_cli.main"]


def trace_timestamps(count: int, rate: float, seed: int) -> list[float]:
    """Poisson arrivals at `rate`/s from an arbitrary origin (t=1000 s: replay counts from the first)."""
    rng = random.Random(seed)
    t, out = 1000.0, []
    for _ in range(count):
        out.append(round(t, 6))
        t += rng.expovariate(rate)
    return out


def write_trace(path: Path, timestamps: list[float], seed: int) -> Path:
    """The trace as JSONL: a short prompt of 4 to 40 words and 16 output tokens per line."""
    rng = random.Random(seed + 1)
    lines = [{"prompt": " ".join(["word"] * rng.randint(4, 40)), "output_tokens": 16, "timestamp": t} for t in timestamps]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def start_simulator(port: int, log: Path) -> subprocess.Popen:
    """The simulator in its own process, waited until healthy (speed 1000: no request waits long)."""
    cmd = [sys.executable, "-m", "servingctl_twin.simserver", "--port", str(port), "--model", MODEL]
    cmd += ["--speed", "1000", "--max-num-seqs", "1024", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"simulator not healthy after 60 s (log {log})")


def errors_ms(sent_s: list[float], planned_s: list[float]) -> list[float]:
    """Each send's error against the schedule, both measured from the first request, in ms."""
    return [((s - sent_s[0]) - p) * 1e3 for s, p in zip(sent_s, planned_s, strict=True)]


def bare_loop_errors(planned_s: list[float]) -> list[float]:
    """The peer: a bare event loop (uvloop, as the CLI's) sleeping to the same absolute schedule the way
    servingctl's scheduler does (monotonic clock, asyncio.sleep), its wake-up errors in ms."""

    async def run() -> list[float]:
        start, woke = time.monotonic(), []
        for offset in planned_s:
            delay = start + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            woke.append(time.monotonic())
        return woke

    return errors_ms(aio.run(run()), planned_s)


def replay(url: str, trace: Path, speed: float, requests: int, out: Path) -> tuple[list[float], dict[str, Any]]:
    """`servingctl bench --replay SPEED` on the trace; each request's send time (s, scenario clock) in send
    order, and the scenario's client self-check."""
    cmd = [*servingctl(), "bench", "--endpoint", url, "--model", MODEL, "--dataset", str(trace), "--replay", f"{speed:g}"]
    cmd += ["--dataset-output-tokens", "dataset", "--concurrency", str(requests), "--warmup", "0", "--output", str(out), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"servingctl bench --replay {speed:g} exited {done.returncode}:\n{done.stderr[-3000:]}")
    scenario = read_results(out).scenarios[0]
    if scenario.summary.failed:
        raise SystemExit(f"--replay {speed:g}: {scenario.summary.failed} failed requests")
    records = sorted(scenario.records, key=lambda r: r.index)  # index = order of sending
    client = scenario.summary.client
    return [r.t_start_ns / 1e9 for r in records], {"client_bound": client.client_bound, "host_busy": client.host_busy}


def stats(errors: list[float]) -> dict[str, float | None]:
    """p50, p99, max and min of the errors (ms)."""
    s = summarize(errors)
    return {"p50_ms": s.median, "p99_ms": s.p99, "max_ms": s.max, "min_ms": s.min}


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every speed in turn: the bare loop's errors, then servingctl's, against the trace's schedule."""
    timestamps = trace_timestamps(args.requests, args.trace_rate, args.seed)
    trace = write_trace(work / "trace.jsonl", timestamps, args.seed)
    port = free_port()
    sim = start_simulator(port, work / "simulator.log")
    rows = []
    try:
        for speed in args.speeds:
            planned = [(t - timestamps[0]) / speed for t in timestamps]
            load_before = os.getloadavg()[0]
            peer = bare_loop_errors(planned)
            print(f"--replay {speed:g}: {planned[-1]:.1f} s of trace ...", file=sys.stderr, flush=True)
            sent, client = replay(f"http://127.0.0.1:{port}", trace, speed, args.requests, work / f"replay-{speed:g}")
            rows.append(
                {
                    "speed": speed,
                    "schedule_s": planned[-1],
                    "ours": stats(errors_ms(sent, planned)),
                    "bare_loop": stats(peer),
                    "load_avg": [load_before, os.getloadavg()[0]],
                    **client,
                }
            )
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    return {
        "benchmark": "replay_timing",
        "command": " ".join([".venv/bin/python", "benchmarks/replay_timing.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "requests": args.requests,
            "trace_rate": args.trace_rate,
            "seed": args.seed,
            "trace_s": timestamps[-1] - timestamps[0],
        },
        "rows": rows,
    }


def print_table(report: dict[str, Any]) -> None:
    """Send-time error against the file's schedule per speed, servingctl next to the bare loop."""
    st = report["settings"]
    print(
        f"send-time error vs the file's schedule, ms: {st['requests']} requests, Poisson at {st['trace_rate']:g}/s "
        f"({st['trace_s']:.0f} s of trace), {report['machine']['cpus']} CPUs"
    )
    print(f"{'speed':>5} {'schedule s':>10}  {'ours p50 / p99 / max':>24}  {'bare loop p50 / p99 / max':>26}  load avg  flags")
    for row in report["rows"]:
        o, b = row["ours"], row["bare_loop"]
        flags = " ".join(f for f, on in (("CLIENT-BOUND", row["client_bound"]), ("HOST BUSY", row["host_busy"])) if on)
        print(
            f"{row['speed']:>5g} {row['schedule_s']:>10.1f}  {o['p50_ms']:>6.2f} / {o['p99_ms']:>6.2f} / {o['max_ms']:>6.2f}  "
            f"  {b['p50_ms']:>6.2f} / {b['p99_ms']:>6.2f} / {b['max_ms']:>6.2f}  "
            f"{row['load_avg'][0]:>4.1f} -> {row['load_avg'][1]:.1f}  {flags or '-'}"
        )


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=500, help="requests in the trace (default 500)")
    p.add_argument("--trace-rate", type=float, default=10.0, help="the trace's Poisson rate, requests/s (default 10)")
    p.add_argument("--speeds", default="1,4,16", help="replay speeds, comma-separated (default 1,4,16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the trace (default 0)")
    p.add_argument("--work-dir", help="keep the trace and the runs here (default: a new temporary directory)")
    p.add_argument("--output", default=str(ROOT / ".cache/bench/replay_timing.json"), help="JSON results path")
    args = p.parse_args(argv)
    args.speeds = [float(s) for s in args.speeds.split(",")]
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="replay-timing-"))
    work.mkdir(parents=True, exist_ok=True)
    report = measure(args, work)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print_table(report)
    print(f"JSON: {out}   runs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
