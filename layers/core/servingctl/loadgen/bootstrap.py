"""Bootstrap confidence intervals for comparing one metric between two runs, and the verdict.

Each run's samples come in units that were measured independently (a request, or a burst round);
a unit may hold several values (a request's per-token ITL gaps), so resampling draws whole units
(a cluster bootstrap: tokens of one request are not independent). The statistic is the median (or
the mean), computed on the resampled multiset by weights, so one replicate costs a cumulative sum
instead of a concatenation and a sort (many values are binned: see _points). The interval is the percentile interval of the ratio
this run / baseline over independent resamples of both runs; a change is called only when it
excludes 1. Resampling is seeded from the metric's name: the same two runs give the same answer.

numpy does the work: this module serves the CLI's report (numpy is not in the Lambda layer).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
# Fewer units than this on either side and a percentile interval is not worth printing: a
# bootstrap of 4 requests' median can only draw from 4 values.
MIN_UNITS = 5
# Above this many values (ITL: one per token) the values are grouped into this many quantile bins.
GRID = 1000
# Replicates are computed in blocks of at most this many weight cells (replicates x values).
BLOCK_CELLS = 2_000_000

Statistic = Literal["median", "mean"]
Verdict = Literal["faster", "slower", "no change detected", "too few", "baseline 0"]


@dataclass(frozen=True)
class Change:
    """One metric compared: both point estimates, the change with its interval, and the verdict."""

    baseline: float | None
    run: float | None
    change_pct: float | None = None
    low_pct: float | None = None
    high_pct: float | None = None
    verdict: Verdict = "too few"
    units: tuple[int, int] = (0, 0)  # resampled units in the baseline, in this run
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


def seed_for(*names: str) -> int:
    """A stable seed for one comparison (crc32 of its names: no dependence on PYTHONHASHSEED)."""
    return zlib.crc32("/".join(names).encode())


def statistic(units: Sequence[Sequence[float]], kind: Statistic = "median") -> float | None:
    """The statistic of every value of every unit (None when there is none)."""
    values = [v for unit in units for v in unit]
    if not values:
        return None
    return float(np.median(values) if kind == "median" else np.mean(values))


def _points(units: list[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Ascending values and a unit x value count matrix; above GRID values, the values are grouped
    into GRID quantile bins of the pooled data, each represented by its mean (a median off by less
    than a bin, a thousandth of the distribution, instead of a replicate cost growing with tokens)."""
    values = np.concatenate([np.asarray(u, dtype=float) for u in units])
    owner = np.repeat(np.arange(len(units)), [len(u) for u in units])
    if len(values) <= GRID:
        order = np.argsort(values, kind="stable")
        membership = np.zeros((len(units), len(values)))
        membership[owner[order], np.arange(len(values))] = 1.0
        return values[order], membership
    edges = np.quantile(values, np.linspace(0.0, 1.0, GRID + 1))
    bins = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, GRID - 1)
    sizes = np.bincount(bins, minlength=GRID)
    used = sizes > 0  # ties leave some bins empty
    means = np.bincount(bins, weights=values, minlength=GRID)[used] / sizes[used]
    membership = np.zeros((len(units), GRID))
    np.add.at(membership, (owner, bins), 1.0)
    return means, membership[:, used]


def replicates(
    units: Sequence[Sequence[float]], rng: np.random.Generator, *, resamples: int = RESAMPLES, kind: Statistic = "median"
) -> np.ndarray:
    """The statistic over `resamples` resamples of the units (drawn with replacement, as many as given)."""
    units = [u for u in units if len(u)]
    values, membership = _points(units)
    counts = rng.multinomial(len(units), np.full(len(units), 1.0 / len(units)), size=resamples).astype(float)
    out = np.empty(resamples)
    block = max(1, BLOCK_CELLS // len(values))
    for start in range(0, resamples, block):
        weights = counts[start : start + block] @ membership  # replicate x value: how often each value was drawn
        if kind == "mean":
            out[start : start + block] = (weights * values).sum(axis=1) / weights.sum(axis=1)
            continue
        cumulative = np.cumsum(weights, axis=1)
        total = cumulative[:, -1:]
        # The k-th smallest (0-based) of a replicate is the first value whose cumulative weight
        # exceeds k; the median averages the ((total - 1) // 2)-th and the (total // 2)-th.
        low = (cumulative <= (total - 1) // 2).sum(axis=1)
        high = (cumulative <= total // 2).sum(axis=1)
        out[start : start + block] = (values[low] + values[high]) / 2.0
    return out


def interval(
    units: Sequence[Sequence[float]],
    *,
    seed: int,
    kind: Statistic = "median",
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """The statistic's bootstrap confidence interval over one run's units (None under MIN_UNITS units)."""
    units = [u for u in units if len(u)]
    if len(units) < MIN_UNITS:
        return None
    reps = replicates(units, np.random.default_rng(seed), resamples=resamples, kind=kind)
    tail = (1 - confidence) / 2 * 100
    low, high = (float(x) for x in np.percentile(reps, [tail, 100 - tail]))
    return low, high


def compare(
    baseline: Sequence[Sequence[float]],
    run: Sequence[Sequence[float]],
    *,
    higher_is_better: bool,
    seed: int,
    kind: Statistic = "median",
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Change:
    """Baseline against run: the change of the statistic in percent with its bootstrap interval, and
    "faster"/"slower" only when the interval of the ratio excludes 1."""
    base_units, run_units = [u for u in baseline if len(u)], [u for u in run if len(u)]
    b, r = statistic(base_units, kind), statistic(run_units, kind)
    units = (len(base_units), len(run_units))
    if b == 0 and r is not None:  # a change relative to nothing has no size
        return Change(b, r, None, verdict="baseline 0", units=units, confidence=confidence)
    if min(units) < MIN_UNITS or b is None or r is None:
        return Change(b, r, None if b is None or r is None else (r / b - 1) * 100, units=units, confidence=confidence)
    rng = np.random.default_rng(seed)
    base_reps = replicates(base_units, rng, resamples=resamples, kind=kind)
    run_reps = replicates(run_units, rng, resamples=resamples, kind=kind)
    valid = base_reps != 0
    ratios = run_reps[valid] / base_reps[valid]
    tail = (1 - confidence) / 2 * 100
    low, high = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    verdict: Verdict = "no change detected"
    if low > 1 or high < 1:
        verdict = "faster" if (low > 1) == higher_is_better else "slower"
    return Change(b, r, (r / b - 1) * 100, (low - 1) * 100, (high - 1) * 100, verdict, units, confidence)
