"""One scenario across several workers: when the single worker's self-check says the client, not
the server, set the pace, the scenario is measured again by N workers started at the same instant,
each with its share of the concurrency, and their measurements are merged into one scenario.

The merge puts every shard on one timeline (each shard's t=0 is anchored to the wall clock, which
NTP keeps within milliseconds across Lambda hosts), recomputes the burst rounds over all shards,
and judges the whole against the server's counters: the earliest "before" snapshot of any shard
(all are read before the common start) and one "after" snapshot read once every shard finished.
Rate mode is never split: its open-loop Poisson schedule would change with the split.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from servingctl.bench.metrics import round_result, scenario_summary
from servingctl.schema.results import Calibration, ClientSelfCheck, RequestRecord, RoundResult, RunConfig, ScenarioResult, ScenarioSummary
from servingctl.bench.runner import Measurement
from servingctl.bench.server_metrics import Snapshot, build_checks

# Workers start this long after the split is planned: enough for cold starts in the VPC.
START_LEAD_S = 5.0
# A shard starting later than this after the common instant is reported.
LATE_START_WARN_S = 1.0


@dataclass(frozen=True)
class ShardPlan:
    """One worker's share of a split scenario."""

    index: int
    count: int
    concurrency: int
    requests: int | None
    start_at: datetime


def shard_count(summary: ScenarioSummary, max_workers: int, requests: int | None) -> int:
    """Workers needed so each stays under the self-check's CPU limit, plus one because a saturated
    client measures at most one core whatever it needed (at least 2); 0 = no split."""
    if not summary.client_bound or summary.mode == "rate" or max_workers < 2 or summary.concurrency < 2:
        return 0
    client = summary.client
    needed = math.ceil(client.cpu_share / client.cpu_share_limit) + 1 if client.cpu_share_limit > 0 else max_workers
    upper = min(max_workers, summary.concurrency, requests if requests is not None else summary.concurrency)
    return max(2, min(needed, upper)) if upper >= 2 else 0


def _shares(total: int, count: int) -> list[int]:
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def plan_shards(summary: ScenarioSummary, config: RunConfig, max_workers: int, now: datetime, lead_s: float = START_LEAD_S) -> list[ShardPlan]:
    """The shards of a client-bound scenario (empty when it is not split)."""
    count = shard_count(summary, max_workers, config.requests)
    if not count:
        return []
    start_at = now + timedelta(seconds=lead_s)
    concurrencies = _shares(summary.concurrency, count)
    requests = _shares(config.requests, count) if config.requests is not None else [None] * count
    return [ShardPlan(i, count, concurrencies[i], requests[i], start_at) for i in range(count)]


def shard_config(config: RunConfig, shard: ShardPlan) -> RunConfig:
    """The run config one shard measures with (its share of the requests in sustained mode)."""
    return config.model_copy(update={"requests": shard.requests}) if shard.requests is not None else config


def _shifted(record: RequestRecord, offset_ns: int) -> RequestRecord:
    def move(value: int | None) -> int | None:
        return None if value is None else value + offset_ns

    return record.model_copy(update={
        "t_start_ns": record.t_start_ns + offset_ns,
        "t_first_ns": move(record.t_first_ns),
        "t_last_ns": move(record.t_last_ns),
        "t_end_ns": move(record.t_end_ns),
        "chunks": [(t + offset_ns, n) for t, n in record.chunks],
    })


def _rounds(config: RunConfig, records: list[RequestRecord]) -> list[RoundResult]:
    """Burst rounds over every shard: round r = all shards' requests of round r (warm-ups first)."""
    groups: dict[tuple[bool, int], list[RequestRecord]] = defaultdict(list)
    for record in records:
        if record.warmup or config.mode == "burst":
            groups[(not record.warmup, record.round)].append(record)
    return [round_result(rnd, not measured, group) for (measured, rnd), group in sorted(groups.items())]


def earliest_snapshot(snapshots: list[Snapshot]) -> Snapshot:
    """Counters only grow: the per-counter minimum is the state before any shard sent a request."""
    missing = next((s.unavailable for s in snapshots if s.unavailable), None)
    if missing:
        return Snapshot(unavailable=missing)
    names = set.intersection(*(set(s.totals) for s in snapshots))
    return Snapshot(totals={n: min(s.totals[n] for s in snapshots) for n in names})


def _client(parts: list[Measurement]) -> ClientSelfCheck:
    """The busiest shard's self-check, its reasons naming the shard; client-bound if any shard was."""
    busiest = max(range(len(parts)), key=lambda i: parts[i].client.cpu_share)
    reasons = [f"shard {i}: {reason}" for i, part in enumerate(parts) for reason in part.client.reasons]
    return parts[busiest].client.model_copy(update={"client_bound": bool(reasons), "reasons": reasons})


def merge_shards(
    config: RunConfig, calibration: Calibration, concurrency: int, parts: list[Measurement], after: Snapshot
) -> tuple[ScenarioResult, list[str]]:
    """One scenario from its shards' measurements (ordered by shard index) and a final snapshot;
    returns the result and warnings about the split itself (late starts)."""
    t0 = min(part.t0_wall for part in parts)
    records: list[RequestRecord] = []
    for part in parts:
        offset = round((part.t0_wall - t0).total_seconds() * 1e9)
        records += [_shifted(r, offset) for r in part.records]
    records.sort(key=lambda r: (r.t_start_ns, r.index))
    rounds = _rounds(config, records)
    checks = build_checks(
        earliest_snapshot([part.before for part in parts]),
        after,
        client_completion_tokens=sum(r.completion_tokens or 0 for r in records),
        client_prompt_tokens=sum(r.prompt_tokens or 0 for r in records),
        salted=config.salt_mode != "none",
        peak_running=max((p.peak_running for p in parts if p.peak_running is not None), default=None),
        # A verdict needs one sampler that saw enough: the best-sampled shard's count, not the sum.
        running_samples=max(p.running_samples for p in parts),
        intended_concurrency=concurrency,
        exact_peak=config.mode != "rate",
    )
    name = parts[0].name
    summary = scenario_summary(
        name=name, config=config, calibration=calibration, concurrency=concurrency, records=records, rounds=rounds,
        server=checks, client=_client(parts),
    )
    warnings = [
        f"shard {i} started {part.late_start_s:.1f} s after the common start: the shards overlapped less"
        for i, part in enumerate(parts)
        if part.late_start_s > LATE_START_WARN_S
    ]
    # Every shard scraped the same server: one view of it (the first shard that has one) is kept.
    viewer = next((part for part in parts if part.server_timeline), None)
    timeline = [] if viewer is None else [
        sample.model_copy(update={"t_ns": sample.t_ns + round((viewer.t0_wall - t0).total_seconds() * 1e9)})
        for sample in viewer.server_timeline
    ]
    return ScenarioResult(summary=summary, calibration=calibration, t0_wall=t0, rounds=rounds, records=records,
                          server_timeline=timeline), warnings
