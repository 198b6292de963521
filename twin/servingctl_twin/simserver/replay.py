"""Virtual-time replay of the reference benchmark on the engine core (no sleeping).

Runs closed bursts of C requests (unique salts, ``ignore_eos``) through ``Scheduler`` with the
same step rule as the live runtime (an idle engine starts a step with whatever is queued at that
moment), and reports what the reference's client would have measured. Used to fit and check the
timing table against FACTS.md and by tests to know the expected figures.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from servingctl_twin.simserver.prefix_cache import PrefixCache
from servingctl_twin.simserver.scheduler import Scheduler, Seq
from servingctl_twin.simserver.timing import TimingModel


@dataclass(frozen=True)
class BurstResult:
    """Median over rounds of the reference's burst figures."""

    output_tok_s: float
    median_ttft_ms: float


def burst(
    timing: TimingModel,
    input_tokens: int,
    concurrency: int,
    *,
    max_tokens: int = 256,
    max_num_seqs: int = 4,
    max_num_batched_tokens: int = 2048,
    mtp_tokens: int = 1,
    mtp_acceptance: float = 0.66,
    rounds: int = 5,
    seed: int = 42,
) -> BurstResult:
    """Replay ``rounds`` bursts and return the medians (output tok/s = tokens / round wall time)."""
    aggregates, ttfts = [], []
    for rnd in range(rounds):
        sched = Scheduler(timing, max_num_seqs, max_num_batched_tokens, mtp_tokens, mtp_acceptance, PrefixCache())
        seqs = [
            Seq(input_tokens, max_tokens, "length", [], random.Random(seed * 1000 + rnd * 64 + i)) for i in range(concurrency)
        ]
        now = timing.frontend_ms
        first: dict[int, float] = {}
        # The first arrival finds the engine idle and starts a step alone; the rest queue behind it.
        sched.add(seqs[0])
        step = sched.plan_step()
        for seq in seqs[1:]:
            sched.add(seq)
        while step is not None:
            now += step.duration_ms
            for seq, _ in sched.commit(step):
                first.setdefault(id(seq), now)
            step = sched.plan_step()
        aggregates.append(concurrency * max_tokens / (now / 1000))
        ttfts.append(statistics.median(first.values()))
    return BurstResult(statistics.median(aggregates), statistics.median(ttfts))
