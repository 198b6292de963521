"""Hand-made RunResult fixtures: records with chosen chunk timings, summaries derived from them
with the engine's statistics (no engine run, no server)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servingctl.loadgen.metrics import chunk_gaps_ms, itl_samples_ms, round_result, tokens_per_chunk, with_request_metrics
from servingctl.loadgen.stats import summarize
from servingctl.schema.results import (
    Calibration,
    ClientSelfCheck,
    MetricSummary,
    RequestRecord,
    RunConfig,
    RunMetadata,
    RunResult,
    ScenarioResult,
    ScenarioSummary,
    ServerChecks,
    scenario_name,
)

MS = 1_000_000
MAX_TOKENS = 4
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def make_record(
    name: str,
    rnd: int,
    index: int,
    start_ms: float,
    ttft_ms: float,
    gaps_ms: list[float],
    tokens: list[int],
    *,
    warmup: bool = False,
    ok: bool = True,
) -> RequestRecord:
    """One request: chunks after TTFT separated by gaps_ms, carrying `tokens` tokens each."""
    t_start = int(start_ms * MS)
    t = t_start + int(ttft_ms * MS)
    chunks = [(t, tokens[0])]
    for gap, n in zip(gaps_ms, tokens[1:], strict=False):
        t += int(gap * MS)
        chunks.append((t, n))
    if not ok:
        return with_request_metrics(
            RequestRecord(
                scenario=name,
                round=rnd,
                index=index,
                warmup=warmup,
                ok=False,
                error_kind="stream_cut",
                error="stream ended before [DONE]",
                t_start_ns=t_start,
                t_first_ns=chunks[0][0],
                t_end_ns=chunks[0][0] + MS,
                chunks=chunks[:1],
                token_counts_exact=True,
            )
        )
    return with_request_metrics(
        RequestRecord(
            scenario=name,
            round=rnd,
            index=index,
            warmup=warmup,
            ok=True,
            t_start_ns=t_start,
            t_first_ns=chunks[0][0],
            t_last_ns=chunks[-1][0],
            t_end_ns=chunks[-1][0] + MS,
            prompt_tokens=None,
            completion_tokens=sum(tokens),
            finish_reason="length",
            chunks=chunks,
            token_counts_exact=True,
        )
    )


def make_scenario(
    input_tokens: int,
    concurrency: int,
    *,
    ttft_ms: float,
    gap_ms: float,
    rounds: int = 2,
    fail_index: int | None = None,
    client_bound: bool = False,
    spec_rate: float | None = None,
) -> ScenarioResult:
    """A burst scenario: one warm-up round then `rounds` measured rounds of `concurrency` requests.
    Request j of a round starts j ms after the round and waits j x 10 ms longer for its first token."""
    name = scenario_name(input_tokens, concurrency)
    records, round_results = [], []
    index = 0
    for rnd in range(rounds + 1):
        warmup = rnd == 0
        base = rnd * 1000.0
        batch = []
        for j in range(concurrency):
            ok = index != fail_index
            batch.append(
                make_record(name, rnd, index, base + j, ttft_ms + 10 * j, [gap_ms, gap_ms * 2], [1, 2, 1], warmup=warmup, ok=ok)
            )
            index += 1
        records += batch
        round_results.append(round_result(rnd, warmup, batch))
    measured = [r for r in records if not r.warmup]
    good = [r for r in measured if r.ok]
    aggregates = [r.output_tok_s for r in round_results if not r.warmup and r.output_tok_s]
    failed = len(measured) - len(good)
    summary = ScenarioSummary(
        name=name,
        input_tokens_target=input_tokens,
        input_tokens=input_tokens - 2,
        concurrency=concurrency,
        mode="burst",
        max_tokens=MAX_TOKENS,
        requests=len(measured),
        ok=len(good),
        failed=failed,
        failures_by_kind={"stream_cut": failed} if failed else {},
        failure_examples={"stream_cut": "RemoteProtocolError: peer closed connection"} if failed else {},
        failure_rate=failed / len(measured),
        output_tok_s=summarize(aggregates).median,
        rounds_output_tok_s=aggregates,
        ttft_ms=summarize(r.ttft_ms for r in good),
        e2e_ms=summarize(r.e2e_ms for r in good),
        e2e_tok_s=summarize(r.e2e_tok_s for r in good),
        decode_tok_s=summarize(r.decode_tok_s for r in good),
        tpot_ms=summarize(r.tpot_ms for r in good),
        itl_ms=summarize(v for r in good for v in itl_samples_ms(r.chunks)),
        chunk_gap_ms=summarize(v for r in good for v in chunk_gaps_ms(r.chunks)),
        tokens_per_chunk=tokens_per_chunk(good),
        token_counts_exact=True,
        server=ServerChecks(
            available=True,
            generation_tokens_delta=float(sum(r.completion_tokens or 0 for r in records)),
            client_completion_tokens=sum(r.completion_tokens or 0 for r in records),
            generation_tokens_equal=True,
            prefix_cache_queries_delta=float(len(records) * input_tokens),
            prefix_cache_hits_delta=0.0,
            prefix_cache_ok=True,
            spec_decode_draft_tokens_delta=100.0 if spec_rate is not None else None,
            spec_decode_accepted_tokens_delta=100.0 * spec_rate if spec_rate is not None else None,
            spec_decode_acceptance_rate=spec_rate,
            peak_running=concurrency,
            intended_concurrency=concurrency,
            peak_running_ok=True,
        ),
        client=ClientSelfCheck(
            loop_lag_ms=MetricSummary(count=10, p99=25.0 if client_bound else 0.4),
            cpu_seconds=0.5,
            wall_seconds=2.0,
            cpu_share=0.95 if client_bound else 0.25,
            lag_p99_limit_ms=5.0,
            cpu_share_limit=0.8,
            client_bound=client_bound,
            reasons=["event-loop lag p99 25.0 ms > 5.0 ms"] if client_bound else [],
        ),
        client_bound=client_bound,
    )
    calibration = Calibration(
        target_tokens=input_tokens,
        actual_tokens=input_tokens - 2,
        repetitions=input_tokens // 8,
        method="tokenize",
        unit="This is deterministic benchmark input text. ",
        probes=7,
    )
    return ScenarioResult(summary=summary, calibration=calibration, t0_wall=T0, rounds=round_results, records=records)


def make_run(run_id: str, cells: dict[tuple[int, int], dict], *, model: str = "tiny") -> RunResult:
    """A run over (input tokens, concurrency) cells, each with make_scenario's keyword arguments."""
    scenarios = [make_scenario(i, c, **kwargs) for (i, c), kwargs in cells.items()]
    inputs = sorted({i for i, _ in cells})
    return RunResult(
        config=RunConfig(
            endpoint="http://127.0.0.1:8000",
            model=model,
            input_tokens=inputs,
            concurrencies=sorted({c for _, c in cells}),
            rounds=2,
            warmup=1,
            max_tokens=MAX_TOKENS,
            headers={"X-LLM-Profile": "deepseek-v4-flash", "Authorization": "Bearer sk-secret"},
        ),
        metadata=RunMetadata(
            run_id=run_id,
            client_version="0.1.0",
            python_version="3.12.1",
            hostname="bench-host",
            server_version={"version": "0.32.0"},
            server_models={"data": [{"id": model}]},
            started_at=T0,
            finished_at=T0,
        ),
        calibrations=[s.calibration for s in scenarios],
        scenarios=scenarios,
        failed_scenarios=[s.summary.name for s in scenarios if s.summary.failed],
    )


