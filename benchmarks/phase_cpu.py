"""Run a benchmark client inside this process and log the CPU and wall time of each measured phase.

Start-up (vLLM's client imports torch and loads a tokenizer; servingctl imports its own stack) is
not what a client costs per streamed token, so each client's phase function is wrapped and every
call appends one JSON line to LOG: {"cpu_s": user + sys of the whole process (all threads),
"wall_s", "tokens", "concurrency"}. Only the standard library here: the file runs in either venv.

    python phase_cpu.py LOG servingctl ARG...            one `servingctl bench` (phase: run_scenario)
    python phase_cpu.py LOG vllm ARG... [--next ARG...]  `vllm bench serve` runs (phase: benchmark)
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import time
from collections.abc import Callable
from typing import Any


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wrap_phase(module: Any, name: str, log_path: str, describe: Callable[[Any, dict], dict]) -> None:
    """Replace module.name (an async function) by a wrapper that logs the CPU and wall time of each call."""
    original = getattr(module, name)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        cpu0, wall0 = _cpu_s(), time.perf_counter()
        result = await original(*args, **kwargs)
        record = {"cpu_s": _cpu_s() - cpu0, "wall_s": time.perf_counter() - wall0, **describe(result, kwargs)}
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
        return result

    setattr(module, name, timed)


def run_servingctl(log_path: str, argv: list[str]) -> int:
    """`servingctl bench ARG...` with each scenario timed."""
    runner = importlib.import_module("servingctl.loadgen.runner")
    wrap_phase(
        runner,
        "run_scenario",
        log_path,
        lambda result, kwargs: {
            "scenario": result.summary.name,
            "concurrency": result.summary.concurrency,
            "tokens": sum(r.completion_tokens or 0 for r in result.records),
            "requests": len(result.records),
        },
    )
    from servingctl_cli.main import main  # after the patch: the CLI imports run_benchmark's module

    return main(["bench", *argv])


def run_vllm(log_path: str, argv: list[str]) -> int:
    """`vllm bench serve ARG...` (several runs split by --next) with each benchmark() call timed."""
    serve = importlib.import_module("vllm.benchmarks.serve")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    wrap_phase(
        serve,
        "benchmark",
        log_path,
        lambda result, kwargs: {
            "concurrency": kwargs.get("max_concurrency"),
            "tokens": result.get("total_output_tokens"),
            "requests": result.get("completed"),
        },
    )
    runs: list[list[str]] = []
    current: list[str] = []
    for arg in argv:
        if arg == "--next":
            runs.append(current)
            current = []
        else:
            current.append(arg)
    runs.append(current)
    for run_argv in runs:
        parser = FlexibleArgumentParser()
        serve.add_cli_args(parser)
        serve.main(parser.parse_args(run_argv))
    return 0


if __name__ == "__main__":
    log, client, *rest = sys.argv[1:]
    sys.exit({"servingctl": run_servingctl, "vllm": run_vllm}[client](log, rest))
