"""The benchmark engine against the real vLLM on CPU (tiny local model): what a user checks before
trusting its numbers. Runs are small (short prompts, 32 output tokens) to stay fast on 2 cores."""

from __future__ import annotations

import asyncio

import pytest

from servingctl.loadgen.metrics import per_read
from servingctl.loadgen.outputs import read_results
from servingctl.loadgen.runner import run_benchmark
from servingctl.schema.results import RunConfig, RunResult
from servingctl_cli.main import main
from servingctl_twin.modelserver import ModelServerProcess

pytestmark = pytest.mark.e2e

MAX_TOKENS = 32


def bench(server: ModelServerProcess, **overrides) -> RunResult:
    config = RunConfig(
        **{
            "endpoint": server.url,
            "model": server.model,
            "input_tokens": [256],
            "concurrencies": [2],
            "warmup": 1,
            "rounds": 2,
            "max_tokens": MAX_TOKENS,
            "timeout_s": 120.0,
            **overrides,
        }
    )
    return asyncio.run(run_benchmark(config))


def test_cli_sweep_counts_equal_the_server_counters(vllm_server, tmp_path, capsys):
    code = main(
        [
            "bench",
            "--endpoint",
            vllm_server.url,
            "--model",
            vllm_server.model,
            "--input-tokens",
            "128,512",
            "--concurrency",
            "1,4",
            "--warmup",
            "1",
            "--rounds",
            "2",
            "--max-tokens",
            str(MAX_TOKENS),
            "--output",
            str(tmp_path),
        ]
    )
    assert code == 0, capsys.readouterr()
    run = read_results(tmp_path)
    assert len(run.scenarios) == 4
    assert (tmp_path / "server_metrics.png").is_file() and run.metadata.client_host.load_average_end is not None
    for scenario in run.scenarios:
        s, cal = scenario.summary, scenario.calibration
        assert cal.method == "tokenize" and cal.actual_tokens <= cal.target_tokens
        assert s.failed == 0 and s.ok == s.requests == 2 * s.concurrency
        # calibration equals what the server reports for every request (chat template included)
        assert {r.prompt_tokens for r in scenario.records} == {cal.actual_tokens}
        assert all(r.completion_tokens == MAX_TOKENS and r.finish_reason == "length" for r in scenario.records)
        assert s.token_counts_exact
        # the client's token sum equals vLLM's own generation counter delta
        assert s.server.available and s.server.generation_tokens_equal is True
        assert s.server.generation_tokens_delta == (s.requests + s.concurrency) * MAX_TOKENS
        assert s.server.prefix_cache_ok is True
        assert s.output_tok_s and s.ttft_ms.median
        # vLLM's /metrics over time: about one sample a second, every gauge and counter read
        timeline = scenario.server_timeline
        assert len(timeline) >= max(1, int(s.client.wall_seconds) - 1), (len(timeline), s.client.wall_seconds)
        assert all(p.running is not None and p.waiting is not None and p.kv_cache_usage is not None for p in timeline)
        assert all(0.0 <= p.kv_cache_usage <= 1.0 for p in timeline)
        tokens = [p.generation_tokens for p in timeline]
        assert tokens == sorted(tokens) and tokens[-1] - tokens[0] <= s.server.generation_tokens_delta
        # Decode rate per request from its first to its last token; a request whose tokens all came
        # in one read, or most of them in shared reads (the client was late: a busy machine), has
        # none, and the run says so.
        measured = [r for r in scenario.records if not r.warmup]
        spread = [r for r in measured if r.t_last_ns > r.t_first_ns and 2 * r.coalesced_gaps <= len(r.chunks) - 1]
        for r in measured:
            first = sum(tokens for t, tokens in r.chunks if t == r.t_first_ns)  # what arrived with the first token
            expected = (MAX_TOKENS - first) * 1e9 / (r.t_last_ns - r.t_first_ns) if r in spread else None
            assert r.decode_tok_s == pytest.approx(expected)
        assert s.decode_tok_s.count == len(spread)
        if len(spread) < len(measured):
            assert s.client_bound and any("late" in reason for reason in s.client.reasons), s.client
            assert any(reason.startswith("decode_tok_s:") for reason in s.unmeasured), s.unmeasured
        # TTFC (vLLM's: the role chunk) <= TTFT (first token) <= TTFOT (first answer token)
        assert all(r.ttfc_ms <= r.ttft_ms <= r.ttfot_ms for r in measured)


