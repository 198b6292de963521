"""Client overhead of `servingctl bench` against `vllm bench serve`, measured in the same run.

Both clients stream from the same fast simulator (`servingctl_twin.simserver`, high speed factor,
max-num-seqs twice the largest concurrency, no MTP so every chunk carries one token: the most
chunks per token, a client's worst case), one client process each (all concurrencies in it), one
client at a time, on loopback only, under two load shapes, the goals' (issue 13):

- flood: many events per read, for either client: the simulator writes every event a stream has
  pending at most every `--flood-flush-ms` (`--batch-writes`, each stream in its own phase), so a
  client's per-event cost counts;
- paced: one event per write every `--pace-ms`, all streams at the same step instants, as a GPU
  server writes them (vLLM's engine advances every running sequence in one step; against vLLM on
  CPU, a client saw bursts of one read per stream within 0.5-3 ms): one event per read, so a
  client's per-read cost counts fully;

and two reported but not a goal's:

- paced-stream: paced, but each stream `--pace-ms` after its own last write, out of phase (as from
  many servers behind one load balancer): the same reads spread evenly, the most wake-ups;
- eager: one event per write as fast as the engine steps. How many events a read brings is then
  the client's own doing (a client that keeps up reads one or two, a saturated one dozens), so
  this shape compares unlike work; its events per read are printed with it (ours, from the chunk
  stamps).

1. Client CPU per 1M streamed tokens, per load shape and concurrency: `phase_cpu.py` runs each
   client in-process and logs the CPU (user + sys, all threads) of each measured phase:
   servingctl's run_scenario, vLLM's benchmark(). Start-up (vLLM's client imports torch and loads a
   tokenizer) is left out of the ratio and reported separately as whole-process CPU (os.wait4).
2. TTFT measurement error, from the paced run (neither client saturated: a saturated client's TTFT
   is its own queueing, which servingctl flags as client_bound anyway): the simulator runs with
   --debug-timings and reports, per stream, when the request's first bytes arrived and when it wrote
   the first chunk / first content chunk. Error = the client's TTFT - the server's (first content
   written - arrived): loopback both ways plus what the client adds. Matched by cache_salt
   (servingctl: run-scenario-index) and x-request-id (vLLM: prefix + index). vLLM's TTFT counts the
   role chunk, so it is compared with the first chunk written.

The load average before and after each shape is printed next to its ratios: the machine may be shared.

`--user-run` measures instead what a user's run costs against a real vLLM on CPU (measure_user_run):
servingctl bench's defaults against as many requests of vllm bench serve, whole process tree and
load phase CPU per 1M tokens. `--sharegpt [FILE]` does the same with both clients reading one
ShareGPT file (measure_dataset_run), and checks that they sent the same requests.

Usage (repository root, main venv; the vLLM venv and the tiny model come from `make vllm`):
    .venv/bin/python benchmarks/client_overhead.py --output .cache/bench/client_overhead.json
    .venv/bin/python benchmarks/client_overhead.py --user-run --concurrency 64 --max-tokens 128 --input-tokens 128
    .venv/bin/python benchmarks/client_overhead.py --sharegpt --concurrency 64 --num-prompts 300 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from servingctl.loadgen.metrics import per_read
from servingctl.loadgen.outputs import read_results
from servingctl.loadgen.outputs.vllm_compat import to_vllm
from servingctl.loadgen.stats import summarize

ROOT = Path(__file__).resolve().parents[1]
PHASE_CPU = ROOT / "benchmarks" / "phase_cpu.py"
UNIT = "This is deterministic benchmark input text. "
GOAL_SHAPES = ("flood", "paced")  # paced-stream and eager are reported, not judged (module docstring)
# vLLM's client strips every read before joining it to the previous ones (endpoint_request_func.py,
# StreamedResponseHandler), so a read that ends between an event's two newlines glues two events
# together and json.loads fails (seen once: 1 of 1,024 requests, flood at 256 streams). Those
# requests are counted and reported, not fatal; their tokens are left out of vLLM's count (its
# CPU per token is then high by at most that share). Any other failure stops the run.
VLLM_SPLIT_BUG = "JSONDecodeError"


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cores(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(the simulator's cores, the clients' cores) when pinned: the simulator stands in for a server
    host of its own, so it gets the first core and the clients the others; (None, None) unpinned."""
    available = sorted(os.sched_getaffinity(0))
    if not pin or len(available) < 2:
        return None, None
    return {available[0]}, set(available[1:])


def run_process(cmd: list[str], env: dict[str, str], timeout_s: float, log: Path, cpus: set[int] | None) -> float:
    """Run a client (on `cpus`) to completion; return its user + sys CPU seconds (os.wait4). Fails loudly."""
    deadline = time.monotonic() + timeout_s
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise SystemExit(f"client timed out after {timeout_s:.0f} s (log {log})")
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"client failed with exit code {proc.returncode}; log {log}:\n{log.read_text()[-3000:]}")
    return usage.ru_utime + usage.ru_stime


def phases(log: Path) -> dict[int, dict]:
    """phase_cpu.py's log, keyed by concurrency."""
    return {row["concurrency"]: row for row in map(json.loads, log.read_text().splitlines())}


