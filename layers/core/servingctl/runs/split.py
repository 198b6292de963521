"""One scenario across several workers: when the single worker's self-check says the client, not
the server, set the pace, the scenario is measured again by N workers started at the same instant,
each with its share of the concurrency, and their measurements are merged into one scenario.

This module plans the split (how many workers, each one's share, the common start); the merge is
the engine's (loadgen/shards.py: shards on one wall-clock timeline, which NTP keeps within
milliseconds across Lambda hosts). Rate mode is never split: its open-loop Poisson schedule would
change with the split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from servingctl.loadgen.shards import shares
from servingctl.schema.results import RunConfig, ScenarioSummary

# Workers start this long after the split is planned: enough for cold starts in the VPC.
START_LEAD_S = 5.0


@dataclass(frozen=True)
class ShardPlan:
    """One worker's share of a split scenario."""

    index: int
    count: int
    concurrency: int
    requests: int | None
    start_at: datetime


def shard_count(summary: ScenarioSummary, max_workers: int, requests: int | None, parts: int | None = None) -> int:
    """Workers needed so each stays under the self-check's CPU limit, plus one because a saturated
    client measures at most one core whatever it needed (at least 2), never more than the work has
    `parts` (a dataset's prompts sent once each, its conversations); 0 = no split."""
    if not summary.client_bound or summary.mode == "rate" or max_workers < 2 or summary.concurrency < 2:
        return 0
    client = summary.client
    needed = math.ceil(client.cpu_share / client.cpu_share_limit) + 1 if client.cpu_share_limit > 0 else max_workers
    upper = min(max_workers, summary.concurrency, requests if requests is not None else summary.concurrency)
    if parts is not None:
        upper = min(upper, parts)
    return max(2, min(needed, upper)) if upper >= 2 else 0


def plan_shards(
    summary: ScenarioSummary,
    config: RunConfig,
    max_workers: int,
    now: datetime,
    lead_s: float = START_LEAD_S,
    parts: int | None = None,
) -> list[ShardPlan]:
    """The shards of a client-bound scenario (empty when it is not split), at most `parts` of them."""
    count = shard_count(summary, max_workers, config.requests, parts)
    if not count:
        return []
    start_at = now + timedelta(seconds=lead_s)
    concurrencies = shares(summary.concurrency, count)
    requests = shares(config.requests, count) if config.requests is not None else [None] * count
    return [ShardPlan(i, count, concurrencies[i], requests[i], start_at) for i in range(count)]


def shard_config(config: RunConfig, shard: ShardPlan) -> RunConfig:
    """The run config one shard measures with (its share of the requests in sustained mode)."""
    return config.model_copy(update={"requests": shard.requests}) if shard.requests is not None else config