def test_salts_keep_the_prefix_cache_cold_and_none_lets_it_hit(vllm_server):
    salted = bench(vllm_server, input_tokens=[1024], concurrencies=[1]).scenarios[0].summary.server
    nonce = bench(vllm_server, input_tokens=[1024], concurrencies=[1], salt_mode="prompt-nonce").scenarios[0]
    unsalted = bench(vllm_server, input_tokens=[1024], concurrencies=[1], salt_mode="none").scenarios[0].summary.server
    assert salted.prefix_cache_queries_delta > 0 and salted.prefix_cache_hits_delta == 0 and salted.prefix_cache_ok
    assert nonce.summary.server.prefix_cache_hits_delta == 0
    assert nonce.calibration.warnings == [] and nonce.summary.mismatches.prompt_tokens == 0
    # the same long prompt three times in a row: vLLM reuses its blocks, and the check can see it
    assert unsalted.prefix_cache_hits_delta > 0 and unsalted.prefix_cache_ok is None


def test_speculative_chunks_carry_several_tokens_counted_exactly(vllm_spec_server):
    scenario = bench(vllm_spec_server, concurrencies=[2]).scenarios[0]
    s = scenario.summary
    assert s.failed == 0 and s.token_counts_exact
    assert max(s.tokens_per_chunk) > 1  # a chunk per engine step, several tokens per step
    for record in scenario.records:
        assert sum(tokens for _, tokens in record.chunks) == record.completion_tokens == MAX_TOKENS
        assert len(record.chunks) < MAX_TOKENS
    assert s.server.generation_tokens_equal is True
    assert s.server.spec_decode_acceptance_rate is not None and 0 <= s.server.spec_decode_acceptance_rate <= 1
    # the draft counters over time too (the chart's acceptance panel)
    assert scenario.server_timeline and all(
        p.spec_draft_tokens is not None and p.spec_accepted_tokens is not None for p in scenario.server_timeline
    )
    # token-normalized ITL has one sample per token after the first chunk, not one per chunk
    measured = [r for r in scenario.records if not r.warmup]
    # (chunks of one network read are coalesced: their tokens count with the read, their gaps are reported)
    assert s.itl_ms.count == sum(MAX_TOKENS - per_read(r.chunks)[0][1] for r in measured) > s.chunk_gap_ms.count
    assert s.coalesced_gaps == sum(len(r.chunks) - len(per_read(r.chunks)) for r in measured)


def test_saturation_sweep_with_an_slo_finds_a_concurrency_and_its_goodput(vllm_server, tmp_path, capsys):
    # A loose SLO on 2 CPU cores: the sweep stops at its bound or once queueing shows, never by a miss.
    code = main(
        [
            "bench",
            "--endpoint",
            vllm_server.url,
            "--model",
            vllm_server.model,
            "--input-tokens",
            "128",
            "--warmup",
            "1",
            "--rounds",
            "2",
            "--max-tokens",
            str(MAX_TOKENS),
            "--sweep",
            "--slo",
            "e2e_s=120,ttft_ms:p90=60000",
            "--sweep-max-concurrency",
            "4",
            "--output",
            str(tmp_path),
        ]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    run = read_results(tmp_path)
    steps = run.sweep.steps
    assert [s.concurrency for s in steps] == [1, 2, 4][: len(steps)] and all(s.met for s in steps)
    assert run.sweep.stop in ("max-concurrency", "over-saturated")
    assert run.sweep.found == (
        steps[-1].concurrency if run.sweep.stop == "max-concurrency" else max(s.concurrency for s in steps if not s.saturated)
    )
    at = next(s.summary for s in run.scenarios if s.summary.name == run.sweep.scenario)
    assert at.slo.goodput_rps > 0 and at.slo.goodput_tok_s == pytest.approx(at.slo.goodput_rps * MAX_TOKENS)
    assert f"highest concurrency meeting the SLOs = {run.sweep.found}, goodput {at.slo.goodput_rps:.2f} req/s" in out
    print(
        f"\nsweep on vLLM CPU: found c={run.sweep.found} ({run.sweep.stop}), goodput {at.slo.goodput_rps:.2f} req/s, "
        f"{at.slo.goodput_tok_s:.1f} tok/s; steps "
        + ", ".join(f"c{s.concurrency}: TTFT {s.ttft_median_ms:.0f} ms, {s.output_tok_s:.1f} tok/s" for s in steps)
    )