@pytest.fixture
def run() -> RunResult:
    """Two input lengths x two concurrencies; one failed request; one client-bound scenario."""
    return make_run(
        "mtp-on",
        {
            (256, 1): {"ttft_ms": 100.0, "gap_ms": 10.0, "spec_rate": 0.66},
            (256, 2): {"ttft_ms": 150.0, "gap_ms": 12.0, "spec_rate": 0.66, "fail_index": 3},
            (2048, 1): {"ttft_ms": 180.0, "gap_ms": 10.0, "spec_rate": 0.66},
            (2048, 2): {"ttft_ms": 270.0, "gap_ms": 12.0, "spec_rate": 0.66, "client_bound": True},
        },
    )


@pytest.fixture
def baseline() -> RunResult:
    """The same matrix, slower decode and lower TTFT (no speculative decoding), minus one cell."""
    return make_run(
        "mtp-off",
        {
            (256, 1): {"ttft_ms": 90.0, "gap_ms": 20.0},
            (256, 2): {"ttft_ms": 140.0, "gap_ms": 24.0},
            (2048, 1): {"ttft_ms": 170.0, "gap_ms": 20.0},
        },
    )


@pytest.fixture
def runs_of() -> Any:
    """make_run for tests that choose their own cells (conftest is not importable under importlib mode)."""
    return make_run
