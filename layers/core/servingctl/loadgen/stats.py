"""Distribution statistics of one metric: min, mean, median, p90, p95, p99, max and count.

Percentiles use linear interpolation between order statistics (numpy's default "linear" method):
rank = q x (n - 1). A percentile q cannot be told apart from the maximum with fewer than
1 / (1 - q) samples (p90: 10, p95: 20, p99: 100), so each such percentile gets a warning.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from servingctl.schema.results import MetricSummary

PERCENTILES: tuple[tuple[str, float], ...] = (("p90", 0.90), ("p95", 0.95), ("p99", 0.99))


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ascending values by linear interpolation (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = q * (len(sorted_values) - 1)
    low = math.floor(rank)
    high = math.ceil(rank)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def min_samples(q: float) -> int:
    """Fewest samples for which the q-quantile is not simply the largest sample's neighbourhood."""
    return math.ceil(round(1.0 / (1.0 - q), 9))


def resolved(value: float | None, count: int, q: float) -> float | None:
    """The q-quantile `value` of `count` samples where they resolve it (min_samples), else None."""
    return value if count >= min_samples(q) else None


def tail_rule() -> str:
    """The rule for showing a percentile, in words: 'percentiles need p90 >= 10 samples, p95 >= 20, ...'."""
    first, *rest = [f"{name} >= {min_samples(q)}" for name, q in PERCENTILES]
    return f"percentiles need {first} samples, {', '.join(rest)}; – n=N: too few"


def summarize(values: Iterable[float]) -> MetricSummary:
    """Summary of a metric's samples (None values must be filtered out by the caller)."""
    data = sorted(values)
    if not data:
        return MetricSummary(count=0, warnings=["no samples"])
    summary: dict[str, float] = {name: percentile(data, q) for name, q in PERCENTILES}
    warnings = [
        f"{name} from {len(data)} samples (needs >= {min_samples(q)} to resolve)"
        for name, q in PERCENTILES
        if len(data) < min_samples(q)
    ]
    return MetricSummary(
        count=len(data),
        min=data[0],
        mean=math.fsum(data) / len(data),
        median=percentile(data, 0.5),
        max=data[-1],
        warnings=warnings,
        **summary,
    )
