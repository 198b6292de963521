"""The parts of one scenario measured apart (workers on other hosts, or processes of this one):
each part's share, and the parts merged back into one scenario.

The merge puts every part on one timeline, recomputes the burst rounds over all parts, and judges
the whole against the server's counters: the earliest "before" snapshot of any part (all are read
before the common start) and one "after" snapshot read once every part finished. The self-check
kept is the busiest part's, with every part's reasons named.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from servingctl.loadgen.metrics import round_result, scenario_summary
from servingctl.loadgen.server_metrics import Snapshot, build_checks
from servingctl.schema.results import Calibration, ClientSelfCheck, RequestRecord, RoundResult, RunConfig, ScenarioResult

if TYPE_CHECKING:  # the runner spreads scenarios with this module: a runtime import would be a cycle
    from servingctl.loadgen.measure import Measurement

# A part starting later than this after the common instant is reported.
LATE_START_WARN_S = 1.0


def process_count(processes: int, concurrency: int, requests: int | None) -> int:
    """Processes a scenario is spread over: never more than its streams, nor than its requests (a
    process with nothing to send would only report its idle loop)."""
    return min(processes, concurrency, requests or concurrency)


def shares(total: int, count: int) -> list[int]:
    """`total` split into `count` near-equal whole parts, the larger first."""
    return [total // count + (1 if i < total % count else 0) for i in range(count)]


def _shifted(record: RequestRecord, offset_ns: int) -> RequestRecord:
    def move(value: int | None) -> int | None:
        return None if value is None else value + offset_ns

    return record.model_copy(
        update={
            "t_start_ns": record.t_start_ns + offset_ns,
            "t_first_chunk_ns": move(record.t_first_chunk_ns),
            "t_first_ns": move(record.t_first_ns),
            "t_first_answer_ns": move(record.t_first_answer_ns),
            "t_last_ns": move(record.t_last_ns),
            "t_end_ns": move(record.t_end_ns),
            "chunks": [(t + offset_ns, n) for t, n in record.chunks],
        }
    )


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


def _client(parts: list[Measurement], label: str, processes: int) -> ClientSelfCheck:
    """The busiest part's self-check, its reasons naming the part (counted from 1, as people count);
    client-bound if any part was, the machine busy if any part saw it."""
    busiest = max(range(len(parts)), key=lambda i: parts[i].client.cpu_share)
    reasons = [f"{label} {i} of {len(parts)}: {reason}" for i, part in enumerate(parts, 1) for reason in part.client.reasons]
    host = [f"{label} {i} of {len(parts)}: {reason}" for i, part in enumerate(parts, 1) for reason in part.client.host_reasons]
    update = {"client_bound": bool(reasons), "reasons": reasons, "host_busy": bool(host), "host_reasons": host}
    return parts[busiest].client.model_copy(update=update | {"processes": processes})


def merge_shards(
    config: RunConfig,
    calibration: Calibration,
    concurrency: int,
    parts: list[Measurement],
    after: Snapshot,
    *,
    same_host: bool = False,
) -> tuple[ScenarioResult, list[str]]:
    """One scenario from its shards' measurements (ordered by shard index) and a final snapshot;
    returns the result and warnings about the split itself (late starts). Parts of `same_host`
    (processes of one machine) are merged on the monotonic clock they share, exactly; others on
    their wall-clock starts."""
    label, plural = ("process", "processes") if same_host else ("shard", "shards")
    t0 = min(part.t0_wall for part in parts)
    t0_ns = min(part.t0_ns for part in parts) if same_host else 0
    records: list[RequestRecord] = []
    offsets = [part.t0_ns - t0_ns if same_host else round((part.t0_wall - t0).total_seconds() * 1e9) for part in parts]
    for part, offset in zip(parts, offsets, strict=True):
        records += [_shifted(r, offset) for r in part.records]
    records.sort(key=lambda r: (r.t_start_ns, r.index))
    rounds = _rounds(config, records)
    checks = build_checks(
        earliest_snapshot([part.before for part in parts]),
        after,
        client_completion_tokens=sum(r.completion_tokens or 0 for r in records),
        client_prompt_tokens=sum(r.prompt_tokens or 0 for r in records),
        salted=config.salt_mode != "none" and not any(part.prefix_reuse for part in parts),
        peak_running=max((p.peak_running for p in parts if p.peak_running is not None), default=None),
        # A verdict needs one sampler that saw enough: the best-sampled shard's count, not the sum.
        running_samples=max(p.running_samples for p in parts),
        intended_concurrency=concurrency,
        exact_peak=config.mode != "rate" and config.replay_speed is None,
    )
    name = parts[0].name
    summary = scenario_summary(
        name=name,
        config=config,
        calibration=calibration,
        concurrency=concurrency,
        records=records,
        rounds=rounds,
        server=checks,
        client=_client(parts, label, len(parts) if same_host else 1),
    )
    warnings = [
        f"{label} {i} of {len(parts)} started {part.late_start_s:.1f} s after the common start: the {plural} overlapped less"
        for i, part in enumerate(parts, 1)
        if part.late_start_s > LATE_START_WARN_S
    ]
    # Every shard scraped the same server: one view of it (the first shard that has one) is kept.
    viewer = next((i for i, part in enumerate(parts) if part.server_timeline), None)
    timeline = (
        []
        if viewer is None
        else [sample.model_copy(update={"t_ns": sample.t_ns + offsets[viewer]}) for sample in parts[viewer].server_timeline]
    )
    return ScenarioResult(
        summary=summary, calibration=calibration, t0_wall=t0, rounds=rounds, records=records, server_timeline=timeline
    ), warnings
