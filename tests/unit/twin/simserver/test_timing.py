"""Timing model: hand-computed step arithmetic and the replay against the reference's published figures."""

import pytest

from servingctl_twin.simserver import SimConfig, TimingModel
from servingctl_twin.simserver.replay import burst

T = TimingModel()

# FACTS.md: (input tokens, concurrency) -> aggregate tok/s, median TTFT ms; no MTP, 2048 batched tokens.
NO_MTP = {
    (254, 1): (102.67, 112.9),
    (254, 2): (169.88, 171.6),
    (254, 4): (297.09, 229.6),
    (2046, 1): (98.82, 182.6),
    (2046, 2): (161.64, 272.4),
    (2046, 4): (261.72, 444.5),
    (8185, 1): (83.02, 691.8),
    (8185, 2): (123.73, 1029.2),
    (8185, 4): (172.28, 1702.6),
}
# FACTS.md: MTP=1 aggregate tok/s.
MTP = {
    (254, 1): 135.55,
    (254, 2): 227.95,
    (254, 4): 358.41,
    (2046, 1): 128.59,
    (2046, 2): 213.32,
    (2046, 4): 330.29,
    (8185, 1): 106.80,
    (8185, 2): 151.89,
    (8185, 4): 202.11,
}


def test_idle_ttft_is_frontend_plus_eager_chunks_plus_per_token():
    # 254 tokens: one chunk. 12.879 + 90.141 + 254 * 0.038895 = 112.899
    assert T.idle_ttft_ms(254, 2048) == pytest.approx(112.899, abs=1e-3)
    # 8185 tokens in 2048-token chunks: 4 eager steps. 12.879 + 4 * 90.141 + 8185 * 0.038895 = 691.799
    assert T.idle_ttft_ms(8185, 2048) == pytest.approx(691.799, abs=1e-3)
    # Same prompt with 4096-token chunks: 2 eager steps.
    assert T.idle_ttft_ms(8185, 4096) == pytest.approx(691.799 - 2 * 90.141, abs=1e-3)


def test_decode_table_interpolates_and_extrapolates():
    table = TimingModel(decode_step_ms={1: 10.0, 2: 12.0, 4: 16.0})
    assert table.decode_ms(3, mtp=False) == pytest.approx(14.0)
    assert table.decode_ms(8, mtp=False) == pytest.approx(24.0)  # last segment's slope: 2 ms per sequence
    assert T.decode_ms(1, mtp=True) > T.decode_ms(1, mtp=False)  # verifying a draft costs time


def test_config_expected_ttft_divides_by_speed():
    config = SimConfig(speed=50)
    assert config.expected_ttft_s(254) == pytest.approx(0.112899 / 50, rel=1e-4)
    assert config.expected_ttft_s(254, cached_tokens=240) < config.expected_ttft_s(254)


def test_decode_tables_must_have_rows():
    with pytest.raises(ValueError, match="at least two rows"):
        TimingModel(decode_step_ms={1: 9.0})


@pytest.mark.parametrize(("cell", "published"), sorted(NO_MTP.items()))
def test_replay_without_mtp_reproduces_published_table(cell, published):
    result = burst(T, cell[0], cell[1], mtp_tokens=0, rounds=1)
    aggregate, ttft = published
    assert result.output_tok_s == pytest.approx(aggregate, rel=0.015)
    assert result.median_ttft_ms == pytest.approx(ttft, rel=0.06)


@pytest.mark.parametrize(("cell", "published"), sorted(MTP.items()))
def test_replay_with_mtp_reproduces_published_aggregates(cell, published):
    result = burst(T, cell[0], cell[1])
    tolerance = 0.001 if cell[0] == 254 else 0.09  # 254-token cells are the fitted ones
    assert result.output_tok_s == pytest.approx(published, rel=tolerance)


def test_mtp_speeds_up_every_cell_like_the_reference():
    for input_tokens, concurrency in MTP:
        with_mtp = burst(T, input_tokens, concurrency).output_tok_s
        without = burst(T, input_tokens, concurrency, mtp_tokens=0).output_tok_s
        assert with_mtp > without * 1.1
