"""Statistics: linear-interpolation percentiles (numpy's default), sample-count warnings."""

import pytest

from servingctl.loadgen.stats import min_samples, percentile, summarize


def test_percentile_interpolates_between_order_statistics():
    values = [10.0, 20.0, 30.0, 40.0]
    # rank = q x (n - 1): 0.5 -> 1.5 -> halfway between 20 and 30; 0.9 -> 2.7 -> 30 + 0.7 x 10.
    assert percentile(values, 0.5) == 25.0
    assert percentile(values, 0.9) == pytest.approx(37.0)
    assert percentile(values, 0.0) == 10.0
    assert percentile(values, 1.0) == 40.0


def test_summary_of_known_values():
    summary = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (summary.count, summary.min, summary.max, summary.mean, summary.median) == (5, 1.0, 5.0, 3.0, 3.0)
    assert summary.p90 == pytest.approx(4.6)  # rank 3.6 -> 4 + 0.6 x 1
    assert summary.p99 == pytest.approx(4.96)


def test_too_few_samples_warn_per_percentile():
    assert (min_samples(0.90), min_samples(0.95), min_samples(0.99)) == (10, 20, 100)
    warnings = summarize(range(19)).warnings
    assert [w.split()[0] for w in warnings] == ["p95", "p99"]
    assert "19 samples" in warnings[0] and ">= 20" in warnings[0]
    assert summarize(range(100)).warnings == []


def test_no_samples_gives_empty_summary_with_warning():
    summary = summarize([])
    assert summary.count == 0 and summary.median is None
    assert summary.warnings == ["no samples"]
