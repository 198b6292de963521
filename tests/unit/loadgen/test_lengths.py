"""Length distributions: the command-line forms, their errors, and seeded draws whose moments match."""

import random
import statistics

import pytest

from servingctl.loadgen.lengths import LengthError, parse_distribution, sample_lengths
from servingctl.schema.results import MAX_LENGTH_TOKENS


@pytest.mark.parametrize(
    ("text", "label"),
    [("256", "fixed:256"), ("fixed:3", "fixed:3"), ("uniform:128:1024", "uniform:128:1024"), ("normal:512:64", "normal:512:64")],
)
def test_forms_round_trip(text, label):
    assert parse_distribution(text).label() == label


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("poisson:3", r"kind 'poisson'; allowed: fixed, uniform, normal"),
        ("uniform:1", r"uniform takes 2 number"),
        ("normal:a:b", r"not a number"),
        ("fixed:0", r"greater than or equal to 1"),
        (f"fixed:{MAX_LENGTH_TOKENS + 1}", rf"less than or equal to {MAX_LENGTH_TOKENS}"),
        ("uniform:9:5", r"uniform: low 9 is above high 5"),
        ("normal:512:-1", r"greater than or equal to 0"),
    ],
)
def test_bad_forms_name_what_is_allowed(text, message):
    with pytest.raises(LengthError, match=message):
        parse_distribution(text)


def test_limits_at_the_limit_accepted():
    assert parse_distribution(f"fixed:{MAX_LENGTH_TOKENS}").tokens == MAX_LENGTH_TOKENS
    assert parse_distribution("uniform:1:1").label() == "uniform:1:1"


def test_fixed_is_constant():
    assert sample_lengths(parse_distribution("fixed:7"), 4, random.Random(0)) == [7, 7, 7, 7]


def test_uniform_is_seeded_inclusive_and_has_the_moments_of_its_range():
    dist = parse_distribution("uniform:100:300")
    draws = sample_lengths(dist, 20_000, random.Random(42))
    assert draws == sample_lengths(dist, 20_000, random.Random(42))  # the seed fixes every draw
    assert min(draws) == 100 and max(draws) == 300
    assert statistics.fmean(draws) == pytest.approx(200, abs=2)
    # discrete uniform variance ((n^2 - 1) / 12, n = 201 values): sd 58.0
    assert statistics.pstdev(draws) == pytest.approx(((201**2 - 1) / 12) ** 0.5, rel=0.02)


def test_normal_has_its_mean_and_spread_rounded_to_tokens():
    draws = sample_lengths(parse_distribution("normal:512:64"), 20_000, random.Random(7))
    assert all(isinstance(d, int) for d in draws)
    assert statistics.fmean(draws) == pytest.approx(512, abs=2)
    assert statistics.pstdev(draws) == pytest.approx(64, rel=0.03)


def test_normal_is_clipped_to_one_token_at_least():
    draws = sample_lengths(parse_distribution("normal:2:50"), 2000, random.Random(1))
    assert min(draws) == 1 and max(draws) > 50
