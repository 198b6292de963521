"""Export of each scenario as a `vllm bench serve` result file (`DIR/vllm/<scenario>.json`), so tools
that read vLLM's files (plots, dashboards) read ours.

Keys, units and formulas follow vLLM's `vllm/benchmarks/serve.py` (result_json of `main` merged
with `benchmark`'s result, as written by `--save-result --save-detailed`): per-request lists in
seconds (`ttfts`, `itls`, `latencies`, `start_times`), summary figures in ms
(`mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms`, std is the population std like np.std),
throughputs per second over `duration`. Measured requests only (warm-ups excluded).

Where our meaning differs, the file says so under `servingctl.notes` (see NOTES):
- `itls` / `*_itl_ms` are token-normalized (a gap between reads split over the tokens the later
  read carried, one sample per token; chunks of one read are coalesced, their gaps left out) where
  vLLM pools raw chunk gaps; raw gaps are in `servingctl.chunk_gaps_ms`.
- `ttfts` count from the first chunk carrying content or reasoning, not the empty role chunk.
- `duration`: burst = sum of measured rounds' wall time; sustained/rate = first send to last end
  of the measured requests (like vLLM, ramp and drain included).
- `output_throughput`, `total_token_throughput`, `request_throughput` keep vLLM's definition (tokens or
  requests / `duration`, ramp and drain included): not servingctl's headline `servingctl.output_tok_s`
  (burst: the median of the measured rounds' rates; sustained/rate: the steady window).
- `start_times` are epoch seconds (vLLM: perf_counter seconds; only differences are meaningful).
- `generated_texts` are empty strings: servingctl does not keep generated text.
- `queue_times` are 0.0 in burst and sustained modes and absent in rate mode.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from servingctl.loadgen.metrics import NS_PER_S, chunk_gaps_ms, itl_samples_ms
from servingctl.loadgen.slo import measured_duration_s
from servingctl.loadgen.stats import percentile
from servingctl.schema.results import RequestRecord, RunResult, ScenarioResult

BACKEND = "openai-chat"
PERCENTILES: tuple[int, ...] = (90, 95, 99)
NOTES: dict[str, str] = {
    "itls": "token-normalized: each gap between the network reads that brought tokens divided by the tokens of "
    "the later read, one sample per token; gaps inside one read are unknown and left out (vLLM pools raw chunk "
    "gaps, zeros included); raw gaps: servingctl.chunk_gaps_ms",
    "ttfts": "seconds to the first chunk carrying content or reasoning (vLLM counts the role-only first chunk)",
    "tpot": "(E2E - TTFT) / (completion_tokens - 1) from the server's usage (exact under speculative decoding)",
    "duration": "burst: sum of measured rounds' wall time; sustained/rate: first send to last end of measured "
    "requests (ramp and drain included)",
    "output_throughput": "vLLM's definition: output tokens of the measured requests / duration; servingctl's headline "
    "throughput is servingctl.output_tok_s",
    "total_token_throughput": "vLLM's definition: input + output tokens of the measured requests / duration",
    "servingctl.output_tok_s": "servingctl's headline output tokens per second: burst = the median of the measured "
    "rounds' rates (each round's output tokens / its wall time); sustained/rate = output tokens of the steady window "
    "/ its length (ramp and drain excluded)",
    "start_times": "epoch seconds (vLLM: perf_counter seconds; only differences are meaningful)",
    "output_lens": "usage.completion_tokens reported by the server (0 for failed requests)",
    "input_lens": "the calibrated prompt tokens after the chat template",
    "generated_texts": "empty: servingctl does not keep generated text",
    "queue_times": "burst and sustained: 0.0 (a request is sent as soon as its slot is free); "
    "rate mode: absent (servingctl does not record the wait for the concurrency cap)",
    "request_goodput": "requests meeting every per-request SLO (servingctl --slo; itl_ms = vLLM's tpot) per "
    "second of duration, as --goodput; null without an SLO; percentile SLOs and the share: servingctl.slo",
    "spec_decode_acceptance_rate": "percent, from the server's /metrics deltas over the scenario incl. warm-ups",
}


def _stats_ms(name: str, values_s: list[float]) -> dict[str, float]:
    """vLLM's mean/median/std/pNN keys (ms) for one metric's samples in seconds; 0.0 when empty."""
    ms = sorted(v * 1000.0 for v in values_s) or [0.0]
    mean = math.fsum(ms) / len(ms)
    out = {
        f"mean_{name}_ms": mean,
        f"median_{name}_ms": percentile(ms, 0.5),
        f"std_{name}_ms": math.sqrt(math.fsum((v - mean) ** 2 for v in ms) / len(ms)),
    }
    out.update({f"p{p}_{name}_ms": percentile(ms, p / 100) for p in PERCENTILES})
    return out


def _peaks(scenario: ScenarioResult, ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s (1 s buckets from the first send) and peak concurrent requests."""
    if not ok:
        return 0.0, 0
    t0 = min(r.t_start_ns for r in ok)
    buckets: dict[int, int] = {}
    for r in ok:
        for t, tokens in r.chunks:
            second = (t - t0) // NS_PER_S
            buckets[second] = buckets.get(second, 0) + tokens
    # Sweep over half-open [start, end): an end sorts before a start at the same instant.
    events = sorted([(r.t_start_ns, 1) for r in ok] + [(r.t_end_ns or r.t_start_ns, -1) for r in ok])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return float(max(buckets.values(), default=0)), peak


