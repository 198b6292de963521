"""Bootstrap comparison of two runs' samples: checked against known distributions (the same
distribution -> no change, a 20 % shift -> a change in the right direction), the interval's
coverage, the weighted median against numpy, reproducibility, and the limits of tiny samples."""

from __future__ import annotations

import numpy as np
import pytest

from servingctl.loadgen.bootstrap import GRID, MIN_UNITS, compare, replicates, seed_for


def _requests(rng: np.random.Generator, n: int, scale: float = 1.0) -> list[list[float]]:
    """n per-request latencies (ms), log-normal like real TTFTs."""
    return [[float(v) * scale] for v in rng.lognormal(np.log(200.0), 0.25, n)]


def test_replicates_are_medians_of_the_resampled_requests():
    units = _requests(np.random.default_rng(1), 41)
    got = replicates(units, np.random.default_rng(7), resamples=20)
    counts = np.random.default_rng(7).multinomial(41, np.full(41, 1 / 41), size=20)
    values = np.array([u[0] for u in units])
    assert got == pytest.approx([np.median(np.repeat(values, c)) for c in counts])


def test_many_values_per_request_are_resampled_whole_and_binned_within_a_bin():
    rng = np.random.default_rng(2)
    units = [list(rng.exponential(20.0, 64)) for _ in range(40)]  # 2560 ITL values > GRID
    assert sum(map(len, units)) > GRID
    got = replicates(units, np.random.default_rng(3), resamples=10)
    counts = np.random.default_rng(3).multinomial(40, np.full(40, 1 / 40), size=10)
    exact = [np.median(np.concatenate([np.tile(u, c) for u, c in zip(units, row, strict=True)])) for row in counts]
    assert got == pytest.approx(exact, rel=0.01)  # bins are a thousandth of the distribution


def test_two_samples_of_one_distribution_show_no_change():
    rng = np.random.default_rng(11)
    change = compare(_requests(rng, 60), _requests(rng, 60), higher_is_better=False, seed=1)
    assert change.verdict == "no change detected"
    assert change.low_pct < 0 < change.high_pct


@pytest.mark.parametrize(
    ("scale", "higher_is_better", "verdict"),
    [
        (1.2, False, "slower"),  # latency 20 % up
        (1 / 1.2, False, "faster"),
        (1.2, True, "faster"),  # tok/s 20 % up
        (1 / 1.2, True, "slower"),
    ],
)
def test_a_20_percent_shift_is_called_in_its_direction(scale, higher_is_better, verdict):
    rng = np.random.default_rng(12)
    change = compare(_requests(rng, 60), _requests(rng, 60, scale), higher_is_better=higher_is_better, seed=2)
    assert change.verdict == verdict
    assert change.low_pct <= (scale - 1) * 100 <= change.high_pct  # the interval holds the true shift
    assert not change.low_pct < 0 < change.high_pct


def test_the_interval_covers_the_true_ratio_about_as_often_as_it_says():
    """95 % intervals of 200 pairs of samples from one distribution: most hold a ratio of 1."""
    rng = np.random.default_rng(13)
    trials = 200
    held = sum(
        compare(_requests(rng, 50), _requests(rng, 50), higher_is_better=False, seed=i, resamples=500).verdict
        == "no change detected"
        for i in range(trials)
    )
    # Binomial(200, 0.95): 0.88..0.99 holds with overwhelming probability; percentile intervals
    # of a median run a little narrow at n=50, never wildly.
    assert 0.88 * trials <= held <= 0.995 * trials


def test_the_same_inputs_and_seed_give_the_same_interval():
    rng = np.random.default_rng(14)
    a, b = _requests(rng, 30), _requests(rng, 30, 1.05)
    first = compare(a, b, higher_is_better=False, seed=seed_for("in256-c4", "ttft"))
    assert compare(a, b, higher_is_better=False, seed=seed_for("in256-c4", "ttft")) == first
    assert seed_for("in256-c4", "ttft") != seed_for("in256-c4", "itl")


def test_too_few_requests_are_not_compared_at_the_limit_and_one_past_it():
    rng = np.random.default_rng(15)
    few, enough = _requests(rng, MIN_UNITS - 1), _requests(rng, MIN_UNITS)
    short = compare(few, _requests(rng, 50, 3.0), higher_is_better=False, seed=1)
    assert short.verdict == "too few" and short.units == (MIN_UNITS - 1, 50) and short.low_pct is None
    assert short.change_pct == pytest.approx((short.run / short.baseline - 1) * 100)  # the point change is still said
    assert compare(enough, _requests(rng, 50, 3.0), higher_is_better=False, seed=1).verdict == "slower"
    assert compare([], enough, higher_is_better=False, seed=1) == compare([[]], enough, higher_is_better=False, seed=1)
    assert compare([], enough, higher_is_better=False, seed=1).baseline is None


def test_mean_statistic_for_window_throughput():
    rng = np.random.default_rng(16)
    base = [[float(v)] for v in rng.normal(1000.0, 30.0, 20)]
    run = [[float(v)] for v in rng.normal(800.0, 30.0, 20)]
    change = compare(base, run, higher_is_better=True, seed=3, kind="mean")
    assert change.verdict == "slower" and change.baseline == pytest.approx(np.mean([u[0] for u in base]))


def test_a_zero_baseline_has_no_relative_change():
    rng = np.random.default_rng(17)
    change = compare([[0.0]] * 20, _requests(rng, 20), higher_is_better=False, seed=1)
    assert (change.verdict, change.change_pct, change.low_pct) == ("baseline 0", None, None)
