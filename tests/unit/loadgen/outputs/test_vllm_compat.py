"""The vllm bench serve export: vLLM's key names and units, values computed from the records."""

import json
import math

import pytest

from servingctl.loadgen.outputs import to_vllm, write_vllm

# Keys of vLLM's result file (vllm/benchmarks/serve.py: main's result_json merged with benchmark's
# result, --save-detailed, default percentile metrics ttft,tpot,itl plus e2el).
VLLM_KEYS = {
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    *(f"{stat}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")),
}


def _scenario(run, name):
    return next(s for s in run.scenarios if s.summary.name == name)


def test_files_are_named_per_scenario_and_carry_vllm_keys(run, tmp_path):
    paths = write_vllm(run, tmp_path)
    assert sorted(p.name for p in paths) == ["in2048-c1.json", "in2048-c2.json", "in256-c1.json", "in256-c2.json"]
    assert all(p.parent == tmp_path / "vllm" for p in paths)
    data = json.loads((tmp_path / "vllm" / "in256-c2.json").read_text())
    assert data.keys() >= VLLM_KEYS
    assert data["max_concurrency"] == 2
    assert data["request_rate"] == "inf"
    assert data["backend"] == "openai-chat"
    assert data["model_id"] == "tiny"


def test_per_request_lists_are_seconds_and_exclude_warmups(run):
    scenario = _scenario(run, "in256-c1")
    data = to_vllm(run, scenario)
    # One warm-up round and two measured rounds of one request: TTFT 100 ms each, 4 tokens in
    # chunks of 1, 2, 1 tokens after gaps of 10 and 20 ms, stream end 1 ms after the last chunk.
    assert data["num_prompts"] == 2
    assert data["ttfts"] == pytest.approx([0.1, 0.1])
    assert data["latencies"] == pytest.approx([0.131, 0.131])
    assert data["output_lens"] == [4, 4]
    assert data["input_lens"] == [254, 254]
    # Token-normalized: the 2-token chunk's 10 ms gap becomes two samples of 5 ms.
    assert data["itls"] == [pytest.approx([0.005, 0.005, 0.020])] * 2
    assert data["servingctl"]["chunk_gaps_ms"] == [pytest.approx([10.0, 20.0])] * 2
    assert data["generated_texts"] == ["", ""]
    assert data["errors"] == ["", ""]
    # start_times are epoch seconds: round 1 at t0 + 1 s, round 2 at t0 + 2 s.
    t0 = scenario.t0_wall.timestamp()
    assert data["start_times"] == pytest.approx([t0 + 1.0, t0 + 2.0])


def test_summary_figures_follow_vllm_formulas(run):
    data = to_vllm(run, _scenario(run, "in256-c2"))
    # Measured: 4 requests, request index 3 (round 1, second slot) failed after its first chunk.
    assert (data["completed"], data["failed"]) == (3, 1)
    assert data["output_lens"] == [4, 0, 4, 4]
    assert data["errors"][1].startswith("stream_cut")
    assert data["total_output_tokens"] == 12
    assert data["total_input_tokens"] == 3 * 254
    # Burst duration = sum of the measured rounds' wall times (first send to last end).
    scenario = _scenario(run, "in256-c2")
    rounds = [r for r in scenario.rounds if not r.warmup]
    duration = sum(r.t_end_ns - r.t_start_ns for r in rounds) / 1e9
    assert data["duration"] == pytest.approx(duration)
    assert data["output_throughput"] == pytest.approx(12 / duration)
    assert data["request_throughput"] == pytest.approx(3 / duration)
    assert data["total_token_throughput"] == pytest.approx((12 + 3 * 254) / duration)
    # TTFTs of successful requests: 150, 150, 160 ms (slot j waits 10 x j ms longer).
    assert data["mean_ttft_ms"] == pytest.approx(460 / 3)
    assert data["median_ttft_ms"] == pytest.approx(150.0)
    assert data["std_ttft_ms"] == pytest.approx(math.sqrt(((150 - 460 / 3) ** 2 * 2 + (160 - 460 / 3) ** 2) / 3))
    assert data["p99_ttft_ms"] == pytest.approx(150 + 10 * 0.98)
    # E2E = TTFT + 12 + 24 ms of gaps + 1 ms; TPOT = (E2E - TTFT) / 3.
    assert data["median_e2el_ms"] == pytest.approx(150 + 37)
    assert data["median_tpot_ms"] == pytest.approx(37 / 3)
    # ITL samples per request: 6, 6, 24 ms -> over three requests median 6 ms.
    assert data["median_itl_ms"] == pytest.approx(6.0)
    assert data["mean_itl_ms"] == pytest.approx(12.0)
    assert data["max_concurrent_requests"] == 2
    assert data["max_output_tokens_per_s"] == 8.0  # round 2: two requests x 4 tokens within one 1 s bucket
    assert data["servingctl"]["output_tok_s"] == scenario.summary.output_tok_s


def test_spec_decode_acceptance_in_percent(run):
    data = to_vllm(run, _scenario(run, "in256-c1"))
    assert data["spec_decode_acceptance_rate"] == pytest.approx(66.0)
    assert data["spec_decode_draft_tokens"] == 100
    assert data["spec_decode_accepted_tokens"] == 66


def test_differences_from_vllm_are_documented_in_the_file(run):
    notes = to_vllm(run, run.scenarios[0])["servingctl"]["notes"]
    assert {"itls", "ttfts", "duration", "start_times", "generated_texts"} <= notes.keys()
    assert "token-normalized" in notes["itls"]
