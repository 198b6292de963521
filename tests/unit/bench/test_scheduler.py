"""Load shapes with a fake send: burst rounds, sustained in-flight count, Poisson schedule."""

import asyncio
import statistics
from itertools import pairwise

import pytest

from servingctl.bench.scheduler import poisson_offsets, run_bursts, run_rate, run_sustained
from servingctl.schema.results import RequestRecord


class FakeServer:
    """send() that tracks requests in flight; each request takes a few loop turns."""

    def __init__(self):
        self.in_flight = 0
        self.peak = 0
        self.sent: list[tuple[int, int, bool]] = []

    async def send(self, index: int, round_index: int, warmup: bool) -> RequestRecord:
        self.sent.append((index, round_index, warmup))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        for _ in range(3 + index % 3):
            await asyncio.sleep(0)
        self.in_flight -= 1
        return RequestRecord(
            scenario="s",
            round=round_index,
            index=index,
            warmup=warmup,
            ok=True,
            t_start_ns=index,
            t_end_ns=index + 10,
            completion_tokens=2,
            chunks=[(index + 5, 2)],
        )


def test_bursts_release_c_requests_per_round_and_number_them_on():
    server = FakeServer()
    records, rounds = asyncio.run(run_bursts(server.send, 3, 2, warmup=False, first_index=6))
    assert [r.index for r in records] == [6, 7, 8, 9, 10, 11]
    assert [(r.round, r.index) for r in records][3] == (1, 9)
    assert server.peak == 3
    assert [(r.index, r.completion_tokens, r.ok) for r in rounds] == [(0, 6, 3), (1, 6, 3)]


def test_sustained_keeps_c_in_flight_until_n_requests():
    server = FakeServer()
    records = asyncio.run(run_sustained(server.send, 4, requests=25, duration_s=None, first_index=8))
    assert [r.index for r in records] == list(range(8, 33))
    assert server.peak == 4
    assert len(server.sent) == 25


def test_sustained_stops_sending_at_the_deadline():
    ticks = iter(range(1000))
    server = FakeServer()
    # the fake clock advances one second per read; deadline 0 + 5 s
    records = asyncio.run(run_sustained(server.send, 2, requests=None, duration_s=5, clock=lambda: next(ticks)))
    assert 0 < len(records) < 6


def test_poisson_schedule_is_deterministic_from_the_seed_and_absolute():
    a = poisson_offsets(2.0, 42, requests=2000, duration_s=None)
    assert a == poisson_offsets(2.0, 42, requests=2000, duration_s=None)
    assert a != poisson_offsets(2.0, 43, requests=2000, duration_s=None)
    assert a[0] == 0.0 and a == sorted(a)
    gaps = [b - a_ for a_, b in pairwise(a)]
    assert statistics.fmean(gaps) == pytest.approx(0.5, rel=0.05)  # mean gap 1 / rate
    assert statistics.stdev(gaps) == pytest.approx(0.5, rel=0.08)  # exponential: stdev = mean


def test_poisson_schedule_stops_at_duration_or_count():
    by_time = poisson_offsets(10.0, 1, requests=None, duration_s=3.0)
    assert by_time[-1] < 3.0 and 15 < len(by_time) < 50
    assert len(poisson_offsets(10.0, 1, requests=7, duration_s=3.0)) == 7
    with pytest.raises(ValueError, match="needs requests or duration_s"):
        poisson_offsets(1.0, 1, requests=None, duration_s=None)


def test_rate_mode_sends_every_arrival_and_caps_in_flight():
    server = FakeServer()
    records = asyncio.run(run_rate(server.send, [0.0] * 10, 3, first_index=2))
    assert sorted(r.index for r in records) == list(range(2, 12))
    assert server.peak == 3
