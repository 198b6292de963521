"""Load shapes with a fake send: burst rounds, sustained in-flight count, Poisson schedule."""

import asyncio
import statistics
from itertools import pairwise

import pytest

from servingctl.loadgen.scheduler import (
    constant_offsets,
    poisson_offsets,
    replay_offsets,
    run_bursts,
    run_conversations,
    run_rate,
    run_sustained,
)
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


def test_bursts_for_a_duration_start_rounds_until_it_passed_and_mark_them():
    ticks = iter(range(1000))
    server = FakeServer()
    # the fake clock advances one second per read: deadline 0 + 3.5 s; rounds start at 1, 2 and 3 s
    records, rounds = asyncio.run(
        run_bursts(server.send, 2, 0, warmup=True, first_index=4, duration_s=3.5, clock=lambda: next(ticks))
    )
    assert [r.index for r in records] == [4, 5, 6, 7, 8, 9]
    assert [r.index for r in rounds] == [0, 1, 2] and all(r.warmup for r in rounds)
    assert all(r.warmup for r in records) and server.peak == 2


def test_a_warm_up_by_time_marks_every_request_it_sends_in_every_shape():
    server = FakeServer()
    sustained = asyncio.run(run_sustained(server.send, 2, requests=None, duration_s=0.05, warmup=True))
    arrivals = asyncio.run(run_rate(server.send, [0.0, 0.001, 0.002], 2, first_index=len(sustained), warmup=True))
    assert sustained and len(arrivals) == 3
    assert all(warmup for _, _, warmup in server.sent) and len(server.sent) == len(sustained) + 3


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


def _fake_time():
    """A clock and a sleep that advance it; the sleep yields first, so a task started before it runs at its own instant."""
    now = [0.0]

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(0)
        now[0] += seconds

    return now, (lambda: now[0]), sleep


def test_replay_sends_at_the_trace_timestamps_scaled_on_a_fake_clock():
    timestamps = [100.0, 100.5, 102.0, 102.0, 110.0]
    offsets = replay_offsets(timestamps, 2.0)
    assert offsets == [0.0, 0.25, 1.0, 1.0, 5.0]
    now, clock, sleep = _fake_time()
    sent: list[tuple[int, float]] = []

    async def send(index: int, round_index: int, warmup: bool) -> RequestRecord:
        sent.append((index, now[0]))
        return RequestRecord(scenario="s", round=0, index=index, ok=True, t_start_ns=0)

    records = asyncio.run(run_rate(send, offsets, 8, first_index=10, clock=clock, sleep=sleep))
    assert [r.index for r in records] == [10, 11, 12, 13, 14]
    assert sent == list(zip(range(10, 15), offsets, strict=True))  # every send exactly at its offset


def test_conversations_send_turns_in_order_with_think_time_between_a_reply_and_the_next_turn():
    events: list[tuple] = []
    active: set[int] = set()
    most_active = 0

    async def think(seconds: float) -> None:
        events.append(("think", seconds))
        await asyncio.sleep(0)

    async def turn(index: int, conversation: int, k: int) -> RequestRecord:
        nonlocal most_active
        active.add(conversation)
        most_active = max(most_active, len(active))
        events.append(("turn", conversation, k))
        await asyncio.sleep(0)  # the reply
        if k == turns[conversation] - 1:
            active.discard(conversation)
        return RequestRecord(scenario="s", round=0, index=index, ok=True, t_start_ns=0)

    turns = [3, 1, 2]
    records = asyncio.run(run_conversations(turn, turns, 2, think_time_s=0.5, first_index=4, sleep=think))
    assert [r.index for r in records] == [4, 5, 6, 7, 8, 9]
    for c, n in enumerate(turns):
        assert [e[2] for e in events if e[0] == "turn" and e[1] == c] == list(range(n))
    # a think time before every turn but a conversation's first: (3 - 1) + 0 + (2 - 1)
    assert [e for e in events if e[0] == "think"] == [("think", 0.5)] * 3
    assert most_active == 2  # two conversations at once, never more
    assert asyncio.run(run_conversations(turn, [2], 1, think_time_s=0, sleep=think)) and events[-2][0] == "turn"


def test_constant_arrivals_are_evenly_spaced_and_bounded_by_requests_or_duration():
    assert constant_offsets(4.0, requests=5, duration_s=None) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert constant_offsets(4.0, requests=None, duration_s=1.0) == [0.0, 0.25, 0.5, 0.75]  # before the deadline
    assert constant_offsets(4.0, requests=100, duration_s=0.5) == [0.0, 0.25]
    with pytest.raises(ValueError, match="requests or duration_s"):
        constant_offsets(1.0, requests=None, duration_s=None)
