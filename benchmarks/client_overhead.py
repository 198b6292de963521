"""Client overhead of `servingctl bench` against `vllm bench serve`, measured in the same run.

Both clients stream from the same fast simulator (`servingctl.local.simserver`, high speed factor,
max-num-seqs twice the largest concurrency, no MTP so every chunk carries one token: the most
chunks per token, a client's worst case), one client process each (all concurrencies in it), one
client at a time, on loopback only.

1. Client CPU per 1M streamed tokens (phase 1, the simulator flooding the clients):
   `phase_cpu.py` runs each client in-process and logs the CPU
   (user + sys, all threads) of each measured phase: servingctl's run_scenario, vLLM's benchmark().
   Start-up (vLLM's client imports torch and loads a tokenizer) is left out of the ratio and
   reported separately as whole-process CPU (os.wait4).
2. TTFT measurement error (phase 2, a fresh simulator at --ttft-speed, so that neither client is
   saturated: a saturated client's TTFT is its own queueing, which servingctl flags as client_bound
   anyway): the simulator runs with --debug-timings and reports, per stream, when
   its app received the request and when it sent the first chunk / first content chunk. Error =
   the client's TTFT - the server's (first content sent - received): loopback both ways plus what
   the client adds. Matched by cache_salt (servingctl: run-scenario-index) and x-request-id (vLLM:
   prefix + index). vLLM's TTFT counts the role chunk, so it is compared with the first chunk sent.

Usage (repository root, main venv; the vLLM venv and the tiny model come from `make vllm`):
    .venv/bin/python benchmarks/client_overhead.py --output .cache/bench/client_overhead.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from servingctl.bench.outputs import read_results
from servingctl.bench.outputs.vllm_compat import to_vllm
from servingctl.bench.stats import summarize

ROOT = Path(__file__).resolve().parents[1]
PHASE_CPU = ROOT / "benchmarks" / "phase_cpu.py"
UNIT = "This is deterministic benchmark input text. "


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_process(cmd: list[str], env: dict[str, str], timeout_s: float, log: Path) -> float:
    """Run a client to completion; return its user + sys CPU seconds (os.wait4). Fails loudly."""
    deadline = time.monotonic() + timeout_s
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
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


def run_ours(url: str, model: str, concurrencies: list[int], requests: int, max_tokens: int, input_tokens: int,
             out: Path, timeout_s: float) -> tuple[dict[int, dict], float]:
    """`servingctl bench` in sustained mode (no warm-up), every concurrency in one process."""
    log = out.with_suffix(".phases.jsonl")
    cmd = [
        sys.executable, str(PHASE_CPU), str(log), "servingctl",
        "--endpoint", url, "--model", model, "--input-tokens", str(input_tokens),
        "--concurrency", ",".join(map(str, concurrencies)), "--mode", "sustained", "--requests", str(requests),
        "--warmup", "0", "--max-tokens", str(max_tokens), "--max-failure-rate", "0", "--output", str(out), "--json",
    ]
    cpu = run_process(cmd, dict(os.environ), timeout_s, out.with_suffix(".log"))
    failed = [r for s in read_results(out).scenarios for r in s.records if not r.ok]
    if failed:
        raise SystemExit(f"servingctl bench: {len(failed)} failed requests, e.g. {failed[0].error}")
    return phases(log), cpu


def sharegpt_file(path: Path, count: int, repetitions: int) -> Path:
    """A ShareGPT-shaped dataset of unique prompts (vLLM's `random` dataset would re-align every prompt
    through the server's /tokenize, a per-request cost it does not pay against a real vLLM)."""
    rows = [{"conversations": [{"from": "human", "value": f"{i} " + UNIT * repetitions},
                               {"from": "gpt", "value": "ok ok ok ok"}]} for i in range(count)]
    path.write_text(json.dumps(rows))
    return path


def run_vllm(vllm_python: str, url: str, model: str, concurrencies: list[int], requests: int, max_tokens: int,
             dataset: Path, out: Path, timeout_s: float) -> tuple[dict[int, dict], dict[int, dict], float]:
    """`vllm bench serve` (openai-chat backend, ShareGPT-shaped prompts), every concurrency in one process."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "phases.jsonl"
    cmd = [vllm_python, str(PHASE_CPU), str(log), "vllm"]
    for i, c in enumerate(concurrencies):
        cmd += ["--next"] if i else []
        cmd += [
            "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions", "--model", model,
            "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--sharegpt-output-len", str(max_tokens),
            "--num-prompts", str(requests), "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
            "--temperature", "0", "--request-id-prefix", f"ovh-c{c}-", "--disable-tqdm", "--save-result",
            "--save-detailed", "--result-dir", str(out), "--result-filename", f"c{c}.json",
        ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    cpu = run_process(cmd, env, timeout_s, out / "client.log")
    results = {c: json.loads((out / f"c{c}.json").read_text()) for c in concurrencies}
    for c, result in results.items():
        if result["failed"]:
            raise SystemExit(f"vllm bench serve c={c}: {result['failed']} failed requests: {result['errors'][:2]}")
    return phases(log), results, cpu


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
    for i, (start_s, ttft_s) in enumerate(zip(result["start_times"], result["ttfts"])):
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
    return ({s["cache_salt"]: s for s in streams if s["cache_salt"]},
            {s["x_request_id"]: s for s in streams if s["x_request_id"]})


def start_simulator(port: int, model: str, speed: float, max_seqs: int, log: Path) -> subprocess.Popen:
    """The simulator in its own process (its CPU is not the clients'), waited until healthy."""
    cmd = [
        sys.executable, "-m", "servingctl.local.simserver", "--port", str(port), "--model", model,
        "--speed", str(speed), "--max-num-seqs", str(max_seqs), "--max-num-batched-tokens", str(max(8192, max_seqs)),
        "--mtp-tokens", "0", "--debug-timings", "--log-level", "warning",
    ]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
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


def run_both(args: argparse.Namespace, model: str, work: Path, speed: float, concurrencies: list[int],
             requests: int) -> dict:
    """Both clients, one after the other, against one fresh simulator at `speed`."""
    work.mkdir(parents=True, exist_ok=True)
    dataset = sharegpt_file(work / "sharegpt.json", requests, max(1, args.input_tokens // 8))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sim = start_simulator(port, model, speed, max(concurrencies) * 2, work / "simulator.log")
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            print(f"{work.name}: servingctl bench, concurrency {concurrencies} x {requests} requests ...",
                  file=sys.stderr, flush=True)
            ours, ours_cpu = run_ours(url, model, concurrencies, requests, args.max_tokens, args.input_tokens,
                                      work / "ours", args.timeout)
            by_salt, _ = fetch_timings(client, work / "timings-ours.json")
            print(f"{work.name}: vllm bench serve, the same ...", file=sys.stderr, flush=True)
            vllm, vllm_results, vllm_cpu = run_vllm(args.vllm_python, url, model, concurrencies, requests,
                                                    args.max_tokens, dataset, work / "vllm", args.timeout)
            _, by_request_id = fetch_timings(client, work / "timings-vllm.json")
    finally:
        stop(sim)
    return {"ours": ours, "ours_cpu": ours_cpu, "vllm": vllm, "vllm_cpu": vllm_cpu, "vllm_results": vllm_results,
            "by_salt": by_salt, "by_request_id": by_request_id, "ours_dir": work / "ours"}


def client_bound(results_dir: Path) -> dict[str, bool]:
    """servingctl's own verdict per scenario: was the client the bottleneck?"""
    return {s.summary.name: s.summary.client_bound for s in read_results(results_dir).scenarios}


def measure(args: argparse.Namespace, concurrencies: list[int], model: str, work: Path) -> dict:
    """Phase 1: CPU per token against a flooding simulator. Phase 2: TTFT error at a pace the
    clients keep up with (a saturated client's TTFT is queueing, not measurement error)."""
    load_before = os.getloadavg()
    started = time.monotonic()
    requests = max(2 * max(concurrencies), math.ceil(args.tokens_per_run / args.max_tokens))
    cpu = run_both(args, model, work / "cpu", args.speed, concurrencies, requests)
    c_ttft = args.ttft_concurrency
    paced = run_both(args, model, work / "ttft", args.ttft_speed, [c_ttft], 3 * c_ttft)

    rows = []
    for c in concurrencies:
        ours, vllm = cpu["ours"][c], cpu["vllm"][c]
        ours_m, vllm_m = ours["cpu_s"] / ours["tokens"] * 1e6, vllm["cpu_s"] / vllm["tokens"] * 1e6
        rows.append({"concurrency": c, "ours": ours | {"cpu_s_per_1m_tokens": ours_m},
                     "vllm": vllm | {"cpu_s_per_1m_tokens": vllm_m}, "ratio_ours_to_vllm": ours_m / vllm_m})
    ttft = {
        "concurrency": c_ttft,
        "ours": error_stats(ttft_errors_ours(paced["ours_dir"], paced["by_salt"], c_ttft)),
        "vllm": error_stats(ttft_errors_vllm(paced["vllm_results"][c_ttft], c_ttft, paced["by_request_id"])),
        "ours_split": ttft_split_ours(paced["ours_dir"], paced["by_salt"], c_ttft),
        "vllm_split": ttft_split_vllm(paced["vllm_results"][c_ttft], c_ttft, paced["by_request_id"]),
        "ours_client_bound": client_bound(paced["ours_dir"]),
        "ours_cpu_share": {s.summary.name: s.summary.client.cpu_share for s in read_results(paced["ours_dir"]).scenarios},
    }
    run = read_results(cpu["ours_dir"])
    exported = set(to_vllm(run, run.scenarios[0]))
    ours_tokens = sum(p["tokens"] for p in cpu["ours"].values())
    vllm_tokens = sum(p["tokens"] for p in cpu["vllm"].values())
    return {
        "benchmark": "client_overhead",
        "command": " ".join([".venv/bin/python", "benchmarks/client_overhead.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {"max_tokens": args.max_tokens, "input_tokens": args.input_tokens, "speed": args.speed,
                     "ttft_speed": args.ttft_speed, "requests_per_concurrency": requests,
                     "simulator": "mtp off, max-num-seqs 2 x max concurrency"},
        "wall_s": time.monotonic() - started,
        "load_avg": {"before": load_before, "after": os.getloadavg()},
        "cpu_per_1m_tokens": rows,
        "cpu_phase_client_bound": client_bound(cpu["ours_dir"]),
        "whole_process": {
            "ours": {"cpu_s": cpu["ours_cpu"], "cpu_s_per_1m_tokens": cpu["ours_cpu"] / ours_tokens * 1e6},
            "vllm": {"cpu_s": cpu["vllm_cpu"], "cpu_s_per_1m_tokens": cpu["vllm_cpu"] / vllm_tokens * 1e6},
        },
        "ttft_error_ms": ttft,
        "goals": {
            "ratio_max": max(r["ratio_ours_to_vllm"] for r in rows), "ratio_goal": 0.5, "ratio_limit": 1.0,
            "ttft_concurrency": c_ttft, "ttft_error_p99_ms": ttft["ours"]["p99_ms"], "ttft_goal_p99_ms": 1.0,
        },
        "vllm_compat": {"vllm_keys_missing_in_export": sorted(set(cpu["vllm_results"][concurrencies[0]]) - exported)},
    }


def print_table(report: dict) -> None:
    """The figures as a plain table."""
    print(f"{'conc':>5} {'ours CPU s/1M tok':>18} {'vLLM CPU s/1M tok':>18} {'ratio':>6}")
    for row in report["cpu_per_1m_tokens"]:
        print(f"{row['concurrency']:>5} {row['ours']['cpu_s_per_1m_tokens']:>18.1f} "
              f"{row['vllm']['cpu_s_per_1m_tokens']:>18.1f} {row['ratio_ours_to_vllm']:>6.2f}")
    w, g, t = report["whole_process"], report["goals"], report["ttft_error_ms"]
    print(f"whole process incl. start-up: ours {w['ours']['cpu_s']:.1f} CPU s ({w['ours']['cpu_s_per_1m_tokens']:.1f} "
          f"per 1M tok), vLLM {w['vllm']['cpu_s']:.1f} CPU s ({w['vllm']['cpu_s_per_1m_tokens']:.1f} per 1M tok)")
    for name in ("ours", "vllm"):
        e = t[name]
        print(f"TTFT error at {t['concurrency']} streams (simulator speed {report['settings']['ttft_speed']:g}), {name}: "
              f"median {e['median_ms']:.3f} ms, p90 {e['p90_ms']:.3f}, p99 {e['p99_ms']:.3f}, max {e['max_ms']:.3f} "
              f"({e['count']} requests)")
    for name in ("ours", "vllm"):
        split = t[f"{name}_split"]
        if split:
            print(f"  {name}: request in flight p50/p99 {split['request_to_server_ms']['median_ms']:.3f} / "
                  f"{split['request_to_server_ms']['p99_ms']:.3f} ms; first chunk in flight p50/p99 "
                  f"{split['first_chunk_to_client_ms']['median_ms']:.3f} / {split['first_chunk_to_client_ms']['p99_ms']:.3f} ms")
    print(f"servingctl's client-bound verdicts: CPU phase {report['cpu_phase_client_bound']}; "
          f"TTFT phase {t['ours_client_bound']} (CPU share {t['ours_cpu_share']})")
    print(f"load average before / after: {report['load_avg']['before']} / {report['load_avg']['after']} "
          f"on {report['machine']['cpus']} CPUs; wall {report['wall_s']:.0f} s")
    print(f"max ratio ours/vLLM {g['ratio_max']:.2f} (goal <= {g['ratio_goal']}, never above {g['ratio_limit']}); "
          f"TTFT error p99 at {g['ttft_concurrency']} streams: {g['ttft_error_p99_ms']:.3f} ms (goal < {g['ttft_goal_p99_ms']} ms)")
    missing = report["vllm_compat"]["vllm_keys_missing_in_export"]
    print(f"vLLM result keys missing in our vLLM-compatible export: {missing or 'none'}")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, print the table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="1,4,16,64,256", help="comma-separated (default 1,4,16,64,256)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per request (default 256)")
    p.add_argument("--input-tokens", type=int, default=256, help="servingctl prompt target (default 256)")
    p.add_argument("--tokens-per-run", type=int, default=131_072,
                   help="streamed tokens per concurrency, at least (default 131072; requests >= 2 x concurrency)")
    p.add_argument("--speed", type=float, default=1000.0, help="simulator speed factor (default 1000)")
    p.add_argument("--ttft-concurrency", type=int, default=64, help="concurrency of the TTFT error goal (default 64)")
    p.add_argument("--ttft-speed", type=float, default=1.0,
                   help="simulator speed of the TTFT phase: the reference's own timing by default, so neither "
                   "client saturates (64 streams: about 1,000 tok/s)")
    p.add_argument("--vllm-python", default=os.environ.get("SERVINGCTL_VLLM_PYTHON", str(ROOT / ".venv-vllm/bin/python")))
    p.add_argument("--tokenizer", default=os.environ.get("SERVINGCTL_TINY_MODEL", str(ROOT / ".cache/tiny-llama")),
                   help="model dir whose tokenizer vLLM's client loads; also the served model name")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per client process (default 1800)")
    p.add_argument("--work-dir", help="keep client outputs here (default: a new temporary directory)")
    p.add_argument("--output", default=str(ROOT / ".cache/bench/client_overhead.json"), help="JSON results path")
    args = p.parse_args(argv)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    model = str(Path(args.tokenizer).resolve())
    if not Path(args.vllm_python).exists() or not (Path(model) / "tokenizer.json").exists():
        raise SystemExit(f"needs the vLLM venv ({args.vllm_python}) and the tiny model ({model}): run `make vllm`")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="client-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    report = measure(args, concurrencies, model, work)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print_table(report)
    print(f"JSON: {out}   client outputs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