def run_ours(
    url: str,
    model: str,
    concurrencies: list[int],
    load: list[str],
    max_tokens: int,
    prompts: list[str],
    out: Path,
    timeout_s: float,
    cpus: set[int] | None,
) -> tuple[dict[int, dict], float]:
    """`servingctl bench` with `load` (the flags of its load shape; [] is a user's defaults) and `prompts`
    (the flags choosing them: --input-tokens N, or a --dataset), every concurrency in one process;
    returns its phases and its whole process tree's CPU seconds."""
    log = out.with_suffix(".phases.jsonl")
    cmd = [
        sys.executable,
        str(PHASE_CPU),
        str(log),
        "servingctl",
        "--endpoint",
        url,
        "--model",
        model,
        *prompts,
        "--concurrency",
        ",".join(map(str, concurrencies)),
        *load,
        "--max-tokens",
        str(max_tokens),
        "--max-failure-rate",
        "0",
        "--output",
        str(out),
        "--json",
    ]
    cpu = run_process(cmd, dict(os.environ), timeout_s, out.with_suffix(".log"), cpus)
    failed = [r for s in read_results(out).scenarios for r in s.records if not r.ok]
    if failed:
        raise SystemExit(f"servingctl bench: {len(failed)} failed requests, e.g. {failed[0].error}")
    return phases(log), cpu


def sharegpt_file(path: Path, count: int, repetitions: int) -> Path:
    """A ShareGPT-shaped dataset of unique prompts (vLLM's `random` dataset would re-align every prompt
    through the server's /tokenize, a per-request cost it does not pay against a real vLLM)."""
    rows = [
        {"conversations": [{"from": "human", "value": f"{i} " + UNIT * repetitions}, {"from": "gpt", "value": "ok ok ok ok"}]}
        for i in range(count)
    ]
    path.write_text(json.dumps(rows))
    return path


def run_vllm(
    vllm_python: str,
    url: str,
    model: str,
    concurrencies: list[int],
    requests: dict[int, int],
    max_tokens: int | None,
    dataset: Path,
    out: Path,
    timeout_s: float,
    cpus: set[int] | None,
) -> tuple[dict[int, dict], dict[int, dict], float]:
    """`vllm bench serve` (openai-chat backend, ShareGPT-shaped prompts, in file order), every concurrency
    in one process; `max_tokens` None: each request's output length is its reference answer's tokens."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "phases.jsonl"
    cmd = [vllm_python, str(PHASE_CPU), str(log), "vllm"]
    for i, c in enumerate(concurrencies):
        cmd += ["--next"] if i else []
        cmd += [
            "--backend",
            "openai-chat",
            "--base-url",
            url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            model,
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            str(dataset),
            *(["--sharegpt-output-len", str(max_tokens)] if max_tokens is not None else []),
            "--disable-shuffle",
            "--num-prompts",
            str(requests[c]),
            "--max-concurrency",
            str(c),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--temperature",
            "0",
            "--request-id-prefix",
            f"ovh-c{c}-",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(out),
            "--result-filename",
            f"c{c}.json",
        ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    cpu = run_process(cmd, env, timeout_s, out / "client.log", cpus)
    results = {c: json.loads((out / f"c{c}.json").read_text()) for c in concurrencies}
    for c, result in results.items():
        errors = [error for error in result["errors"] if error]
        others = [error for error in errors if VLLM_SPLIT_BUG not in error]
        if others or len(errors) != result["failed"]:
            raise SystemExit(f"vllm bench serve c={c}: {result['failed']} failed requests: {(others or errors)[:2]}")
    return phases(log), results, cpu


def vllm_parse_failures(results: dict[int, dict]) -> dict[int, int]:
    """Per concurrency, the requests vLLM's own client failed to parse (VLLM_SPLIT_BUG)."""
    return {c: sum(1 for error in result["errors"] if VLLM_SPLIT_BUG in error) for c, result in results.items()}


def ttft_errors_ours(results_dir: Path, timings: dict[str, dict], concurrency: int) -> list[float]:
    """Per request at one concurrency: servingctl's TTFT - the simulator's (first content sent - received), ms."""
    run = read_results(results_dir)
    errors = []
    for scenario in (s for s in run.scenarios if s.summary.concurrency == concurrency):
        for r in scenario.records:
            truth = timings.get(f"{run.metadata.run_id}-{scenario.summary.name}-{r.index}")
            if truth and r.ttft_ms is not None and truth["first_content_sent_ns"] is not None:
                errors.append(r.ttft_ms - (truth["first_content_sent_ns"] - truth["received_ns"]) / 1e6)
    return errors


def ttft_errors_vllm(result: dict, concurrency: int, timings: dict[str, dict]) -> list[float]:
    """Per request: vLLM's TTFT (role chunk) - the simulator's (first chunk sent - received), ms."""
    errors = []
    for i, ttft_s in enumerate(result["ttfts"]):
        truth = timings.get(f"ovh-c{concurrency}-{i}")
        if truth and truth["first_chunk_sent_ns"] is not None:
            errors.append(ttft_s * 1e3 - (truth["first_chunk_sent_ns"] - truth["received_ns"]) / 1e6)
    return errors


def ttft_split_vllm(result: dict, concurrency: int, timings: dict[str, dict]) -> dict:
    """Where vLLM's TTFT error sits: request in flight (client start -> server received) and first
    chunk in flight (server sent -> client read). Exact: perf_counter is CLOCK_MONOTONIC on Linux."""
    send, receive = [], []
    for i, (start_s, ttft_s) in enumerate(zip(result["start_times"], result["ttfts"], strict=False)):
        truth = timings.get(f"ovh-c{concurrency}-{i}")
        if truth and truth["first_chunk_sent_ns"] is not None:
            send.append(truth["received_ns"] / 1e6 - start_s * 1e3)
            receive.append((start_s + ttft_s) * 1e3 - truth["first_chunk_sent_ns"] / 1e6)
    return {"request_to_server_ms": error_stats(send), "first_chunk_to_client_ms": error_stats(receive)}