def _per_second(amount: float, duration: float) -> float:
    """amount / duration, 0.0 for an empty duration (vLLM would divide by zero)."""
    return amount / duration if duration > 0 else 0.0


def _error(record: RequestRecord) -> str:
    """vLLM's per-request error string: empty on success."""
    if record.ok:
        return ""
    return f"{record.error_kind or 'other'}: {record.error or ''}".strip()


def to_vllm(run: RunResult, scenario: ScenarioResult) -> dict[str, Any]:
    """The `vllm bench serve --save-result --save-detailed` JSON of one scenario."""
    summary = scenario.summary
    measured = sorted((r for r in scenario.records if not r.warmup), key=lambda r: r.index)
    ok = [r for r in measured if r.ok]
    duration = measured_duration_s(summary.mode, scenario.rounds, measured)
    output_lens = [(r.completion_tokens or 0) if r.ok else 0 for r in measured]
    total_input = summary.input_tokens * len(ok)
    total_output = sum(output_lens)
    epoch0 = scenario.t0_wall.timestamp()
    max_tok_s, max_concurrent = _peaks(scenario, ok)
    server = summary.server

    result: dict[str, Any] = {
        "date": scenario.t0_wall.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": run.metadata.run_id,
        "model_id": run.config.model,
        "tokenizer_id": run.config.model,
        "num_prompts": len(measured),
        "request_rate": summary.rate if summary.mode == "rate" and summary.rate else "inf",
        "burstiness": 1.0,
        "max_concurrency": summary.concurrency,
        "duration": duration,
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": _per_second(len(ok), duration),
        "request_goodput": summary.slo.goodput_rps if summary.slo is not None else None,
        "output_throughput": _per_second(total_output, duration),
        "total_token_throughput": _per_second(total_input + total_output, duration),
        "input_lens": [summary.input_tokens] * len(measured),
        "output_lens": output_lens,
        "ttfts": [(r.ttft_ms or 0.0) / 1000.0 for r in measured],
        "itls": [[ms / 1000.0 for ms in itl_samples_ms(r.chunks)] for r in measured],
        "latencies": [(r.e2e_ms or 0.0) / 1000.0 for r in measured],
        "start_times": [epoch0 + r.t_start_ns / NS_PER_S for r in measured],
        "generated_texts": ["" for _ in measured],
        **({} if summary.mode == "rate" else {"queue_times": [0.0] * len(measured)}),
        "errors": [_error(r) for r in measured],
        "max_output_tokens_per_s": max_tok_s,
        "max_concurrent_requests": max_concurrent,
        "rtfx": 0.0,
    }
    if server.spec_decode_acceptance_rate is not None:
        result["spec_decode_acceptance_rate"] = server.spec_decode_acceptance_rate * 100.0
        result["spec_decode_draft_tokens"] = int(server.spec_decode_draft_tokens_delta or 0)
        result["spec_decode_accepted_tokens"] = int(server.spec_decode_accepted_tokens_delta or 0)
    result.update(_stats_ms("ttft", [r.ttft_ms / 1000.0 for r in ok if r.ttft_ms is not None]))
    result.update(_stats_ms("tpot", [r.tpot_ms / 1000.0 for r in ok if r.tpot_ms is not None]))
    result.update(_stats_ms("itl", [ms / 1000.0 for r in ok for ms in itl_samples_ms(r.chunks)]))
    result.update(_stats_ms("e2el", [r.e2e_ms / 1000.0 for r in ok if r.e2e_ms is not None]))
    result["servingctl"] = {
        "schema_version": run.schema_version,
        "run_id": run.metadata.run_id,
        "scenario": summary.name,
        "mode": summary.mode,
        "output_tok_s": summary.output_tok_s,
        "client_bound": summary.client_bound,
        "token_counts_exact": summary.token_counts_exact,
        "chunk_gaps_ms": [chunk_gaps_ms(r.chunks) for r in measured],
        "tokens_per_chunk": {str(k): v for k, v in summary.tokens_per_chunk.items()},
        "slo": summary.slo.model_dump(mode="json") if summary.slo is not None else None,
        "notes": NOTES,
    }
    return result


def write_vllm(run: RunResult, directory: Path | str) -> list[Path]:
    """Write DIR/vllm/<scenario>.json for every scenario; returns the paths written."""
    out = Path(directory) / "vllm"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for scenario in run.scenarios:
        path = out / f"{scenario.summary.name}.json"
        path.write_text(json.dumps(to_vllm(run, scenario)))
        paths.append(path)
    return paths
