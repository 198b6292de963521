"""Splitting a client-bound scenario across workers and merging it back: when to split and into
how many, each shard's share, and the merge (one timeline, rounds over all shards, token totals
checked against the server's counters, the busiest shard's self-check)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from servingctl.loadgen.measure import INDEX_STRIDE, Measurement
from servingctl.loadgen.metrics import round_result, scenario_summary, with_request_metrics
from servingctl.loadgen.selfcheck import judge
from servingctl.loadgen.server_metrics import GENERATION, PROMPT, Snapshot
from servingctl.loadgen.shards import earliest_snapshot, merge_shards
from servingctl.runs.split import plan_shards, shard_config, shard_count
from servingctl.schema.results import Calibration, RequestRecord, RunConfig, ServerChecks, ServerSample

MS = 1_000_000
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
CALIBRATION = Calibration(target_tokens=256, actual_tokens=254, repetitions=30, method="tokenize", unit="x ")
BURST = RunConfig(endpoint="http://alb", model="m", warmup=1, rounds=2, max_tokens=4)


def _summary(concurrency: int, cpu_share: float, *, mode: str = "burst", cpu_limit: float = 0.8):
    config = (
        BURST
        if mode == "burst"
        else RunConfig(
            endpoint="http://alb", model="m", mode=mode, rate=2.0 if mode == "rate" else None, requests=10, max_tokens=4
        )
    )
    record = with_request_metrics(
        RequestRecord(
            scenario="s",
            round=0,
            index=0,
            ok=True,
            t_start_ns=0,
            t_first_ns=MS,
            t_last_ns=3 * MS,
            t_end_ns=4 * MS,
            completion_tokens=4,
            chunks=[(MS, 1), (3 * MS, 3)],
        )
    )
    return scenario_summary(
        name="s",
        config=config,
        calibration=CALIBRATION,
        concurrency=concurrency,
        records=[record],
        rounds=[round_result(0, False, [record])],
        server=ServerChecks(available=False, reason="test"),
        client=judge([0.1] * 50, cpu_share, 1.0, 5.0, cpu_limit),
    )


@pytest.mark.parametrize(
    ("concurrency", "cpu_share", "mode", "max_workers", "expected"),
    [
        (8, 0.5, "burst", 4, 0),  # not client-bound: never split
        (8, 0.95, "burst", 4, 3),  # ceil(0.95 / 0.8) + 1 workers keep each under the limit
        (8, 2.5, "burst", 4, 4),  # capped at max_workers
        (2, 2.5, "burst", 4, 2),  # and at the concurrency: a worker holds at least one request
        (1, 0.95, "burst", 4, 0),  # one request in flight cannot be split
        (8, 0.95, "burst", 1, 0),  # max_workers 1 forbids splitting
        (8, 0.95, "rate", 4, 0),  # an open-loop schedule would change with the split
    ],
)
def test_shard_count(concurrency: int, cpu_share: float, mode: str, max_workers: int, expected: int) -> None:
    assert shard_count(_summary(concurrency, cpu_share, mode=mode), max_workers, None) == expected


def test_a_zero_cpu_limit_asks_for_every_allowed_worker() -> None:
    assert shard_count(_summary(8, 0.1, cpu_limit=0.0), 5, None) == 5


def test_shards_share_concurrency_and_requests_and_start_together() -> None:
    config = RunConfig(endpoint="http://alb", model="m", mode="sustained", requests=10, max_tokens=4)
    shards = plan_shards(_summary(7, 0.95, mode="sustained"), config, 4, T0, lead_s=5)
    assert [s.concurrency for s in shards] == [3, 2, 2] and sum(s.concurrency for s in shards) == 7
    assert [s.requests for s in shards] == [4, 3, 3]
    assert {s.start_at for s in shards} == {T0 + timedelta(seconds=5)}
    assert [shard_config(config, s).requests for s in shards] == [4, 3, 3]
    burst_shards = plan_shards(_summary(4, 0.95), BURST, 4, T0)
    assert [s.requests for s in burst_shards] == [None, None, None] and shard_config(BURST, burst_shards[0]) == BURST
    assert plan_shards(_summary(4, 0.1), BURST, 4, T0) == []


def _part(
    index: int, t0_offset_ms: float, before_generation: float, *, cpu: float = 0.5, late_s: float = 0.0, peak: int | None = 1
) -> Measurement:
    """A shard of 1 request per round (warm-up round 0, measured rounds 0 and 1), 4 tokens each."""
    records = []
    for n, (warmup, rnd) in enumerate([(True, 0), (False, 0), (False, 1)]):
        start = n * 100 * MS
        records.append(
            with_request_metrics(
                RequestRecord(
                    scenario="in256-c2",
                    round=rnd,
                    index=(index + 1) * INDEX_STRIDE + n,
                    warmup=warmup,
                    ok=True,
                    t_start_ns=start,
                    t_first_ns=start + 10 * MS,
                    t_last_ns=start + 40 * MS,
                    t_end_ns=start + 50 * MS,
                    prompt_tokens=254,
                    completion_tokens=4,
                    finish_reason="length",
                    chunks=[(start + 10 * MS, 1), (start + 40 * MS, 3)],
                    token_counts_exact=True,
                )
            )
        )
    before = Snapshot(totals={GENERATION: before_generation, PROMPT: 1000.0 + before_generation})
    return Measurement(
        name="in256-c2",
        concurrency=1,
        t0_wall=T0 + timedelta(milliseconds=t0_offset_ms),
        records=records,
        rounds=[],
        before=before,
        after=before,
        peak_running=peak,
        running_samples=10,
        client=judge([0.1] * 50, cpu, 1.0, 5.0, 0.8),
        late_start_s=late_s,
    )


def test_merge_puts_shards_on_one_timeline_and_builds_rounds_over_all_of_them() -> None:
    parts = [_part(0, 0.0, 100.0), _part(1, 20.0, 104.0)]
    after = Snapshot(totals={GENERATION: 124.0, PROMPT: 1000.0 + 124.0 + 6 * 254})
    result, warnings = merge_shards(BURST, CALIBRATION, 2, parts, after)
    s = result.summary
    assert result.t0_wall == T0 and warnings == []
    # shard 1 started 20 ms later: its records moved 20 ms on the common clock
    shard1 = [r for r in result.records if r.index >= 2 * INDEX_STRIDE]
    assert [r.t_start_ns for r in shard1] == [20 * MS, 120 * MS, 220 * MS]
    assert shard1[0].chunks[0][0] == 30 * MS
    assert len(result.records) == 6 and [r.index for r in result.records][:2] == [INDEX_STRIDE, 2 * INDEX_STRIDE]
    # one warm-up round and two measured rounds, each over both shards' requests
    assert [(r.warmup, r.index, r.ok) for r in result.rounds] == [(True, 0, 2), (False, 0, 2), (False, 1, 2)]
    assert result.rounds[1].t_start_ns == 100 * MS and result.rounds[1].t_end_ns == 170 * MS
    assert s.requests == 4 and s.concurrency == 2 and s.name == "in256-c2"
    assert s.output_tok_s == pytest.approx(8 / 0.070)  # 8 tokens over 70 ms per round


def test_merged_token_total_is_checked_against_the_servers_counters() -> None:
    parts = [_part(0, 0.0, 100.0), _part(1, 0.0, 104.0)]  # shard 1 read its counters after shard 0 sent 4 tokens
    assert earliest_snapshot([p.before for p in parts]).totals[GENERATION] == 100.0
    exact = Snapshot(totals={GENERATION: 124.0, PROMPT: 2124.0})
    result, _ = merge_shards(BURST, CALIBRATION, 2, parts, exact)
    server = result.summary.server
    assert server.generation_tokens_delta == 24.0 == server.client_completion_tokens and server.generation_tokens_equal
    extra = Snapshot(totals={GENERATION: 130.0, PROMPT: 2124.0})  # someone else used the server meanwhile
    other, _ = merge_shards(BURST, CALIBRATION, 2, parts, extra)
    assert other.summary.server.generation_tokens_equal is False
    assert "server generated 30 tokens, client counted 24" in other.summary.server.failures[0]


@pytest.mark.parametrize(
    ("same_host", "label", "plural", "processes"), [(False, "shard", "shards", 1), (True, "process", "processes", 2)]
)
def test_merge_keeps_the_busiest_shards_self_check_and_reports_late_starts(same_host, label, plural, processes) -> None:
    parts = [_part(0, 0.0, 100.0, cpu=0.3), _part(1, 0.0, 100.0, cpu=0.9, late_s=2.5, peak=2)]
    result, warnings = merge_shards(
        BURST, CALIBRATION, 2, parts, Snapshot(totals={GENERATION: 124.0, PROMPT: 2124.0}), same_host=same_host
    )
    client = result.summary.client
    assert client.cpu_share == 0.9 and result.summary.client_bound and client.processes == processes
    # the second part (index 1), as people count it
    assert client.reasons == [f"{label} 2 of 2: client CPU 90% of one core > 80%: the client sets the pace"]
    assert warnings == [f"{label} 2 of 2 started 2.5 s after the common start: the {plural} overlapped less"]
    assert result.summary.server.peak_running == 2 and result.summary.server.running_samples == 10


def test_merge_without_server_counters_marks_the_check_unavailable() -> None:
    parts = [_part(0, 0.0, 100.0), _part(1, 0.0, 100.0)]
    parts[1].before = Snapshot(unavailable="no usable /metrics (HTTP 404)")
    result, _ = merge_shards(BURST, CALIBRATION, 2, parts, Snapshot(totals={GENERATION: 124.0}))
    assert result.summary.server.available is False and "404" in result.summary.server.reason


def test_merge_keeps_one_shards_server_timeline_on_the_merged_clock() -> None:
    parts = [_part(0, 50.0, 100.0), _part(1, 0.0, 100.0)]  # shard 0 started 50 ms after shard 1
    parts[0].server_timeline = [ServerSample(t_ns=0, running=2), ServerSample(t_ns=1_000 * MS, running=2)]
    parts[1].server_timeline = [ServerSample(t_ns=0, running=1)]
    result, _ = merge_shards(BURST, CALIBRATION, 2, parts, Snapshot(totals={GENERATION: 124.0, PROMPT: 2124.0}))
    # the first shard with a view of the server, its times moved by its 50 ms late start
    assert [(p.t_ns, p.running) for p in result.server_timeline] == [(50 * MS, 2), (1_050 * MS, 2)]
    parts[0].server_timeline = []
    result, _ = merge_shards(BURST, CALIBRATION, 2, parts, Snapshot(totals={GENERATION: 124.0, PROMPT: 2124.0}))
    assert [(p.t_ns, p.running) for p in result.server_timeline] == [(0, 1)]