def ttft_split_ours(results_dir: Path, timings: dict[str, dict], concurrency: int) -> dict:
    """The same split for servingctl, whose records are relative to the scenario start: that start's
    monotonic instant is estimated as the smallest (server received - client start), so the
    request-side figures are lower bounds (the fastest request counts as 0 ms in flight)."""
    run = read_results(results_dir)
    pairs = []
    for scenario in (s for s in run.scenarios if s.summary.concurrency == concurrency):
        for r in scenario.records:
            truth = timings.get(f"{run.metadata.run_id}-{scenario.summary.name}-{r.index}")
            if truth and r.t_first_ns is not None and truth["first_content_sent_ns"] is not None:
                pairs.append((r, truth))
    if not pairs:
        return {}
    t0 = min(t["received_ns"] - r.t_start_ns for r, t in pairs)
    return {
        "request_to_server_ms": error_stats([(t["received_ns"] - t0 - r.t_start_ns) / 1e6 for r, t in pairs]),
        "first_chunk_to_client_ms": error_stats([(t0 + r.t_first_ns - t["first_content_sent_ns"]) / 1e6 for r, t in pairs]),
    }


def error_stats(errors: list[float]) -> dict:
    """Count, min, median, p90, p99 and max of TTFT errors (ms)."""
    s = summarize(errors)
    return {"count": s.count, "min_ms": s.min, "median_ms": s.median, "p90_ms": s.p90, "p99_ms": s.p99, "max_ms": s.max}


