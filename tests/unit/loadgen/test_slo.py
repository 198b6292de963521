"""SLOs as input and goodput: parsing with errors naming the part, vLLM's --goodput semantics per
request (inclusive limits, failures never good, one-token requests with TPOT 0), percentile SLOs on
the scenario, the required share, and the same figure in the summary and the vLLM export."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from servingctl.loadgen.metrics import round_result, scenario_summary, with_request_metrics
from servingctl.loadgen.outputs.vllm_compat import to_vllm
from servingctl.loadgen.slo import SloError, meets, parse_slos
from servingctl.schema.results import (
    Calibration,
    ClientSelfCheck,
    MetricSummary,
    RequestRecord,
    RunConfig,
    RunMetadata,
    RunResult,
    ScenarioResult,
    ServerChecks,
    Slo,
)

MS = 1_000_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def record(
    index: int, ttft_ms: float, gap_ms: float = 10.0, tokens: int = 5, *, ok: bool = True, start_ms: float = 0.0
) -> RequestRecord:
    """A request sent at start_ms whose first token comes after ttft_ms, then one token every gap_ms."""
    t0 = int(start_ms * MS)
    first = t0 + int(ttft_ms * MS)
    chunks = [(first + int(i * gap_ms * MS), 1) for i in range(tokens)]
    return with_request_metrics(
        RequestRecord(
            scenario="in100-c2",
            round=0,
            index=index,
            ok=ok,
            error_kind=None if ok else "timeout",
            t_start_ns=t0,
            t_first_ns=first,
            t_last_ns=chunks[-1][0],
            t_end_ns=chunks[-1][0],
            completion_tokens=tokens if ok else None,
            chunks=chunks if ok else [],
            token_counts_exact=True,
        )
    )


def summarize(records: list[RequestRecord], **config) -> ScenarioResult:
    cfg = RunConfig(endpoint="http://x", model="m", input_tokens=[100], concurrencies=[2], rounds=1, warmup=0, **config)
    calibration = Calibration(target_tokens=100, actual_tokens=100, repetitions=1, method="tokenize", unit="u")
    rounds = [round_result(0, False, records)]
    client = ClientSelfCheck(
        loop_lag_ms=MetricSummary(),
        cpu_seconds=0,
        wall_seconds=1,
        cpu_share=0,
        lag_p99_limit_ms=1,
        cpu_share_limit=1,
        client_bound=False,
    )
    summary = scenario_summary(
        name="in100-c2",
        config=cfg,
        calibration=calibration,
        concurrency=2,
        records=records,
        rounds=rounds,
        server=ServerChecks(available=False),
        client=client,
    )
    return ScenarioResult(summary=summary, calibration=calibration, t0_wall=T0, rounds=rounds, records=records)


def test_parse_reads_per_request_and_percentile_slos():
    slos = parse_slos("ttft_ms=500, itl_ms:p90=50,e2e_s=20")
    assert slos == [
        Slo(metric="ttft_ms", limit=500),
        Slo(metric="itl_ms", limit=50, percentile="p90"),
        Slo(metric="e2e_s", limit=20),
    ]
    assert [s.label() for s in slos] == ["ttft_ms=500", "itl_ms:p90=50", "e2e_s=20"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ttft=500", "metric must be one of ttft_ms, itl_ms or e2e_s"),
        ("ttft_ms:p80=500", "percentile must be one of p50, p90, p95 or p99"),
        ("ttft_ms=fast", "limit must be a positive number (ms)"),
        ("e2e_s=0", "limit must be a positive number (seconds)"),
        ("ttft_ms500", "expected METRIC=LIMIT"),
        ("ttft_ms=1,ttft_ms=2", "each metric and percentile at most once"),
        (",", "expected at least one SLO"),
    ],
)
def test_parse_errors_name_the_part_and_the_allowed_values(text, says):
    with pytest.raises(SloError, match=re.escape(says)):
        parse_slos(text)


def test_a_request_meets_an_slo_at_its_limit_and_misses_it_one_past():
    r = record(0, ttft_ms=500.0)
    assert meets(r, [Slo(metric="ttft_ms", limit=500)])
    assert not meets(r, [Slo(metric="ttft_ms", limit=499.999)])
    failed = record(1, ttft_ms=1.0, ok=False)
    assert not meets(failed, [Slo(metric="ttft_ms", limit=500)])
    one_token = record(2, ttft_ms=1.0, tokens=1)  # vLLM: TPOT 0 for a single token
    assert one_token.tpot_ms is None and meets(one_token, [Slo(metric="itl_ms", limit=0.001)])


def test_goodput_counts_requests_meeting_every_slo_per_second_of_the_rounds():
    # 4 requests in one round of 1 s: TTFT 100, 200, 300 and a failure.
    records = [record(0, 100, start_ms=0), record(1, 200), record(2, 300), record(3, 50, ok=False)]
    records[0] = records[0].model_copy(update={"t_end_ns": 1000 * MS})
    slo = summarize(records, slos=[Slo(metric="ttft_ms", limit=200), Slo(metric="itl_ms", limit=10)], slo_share=0.5).summary.slo
    assert slo.duration_s == pytest.approx(1.0)
    assert slo.good_requests == 2 and slo.good_share == 0.5 and slo.met  # share at the limit holds
    assert slo.goodput_rps == pytest.approx(2.0) and slo.goodput_tok_s == pytest.approx(10.0)
    assert slo.throughput_rps == pytest.approx(3.0)
    assert [c.value for c in slo.checks] == [0.5, 0.75]
    strict = summarize(records, slos=[Slo(metric="ttft_ms", limit=200)], slo_share=0.51).summary.slo
    assert not strict.met and strict.goodput_rps == slo.goodput_rps  # one past the share: missed, same goodput


def test_a_percentile_slo_judges_the_scenarios_percentile():
    records = [record(i, ttft_ms=100.0 + 10 * i) for i in range(11)]  # p90 TTFT = 190 ms
    held = summarize(records, slos=[Slo(metric="ttft_ms", limit=190, percentile="p90")]).summary.slo
    assert held.met and held.checks[0].value == pytest.approx(190.0)
    assert held.good_requests == 11  # no per-request SLO: every successful request counts
    missed = summarize(records, slos=[Slo(metric="ttft_ms", limit=189.9, percentile="p90")]).summary.slo
    assert not missed.met
    e2e = summarize(records, slos=[Slo(metric="e2e_s", limit=1, percentile="p50")]).summary.slo
    assert e2e.checks[0].value == pytest.approx(0.19)  # seconds, from the median E2E in ms


def test_without_slos_there_is_no_verdict_and_the_export_keeps_goodput_null():
    scenario = summarize([record(0, 100)])
    run = RunResult(
        config=RunConfig(endpoint="http://x", model="m"),
        metadata=RunMetadata(run_id="r", client_version="0", python_version="3", started_at=T0),
        scenarios=[scenario],
    )
    assert scenario.summary.slo is None and to_vllm(run, scenario)["request_goodput"] is None


def test_the_vllm_export_writes_request_goodput_when_an_slo_is_given():
    records = [record(0, 100), record(1, 300)]
    scenario = summarize(records, slos=[Slo(metric="ttft_ms", limit=200)])
    run = RunResult(
        config=RunConfig(endpoint="http://x", model="m"),
        metadata=RunMetadata(run_id="r", client_version="0", python_version="3", started_at=T0),
        scenarios=[scenario],
    )
    out = to_vllm(run, scenario)
    assert out["request_goodput"] == pytest.approx(1 / out["duration"])
    assert out["request_goodput"] == pytest.approx(out["request_throughput"] / 2)
    assert out["servingctl"]["slo"]["good_requests"] == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"slo_share": 0}, "slo_share"),
        ({"slo_share": 1.01}, "slo_share"),
        ({"sweep": True}, "slos"),
        ({"sweep": True, "slos": [Slo(metric="ttft_ms", limit=1)], "input_tokens": [1, 2]}, "input_tokens"),
        ({"sweep": True, "slos": [Slo(metric="ttft_ms", limit=1)], "sweep_max_concurrency": 4097}, "sweep_max_concurrency"),
        ({"sweep": True, "slos": [Slo(metric="ttft_ms", limit=1)], "sweep_max_steps": 1}, "sweep_max_steps"),
    ],
)
def test_config_errors_name_the_field(change, field):
    with pytest.raises(ValidationError, match=field):
        RunConfig(endpoint="http://x", model="m", **change)
    if field == "slo_share":
        RunConfig(endpoint="http://x", model="m", slo_share=1.0)  # the limit itself is allowed