def fetch_timings(client: httpx.Client, keep: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """The simulator's per-stream ground truth (also kept in `keep`), keyed by cache_salt and x-request-id."""
    streams = client.get("/debug/timings").json()["streams"]
    keep.write_text(json.dumps(streams))
    return (
        {s["cache_salt"]: s for s in streams if s["cache_salt"]},
        {s["x_request_id"]: s for s in streams if s["x_request_id"]},
    )


def start_simulator(
    port: int, model: str, speed: float, writes: list[str], max_seqs: int, log: Path, cpus: set[int] | None
) -> subprocess.Popen:
    """The simulator in its own process (its CPU is not the clients'), on `cpus`, waited until healthy;
    `writes` are its write-shape flags (--pace-ms, --batch-writes)."""
    cmd = [
        sys.executable,
        "-m",
        "servingctl_twin.simserver",
        "--port",
        str(port),
        "--model",
        model,
        "--speed",
        str(speed),
        "--max-num-seqs",
        str(max_seqs),
        "--max-num-batched-tokens",
        str(max(8192, max_seqs)),
        "--mtp-tokens",
        "0",
        *writes,
        "--debug-timings",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
    if cpus:
        os.sched_setaffinity(proc.pid, cpus)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"simulator did not become healthy; log {log}:\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Stop a process we started, by its handle."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_both(
    args: argparse.Namespace,
    model: str,
    work: Path,
    writes: list[str],
    concurrencies: list[int],
    ours_load: list[str],
    vllm_requests: dict[int, int],
    max_tokens: int,
) -> dict:
    """Both clients, one after the other, against one fresh simulator writing as `writes` says."""
    work.mkdir(parents=True, exist_ok=True)
    dataset = sharegpt_file(work / "sharegpt.json", max(vllm_requests.values()), max(1, args.input_tokens // 8))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    load_before = os.getloadavg()
    server_cpus, client_cpus = cores(args.pin)
    sim = start_simulator(port, model, args.speed, writes, max(concurrencies) * 2, work / "simulator.log", server_cpus)
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            print(f"{work.name}: servingctl bench, concurrency {concurrencies} ...", file=sys.stderr, flush=True)
            ours, ours_cpu = run_ours(
                url,
                model,
                concurrencies,
                ["--mode", "sustained", *ours_load, "--warmup", "0"],
                max_tokens,
                ["--input-tokens", str(args.input_tokens)],
                work / "ours",
                args.timeout,
                client_cpus,
            )
            by_salt, _ = fetch_timings(client, work / "timings-ours.json")
            print(f"{work.name}: vllm bench serve, the same ...", file=sys.stderr, flush=True)
            vllm, vllm_results, vllm_cpu = run_vllm(
                args.vllm_python,
                url,
                model,
                concurrencies,
                vllm_requests,
                max_tokens,
                dataset,
                work / "vllm",
                args.timeout,
                client_cpus,
            )
            _, by_request_id = fetch_timings(client, work / "timings-vllm.json")
    finally:
        stop(sim)
    return {
        "ours": ours,
        "ours_cpu": ours_cpu,
        "vllm": vllm,
        "vllm_cpu": vllm_cpu,
        "vllm_results": vllm_results,
        "vllm_parse_failures": vllm_parse_failures(vllm_results),
        "by_salt": by_salt,
        "by_request_id": by_request_id,
        "ours_dir": work / "ours",
        "load_avg": {"before": load_before, "after": os.getloadavg()},
    }


def events_per_read(results_dir: Path) -> dict[int, float]:
    """servingctl's token chunks per network read at each concurrency (chunks of one read share its stamp)."""
    out = {}
    for scenario in read_results(results_dir).scenarios:
        chunks = sum(len(r.chunks) for r in scenario.records)
        reads = sum(len(per_read(r.chunks)) for r in scenario.records)
        out[scenario.summary.concurrency] = chunks / reads if reads else 0.0
    return out


def client_bound(results_dir: Path) -> dict[str, bool]:
    """servingctl's own verdict per scenario: was the client the bottleneck?"""
    return {s.summary.name: s.summary.client_bound for s in read_results(results_dir).scenarios}


def ratio_rows(boths: list[dict], concurrencies: list[int]) -> list[dict]:
    """CPU seconds per 1M streamed tokens of each client and their ratio, per concurrency: medians
    over the repeats (each pair measured back to back on one simulator), with the ratios' range."""
    rows = []
    for c in concurrencies:
        ours = [both["ours"][c]["cpu_s"] / both["ours"][c]["tokens"] * 1e6 for both in boths]
        vllm = [both["vllm"][c]["cpu_s"] / both["vllm"][c]["tokens"] * 1e6 for both in boths]
        ratios = [o / v for o, v in zip(ours, vllm, strict=True)]
        rows.append(
            {
                "concurrency": c,
                "ours": {"cpu_s_per_1m_tokens": statistics.median(ours), "each": ours},
                "vllm": {"cpu_s_per_1m_tokens": statistics.median(vllm), "each": vllm},
                "ratio_ours_to_vllm": statistics.median(ratios),
                "ratios": ratios,
            }
        )
    return rows


def ttft_rows(boths: list[dict], concurrencies: list[int]) -> list[dict]:
    """TTFT error of both clients at each concurrency, over every paced repeat; where it sits
    (request and first chunk in flight) from the first."""
    rows = []
    for c in concurrencies:
        first = boths[0]
        rows.append(
            {
                "concurrency": c,
                "ours": error_stats([e for b in boths for e in ttft_errors_ours(b["ours_dir"], b["by_salt"], c)]),
                "vllm": error_stats([e for b in boths for e in ttft_errors_vllm(b["vllm_results"][c], c, b["by_request_id"])]),
                "ours_split": ttft_split_ours(first["ours_dir"], first["by_salt"], c),
                "vllm_split": ttft_split_vllm(first["vllm_results"][c], c, first["by_request_id"]),
            }
        )
    return rows


def measure(args: argparse.Namespace, concurrencies: list[int], model: str, work: Path) -> dict:
    """The three load shapes with both clients in this run (see the module docstring); TTFT error
    from the paced run, where neither client is saturated (a saturated client's TTFT is its own queueing)."""
    started = time.monotonic()
    flood_requests = max(2 * max(concurrencies), math.ceil(args.tokens_per_run / args.max_tokens))
    # Paced: every stream slot keeps sending for --paced-seconds (ours: --duration; vLLM: as many
    # requests as fit), so per-scenario fixed costs weigh alike on both clients.
    request_s = args.paced_max_tokens * args.pace_ms / 1000
    per_slot = max(1, math.ceil(args.paced_seconds / request_s))
    plans = {
        "flood": (
            ["--batch-writes", "--pace-ms", str(args.flood_flush_ms), "--pace-phase", "stream"],
            ["--requests", str(flood_requests)],
            dict.fromkeys(concurrencies, flood_requests),
            args.max_tokens,
        ),
        "paced": (
            ["--pace-ms", str(args.pace_ms), "--pace-phase", "step"],
            ["--duration", f"{(per_slot - 0.5) * request_s:g}"],
            {c: per_slot * c for c in concurrencies},
            args.paced_max_tokens,
        ),
        "paced-stream": (
            ["--pace-ms", str(args.pace_ms), "--pace-phase", "stream"],
            ["--duration", f"{(per_slot - 0.5) * request_s:g}"],
            {c: per_slot * c for c in concurrencies},
            args.paced_max_tokens,
        ),
        "eager": ([], ["--requests", str(flood_requests)], dict.fromkeys(concurrencies, flood_requests), args.max_tokens),
    }
    runs: dict[str, list[dict]] = {name: [] for name in plans}
    for repeat in range(args.repeat):  # the shapes in turn, so a slow spell of the machine spreads over all
        for name, (writes, ours_load, vllm_requests, max_tokens) in plans.items():
            work_dir = work / f"{name}-{repeat + 1}"
            runs[name].append(run_both(args, model, work_dir, writes, concurrencies, ours_load, vllm_requests, max_tokens))
    shapes = {name: ratio_rows(runs[name], concurrencies) for name in plans}
    ttft_at = [c for c in args.ttft_concurrencies if c in concurrencies]
    ttft = ttft_rows(runs["paced"], ttft_at)
    run = read_results(runs["flood"][0]["ours_dir"])
    exported = set(to_vllm(run, run.scenarios[0]))
    whole: dict[str, dict[str, dict[str, float]]] = {}
    for name, boths in runs.items():
        whole[name] = {}
        for client in ("ours", "vllm"):
            cpu = sum(b[f"{client}_cpu"] for b in boths)
            tokens = sum(p["tokens"] for b in boths for p in b[client].values())
            whole[name][client] = {"cpu_s": cpu, "cpu_s_per_1m_tokens": cpu / tokens * 1e6}
    return {
        "benchmark": "client_overhead",
        "command": " ".join([".venv/bin/python", "benchmarks/client_overhead.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "max_tokens": args.max_tokens,
            "paced_max_tokens": args.paced_max_tokens,
            "pace_ms": args.pace_ms,
            "flood_flush_ms": args.flood_flush_ms,
            "paced_seconds": args.paced_seconds,
            "input_tokens": args.input_tokens,
            "speed": args.speed,
            "flood_requests_per_concurrency": flood_requests,
            "simulator": "mtp off, max-num-seqs 2 x max concurrency",
            "cores": {k: sorted(v) if v else "any" for k, v in zip(("simulator", "clients"), cores(args.pin), strict=True)},
        },
        "wall_s": time.monotonic() - started,
        "repeat": args.repeat,
        "load_avg": {name: [b["load_avg"] for b in boths] for name, boths in runs.items()},
        "cpu_per_1m_tokens": shapes,
        "events_per_read_ours": {name: events_per_read(boths[0]["ours_dir"]) for name, boths in runs.items()},
        "client_bound": {name: [client_bound(b["ours_dir"]) for b in boths] for name, boths in runs.items()},
        "vllm_parse_failures": {name: [b["vllm_parse_failures"] for b in boths] for name, boths in runs.items()},
        "whole_process": whole,
        "ttft_error_ms": ttft,
        "goals": {
            "ratio_max": max(r["ratio_ours_to_vllm"] for name in GOAL_SHAPES for r in shapes[name]),
            "ratio_goal": 0.5,
            "ratio_limit": 1.0,
            "ttft_goal_p99_ms": 1.0,
            "ttft_error_p99_ms": {row["concurrency"]: row["ours"]["p99_ms"] for row in ttft},
        },
        "vllm_compat": {
            "vllm_keys_missing_in_export": sorted(set(runs["flood"][0]["vllm_results"][concurrencies[0]]) - exported)
        },
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_table(report: dict) -> None:
    """The figures as plain tables, each with the load average it was measured under."""
    for shape, rows in report["cpu_per_1m_tokens"].items():
        loads = [round(x, 1) for load in report["load_avg"][shape] for x in (load["before"][0], load["after"][0])]
        print(
            f"{shape}: CPU s per 1M streamed tokens, median of {report['repeat']} "
            f"(load average {min(loads)} to {max(loads)} on {report['machine']['cpus']} CPUs)"
        )
        print(f"{'conc':>5} {'ours':>8} {'vLLM':>8} {'ratio':>6} {'ratio range':>12} {'events/read (ours)':>19}")
        per_read_ours = report["events_per_read_ours"][shape]
        for row in rows:
            spread = f"{min(row['ratios']):.2f}-{max(row['ratios']):.2f}"
            print(
                f"{row['concurrency']:>5} {row['ours']['cpu_s_per_1m_tokens']:>8.1f} "
                f"{row['vllm']['cpu_s_per_1m_tokens']:>8.1f} {row['ratio_ours_to_vllm']:>6.2f} {spread:>12} "
                f"{per_read_ours.get(row['concurrency'], 0):>19.1f}"
            )
    for shape, w in report["whole_process"].items():
        print(
            f"whole process incl. start-up, {shape}: ours {w['ours']['cpu_s']:.1f} CPU s "
            f"({w['ours']['cpu_s_per_1m_tokens']:.1f} per 1M tok), vLLM {w['vllm']['cpu_s']:.1f} CPU s "
            f"({w['vllm']['cpu_s_per_1m_tokens']:.1f} per 1M tok)"
        )
    print(f"TTFT error ms (paced runs, {report['settings']['pace_ms']:g} ms per event): p50 / p99 / max")
    for row in report["ttft_error_ms"]:
        for name in ("ours", "vllm"):
            e, split = row[name], row[f"{name}_split"]
            flight = (
                (
                    f"; first chunk in flight p50/p99 {_ms(split['first_chunk_to_client_ms']['median_ms'])} / "
                    f"{_ms(split['first_chunk_to_client_ms']['p99_ms'])}"
                )
                if split
                else ""
            )
            print(
                f"  c={row['concurrency']:<4} {name:<5} {_ms(e['median_ms'])} / {_ms(e['p99_ms'])} / {_ms(e['max_ms'])} "
                f"({e['count']} requests){flight}"
            )
    flagged = {
        shape: sorted({name for verdicts in runs for name, bound in verdicts.items() if bound})
        for shape, runs in report["client_bound"].items()
    }
    print(
        f"scenarios servingctl flagged client-bound in any repeat: {flagged}; wall {report['wall_s']:.0f} s; "
        f"cores {report['settings']['cores']}"
    )
    unparsed = {
        shape: sum(n for counts in runs for n in counts.values()) for shape, runs in report["vllm_parse_failures"].items()
    }
    if any(unparsed.values()):
        print(f"requests vLLM's client failed to parse (its SSE split, left out of its tokens): {unparsed}")
    g = report["goals"]
    print(
        f"max ratio ours/vLLM, {' and '.join(GOAL_SHAPES)}: {g['ratio_max']:.2f} "
        f"(goal <= {g['ratio_goal']}, never above {g['ratio_limit']}); "
        f"TTFT error p99 {g['ttft_error_p99_ms']} ms (goal < {g['ttft_goal_p99_ms']} ms)"
    )
    missing = report["vllm_compat"]["vllm_keys_missing_in_export"]
    print(f"vLLM result keys missing in our vLLM-compatible export: {missing or 'none'}")


@contextmanager
def real_vllm(model: str, concurrency: int, work: Path) -> Iterator[tuple[str, set[int] | None]]:
    """One real vLLM on CPU (the tiny model, on every core but the last), healthy: its URL and the
    cores the clients get (the last one; None when vLLM is not pinned)."""
    from servingctl_twin.modelserver import model_server_cpus, vllm_server

    port = free_port()
    client_cpus = set(sorted(os.sched_getaffinity(0))[-1:]) if model_server_cpus() else None
    server = vllm_server(
        model, port, served_model_name=model, extra_args=["--max-num-seqs", str(max(concurrency, 8))], log_path=work / "vllm.log"
    )
    with server:
        server.wait_healthy(timeout_s=900)
        yield f"http://127.0.0.1:{port}", client_cpus


def client_costs(phase: dict, cpu: float, tok_s: float | None) -> dict:
    """A client's whole-tree and load-phase CPU, each per 1M streamed tokens, and the tok/s it saw."""
    return {
        "tokens": phase["tokens"],
        "whole_cpu_s": cpu,
        "phase_cpu_s": phase["cpu_s"],
        "whole_per_1m": cpu / phase["tokens"] * 1e6,
        "phase_per_1m": phase["cpu_s"] / phase["tokens"] * 1e6,
        "output_tok_s": tok_s,
    }


def median_ratios(pairs: list[dict]) -> dict[str, float]:
    """Ours / vLLM's CPU per 1M tokens (whole tree, load phase), the median over the repeats."""
    return {key: statistics.median(p["ours"][key] / p["vllm"][key] for p in pairs) for key in ("whole_per_1m", "phase_per_1m")}


def measure_user_run(args: argparse.Namespace, concurrency: int, model: str, work: Path) -> dict:
    """What a user's run costs (`--user-run`): one real vLLM on CPU (the tiny model, on every core but
    the last), `servingctl bench` with its defaults (burst, 2 warm-up and 5 measured rounds, report
    and charts written) and `vllm bench serve` sending as many requests of the same prompt length
    and output length at the same concurrency, each client on the last core. Per client: the whole
    process tree's CPU (os.wait4: start-up, calibration, outputs, any child process) and the load
    phase's, per 1M streamed tokens, and the output tok/s each client saw (the server's pace sets
    how far per-second costs spread). Repeated --repeat times, the clients in turn."""
    requests = (2 + 5) * concurrency  # servingctl bench's default warm-up and measured rounds
    pairs = []
    with real_vllm(model, concurrency, work) as (url, client_cpus):
        for repeat in range(args.repeat):
            run_dir = work / f"user-run-{repeat + 1}"
            run_dir.mkdir(parents=True, exist_ok=True)
            load_before = os.getloadavg()
            print(f"{run_dir.name}: servingctl bench (defaults), concurrency {concurrency} ...", file=sys.stderr, flush=True)
            ours, ours_cpu = run_ours(
                url,
                model,
                [concurrency],
                [],
                args.max_tokens,
                ["--input-tokens", str(args.input_tokens)],
                run_dir / "ours",
                args.timeout,
                client_cpus,
            )
            dataset = sharegpt_file(run_dir / "sharegpt.json", requests, max(1, args.input_tokens // 8))
            print(f"{run_dir.name}: vllm bench serve, {requests} requests ...", file=sys.stderr, flush=True)
            vllm, results, vllm_cpu = run_vllm(
                args.vllm_python,
                url,
                model,
                [concurrency],
                {concurrency: requests},
                args.max_tokens,
                dataset,
                run_dir / "vllm",
                args.timeout,
                client_cpus,
            )
            summary = read_results(run_dir / "ours").scenarios[0].summary
            row: dict[str, Any] = {"load_avg": {"before": load_before, "after": os.getloadavg()}}
            for name, phase, cpu, tok_s in (
                ("ours", ours[concurrency], ours_cpu, summary.output_tok_s),
                ("vllm", vllm[concurrency], vllm_cpu, results[concurrency]["output_throughput"]),
            ):
                row[name] = client_costs(phase, cpu, tok_s)
            pairs.append(row)
    median = median_ratios(pairs)
    return {
        "benchmark": "client_overhead --user-run",
        "command": " ".join([".venv/bin/python", "benchmarks/client_overhead.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "concurrency": concurrency,
            "requests": requests,
            "max_tokens": args.max_tokens,
            "input_tokens": args.input_tokens,
        },
        "runs": pairs,
        "ratio_ours_to_vllm": median,
    }


def print_user_run(report: dict) -> None:
    """The user-run table: per repeat, both clients' CPU per 1M tokens (whole tree, load phase) and pace."""
    print(f"CPU s per 1M streamed tokens, concurrency {report['settings']['concurrency']} against a real vLLM on CPU")
    print("run  client   whole tree  load phase  tokens  output tok/s  load avg")
    for i, row in enumerate(report["runs"], 1):
        for name in ("ours", "vllm"):
            r = row[name]
            print(
                f"{i:<4} {name:<8} {r['whole_per_1m']:>10.1f} {r['phase_per_1m']:>11.1f} {r['tokens']:>7} "
                f"{r['output_tok_s'] or 0:>13.1f}  {row['load_avg']['before'][0]:.1f} -> {row['load_avg']['after'][0]:.1f}"
            )
    ratio = report["ratio_ours_to_vllm"]
    print(f"ours / vLLM (median): whole tree {ratio['whole_per_1m']:.2f}, load phase {ratio['phase_per_1m']:.2f}")


# Words of the generated ShareGPT file: common English, so a word is one or two tokens.
COMMON_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her all she there would their we him been has when who will more no if out so said what up its about "
    "into than them can only other new some could time these two may then do first any my now such like our over man "
    "me even most made after also did many before must through back years where much your way well down should because"
)
WORDS = COMMON_WORDS.split()


def sharegpt_varied(path: Path, count: int, seed: int) -> Path:
    """A ShareGPT file of `count` entries, seeded: prompts of 8 to 400 words and reference answers of 4 to
    300 (about 1.3 tokens a word: inside vLLM's filter of 4..1024 prompt tokens and 2048 in all), each
    log-uniform so short and long ones both occur, as in ShareGPT."""
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        n = round(math.exp(rng.uniform(math.log(low), math.log(high))))
        return " ".join(rng.choice(WORDS) for _ in range(n))

    rows = [
        {"id": f"entry-{i}", "conversations": [{"from": "human", "value": text(8, 400)}, {"from": "gpt", "value": text(4, 300)}]}
        for i in range(count)
    ]
    path.write_text(json.dumps(rows))
    return path


def server_counters(url: str) -> dict[str, float]:
    """The server's prompt and generation token counters (vLLM's /metrics, summed over label sets)."""
    names = {"vllm:prompt_tokens_total": "prompt", "vllm:generation_tokens_total": "generation"}
    out = dict.fromkeys(names.values(), 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


def counters_moved(url: str, before: dict[str, float], generated: int) -> dict[str, float]:
    """How far the counters moved since `before`, once they account for `generated` tokens (they move
    just after a stream ends), or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        after = server_counters(url)
        if after["generation"] - before["generation"] >= generated or time.monotonic() > deadline:
            return {k: after[k] - before[k] for k in before}
        time.sleep(0.2)


def measure_dataset_run(args: argparse.Namespace, concurrency: int, model: str, work: Path) -> dict:
    """Both clients on one ShareGPT file (`--sharegpt [FILE]`): one real vLLM on CPU (the tiny model, on
    every core but the last), `servingctl bench --dataset FILE --dataset-format sharegpt` and `vllm bench
    serve --dataset-name sharegpt --disable-shuffle`, the first --num-prompts prompts, each request's
    output length its reference answer's tokens (ignore_eos), at one concurrency, each client on the last
    core, --repeat times in turn. Per client: whole process tree and load phase CPU per 1M streamed
    tokens, and how far the server's prompt and generation counters moved (the same requests move them
    alike)."""
    dataset = Path(args.sharegpt) if args.sharegpt else sharegpt_varied(work / "sharegpt.json", args.num_prompts, args.seed)
    ours_prompts = ["--dataset", str(dataset), "--dataset-format", "sharegpt", "--num-prompts", str(args.num_prompts)]
    ours_prompts += ["--dataset-output-tokens", "dataset"]
    pairs = []
    with real_vllm(model, concurrency, work) as (url, client_cpus):
        for repeat in range(args.repeat):
            run_dir = work / f"sharegpt-run-{repeat + 1}"
            run_dir.mkdir(parents=True, exist_ok=True)
            row: dict[str, Any] = {"load_avg": {"before": os.getloadavg()}}
            print(f"{run_dir.name}: servingctl bench --dataset {dataset.name}, concurrency {concurrency} ...", file=sys.stderr)
            before = server_counters(url)
            ours, ours_cpu = run_ours(
                url,
                model,
                [concurrency],
                ["--warmup", "0"],
                args.max_tokens,
                ours_prompts,
                run_dir / "ours",
                args.timeout,
                client_cpus,
            )
            ours_moved = counters_moved(url, before, ours[concurrency]["tokens"])
            summary = read_results(run_dir / "ours").scenarios[0].summary
            print(f"{run_dir.name}: vllm bench serve on the same file ...", file=sys.stderr, flush=True)
            before = server_counters(url)
            vllm, results, vllm_cpu = run_vllm(
                args.vllm_python,
                url,
                model,
                [concurrency],
                {concurrency: args.num_prompts},
                None,
                dataset,
                run_dir / "vllm",
                args.timeout,
                client_cpus,
            )
            vllm_moved = counters_moved(url, before, vllm[concurrency]["tokens"])
            row["load_avg"]["after"] = os.getloadavg()
            for name, phase, cpu, moved, requests, tok_s in (
                ("ours", ours[concurrency], ours_cpu, ours_moved, summary.ok, summary.output_tok_s),
                (
                    "vllm",
                    vllm[concurrency],
                    vllm_cpu,
                    vllm_moved,
                    results[concurrency]["completed"],
                    results[concurrency]["output_throughput"],
                ),
            ):
                row[name] = {
                    "requests": requests,
                    "server_prompt_tokens": moved["prompt"],
                    "server_generation_tokens": moved["generation"],
                } | client_costs(phase, cpu, tok_s)
            row["same_requests"] = all(
                row["ours"][key] == row["vllm"][key] for key in ("requests", "server_prompt_tokens", "server_generation_tokens")
            )
            pairs.append(row)
    median = median_ratios(pairs)
    return {
        "benchmark": "client_overhead --sharegpt",
        "command": " ".join([".venv/bin/python", "benchmarks/client_overhead.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "server": "vLLM on CPU, tiny model",
            "concurrency": concurrency,
            "num_prompts": args.num_prompts,
            "dataset": str(dataset),
            "generated": not args.sharegpt,
            "seed": args.seed,
        },
        "runs": pairs,
        "ratio_ours_to_vllm": median,
    }


def print_dataset_run(report: dict) -> None:
    """The --sharegpt table: per repeat, both clients' CPU per 1M tokens, the server's counters, the load."""
    st = report["settings"]
    print(
        f"CPU s per 1M streamed tokens, {st['num_prompts']} prompts of {Path(st['dataset']).name} at concurrency "
        f"{st['concurrency']} against a real vLLM on CPU"
    )
    print("run  client  requests  whole tree  load phase  tokens  server prompt/gen tokens  output tok/s  load avg")
    for i, row in enumerate(report["runs"], 1):
        for name in ("ours", "vllm"):
            r = row[name]
            print(
                f"{i:<4} {name:<7} {r['requests']:>8} {r['whole_per_1m']:>11.1f} {r['phase_per_1m']:>11.1f} {r['tokens']:>7} "
                f"{r['server_prompt_tokens']:>14.0f} / {r['server_generation_tokens']:<8.0f} {r['output_tok_s'] or 0:>12.1f}  "
                f"{row['load_avg']['before'][0]:.1f} -> {row['load_avg']['after'][0]:.1f}"
            )
        print(f"     same requests (count, server prompt and generation tokens): {'yes' if row['same_requests'] else 'NO'}")
    ratio = report["ratio_ours_to_vllm"]
    print(f"ours / vLLM (median): whole tree {ratio['whole_per_1m']:.2f}, load phase {ratio['phase_per_1m']:.2f}")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="1,16,64,256", help="comma-separated (default 1,16,64,256)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (default 256)")
    p.add_argument("--input-tokens", type=int, default=256, help="servingctl prompt target (default 256)")
    # 131,072 made a flood scenario 0.6 s long for our client, and its CPU moved by 30 % run to run
    p.add_argument(
        "--tokens-per-run",
        type=int,
        default=262_144,
        help="streamed tokens per concurrency, at least (default 262144; requests >= 2 x concurrency)",
    )
    p.add_argument("--speed", type=float, default=1000.0, help="simulator speed factor (default 1000)")
    p.add_argument(
        "--pace-ms",
        type=float,
        default=20.0,
        help="paced load: ms between a stream's events, one per read (default 20: 50 tok/s per stream)",
    )
    p.add_argument(
        "--flood-flush-ms",
        type=float,
        default=5.0,
        help="flood load: ms between a stream's writes, each carrying every pending event (default 5)",
    )
    p.add_argument("--paced-max-tokens", type=int, default=128, help="output tokens per paced request (default 128)")
    p.add_argument("--paced-seconds", type=float, default=20.0, help="how long each paced scenario streams, about (default 20)")
    p.add_argument("--ttft-concurrency", default="64,256", help="concurrencies whose TTFT error is reported (default 64,256)")
    p.add_argument("--vllm-python", default=os.environ.get("SERVINGCTL_VLLM_PYTHON", str(ROOT / ".venv-vllm/bin/python")))
    p.add_argument(
        "--tokenizer",
        default=os.environ.get("SERVINGCTL_TINY_MODEL", str(ROOT / ".cache/tiny-llama")),
        help="model dir whose tokenizer vLLM's client loads; also the served model name",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="pairs (ours, vLLM) measured per load shape; the figures are their medians (default 3)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per client process (default 1800)")
    p.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the simulator on the first core, the clients on the others, as a server host of its own (default on)",
    )
    p.add_argument(
        "--user-run",
        action="store_true",
        help="instead: what a user's run costs against a real vLLM on CPU (servingctl bench's defaults at the one "
        "--concurrency given, whole process tree and load phase; see measure_user_run)",
    )
    p.add_argument(
        "--sharegpt",
        nargs="?",
        const="",
        metavar="FILE",
        help="instead: both clients read the same ShareGPT file (FILE, or one generated: seeded, varied lengths) "
        "against a real vLLM on CPU at the one --concurrency given (see measure_dataset_run)",
    )
    p.add_argument("--num-prompts", type=int, default=300, help="--sharegpt: prompts taken from the file (default 300)")
    p.add_argument("--seed", type=int, default=0, help="--sharegpt: seed of the generated file (default 0)")
    p.add_argument("--work-dir", help="keep client outputs here (default: a new temporary directory)")
    p.add_argument("--output", default=str(ROOT / ".cache/bench/client_overhead.json"), help="JSON results path")
    args = p.parse_args(argv)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.ttft_concurrencies = [int(c) for c in args.ttft_concurrency.split(",")]
    model = str(Path(args.tokenizer).resolve())
    if not Path(args.vllm_python).exists() or not (Path(model) / "tokenizer.json").exists():
        raise SystemExit(f"needs the vLLM venv ({args.vllm_python}) and the tiny model ({model}): run `make vllm`")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="client-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    one = "--user-run" if args.user_run else "--sharegpt" if args.sharegpt is not None else None
    if one and len(concurrencies) != 1:
        raise SystemExit(f"--concurrency: {one} measures one concurrency; got {args.concurrency}")
    if args.user_run and args.sharegpt is not None:
        raise SystemExit("--user-run, --sharegpt: one at a time")
    if args.user_run:
        report, show = measure_user_run(args, concurrencies[0], model, work), print_user_run
    elif args.sharegpt is not None:
        report, show = measure_dataset_run(args, concurrencies[0], model, work), print_dataset_run
    else:
        report, show = measure(args, concurrencies, model, work), print_table
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    show(report)
    print(f"JSON: {out}   client outputs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
