"""Client self-check verdicts from lag samples and CPU time."""

import asyncio
import time

from servingctl.bench.selfcheck import FAST_PHASE_BELOW_S, FAST_SAMPLES, SLOW_TICK_S, SelfCheck, judge


def test_quiet_client_is_not_bound():
    c = judge([0.1] * 200, cpu_s=1.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8)
    assert not c.client_bound and c.reasons == [] and c.cpu_share == 0.1


def test_lagging_loop_marks_client_bound():
    c = judge([0.1] * 190 + [20.0] * 10, cpu_s=1.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8)
    assert c.client_bound and "lag p99" in c.reasons[0]


def test_busy_cpu_marks_client_bound():
    c = judge([0.1] * 200, cpu_s=9.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8)
    assert c.client_bound and "CPU 90%" in c.reasons[0]


def test_sampler_sees_a_blocked_loop():
    async def go():
        check = SelfCheck(lag_limit_ms=5.0)
        check.start()
        await asyncio.sleep(0.03)
        for _ in range(3):
            sum(range(3_000_000))  # blocks the loop: the sampler must see it late
            await asyncio.sleep(0.015)
        return await check.stop()

    result = asyncio.run(go())
    assert result.loop_lag_ms.count >= 3
    assert result.loop_lag_ms.max > 5.0 and result.cpu_seconds > 0


def test_the_default_thresholds_are_5_ms_of_lag_and_80_percent_of_a_core():
    check = SelfCheck()
    assert (check.lag_limit_ms, check.cpu_limit) == (5.0, 0.8)


def test_lag_p99_at_the_default_limit_is_not_bound_and_a_tenth_past_it_is():
    check = SelfCheck()
    at = judge([5.0] * 200, cpu_s=1.0, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert at.loop_lag_ms.p99 == 5.0 and not at.client_bound
    past = judge([5.1] * 200, cpu_s=1.0, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert past.client_bound and past.reasons == ["event-loop lag p99 5.1 ms > 5 ms: timestamps are late"]


def test_cpu_share_at_the_default_limit_is_not_bound_and_a_point_past_it_is():
    check = SelfCheck()
    at = judge([0.1] * 200, cpu_s=8.0, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert at.cpu_share == 0.8 and not at.client_bound
    past = judge([0.1] * 200, cpu_s=8.1, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert past.client_bound and past.reasons == ["client CPU 81% of one core > 80%: the client sets the pace"]


def test_a_benchmark_input_judges_with_the_same_defaults():
    from servingctl.benchmarks.matrix import BenchmarkInput

    given = BenchmarkInput(profile="p")
    assert (given.client_lag_limit_ms, given.client_cpu_limit) == (5.0, 0.8)


def test_sampling_slows_after_the_first_samples_and_still_sees_a_stall_longer_than_a_tick():
    async def go():
        check = SelfCheck(lag_limit_ms=5.0)
        check.start()
        while len(check._lags_ms) < FAST_SAMPLES:  # the fast phase, however long a busy machine makes it
            await asyncio.sleep(0.05)
        before = len(check._lags_ms)
        await asyncio.sleep(1.0)
        slow = len(check._lags_ms) - before
        stall_end = time.perf_counter() + 1.5 * SLOW_TICK_S
        while time.perf_counter() < stall_end:  # the loop held longer than a slow tick
            pass
        await asyncio.sleep(2 * SLOW_TICK_S)
        return slow, await check.stop()

    slow, result = asyncio.run(go())
    assert 1 <= slow <= 1.0 / SLOW_TICK_S + 1  # a few firings in that second, not the fast phase's 100
    assert result.loop_lag_ms.max > 0.5 * SLOW_TICK_S * 1000  # the stall is seen: the next firing was that late


def test_a_load_planned_to_last_long_enough_skips_the_fast_samples_and_one_just_shorter_keeps_them():
    async def samples_after(planned_s, seconds=0.3):
        check = SelfCheck(planned_s=planned_s)
        check.start()
        await asyncio.sleep(seconds)
        await check.stop()
        return len(check._lags_ms)

    at_limit = asyncio.run(samples_after(FAST_PHASE_BELOW_S))
    below = asyncio.run(samples_after(FAST_PHASE_BELOW_S - 0.1))
    unknown = asyncio.run(samples_after(None))
    assert at_limit <= 0.3 / SLOW_TICK_S + 1  # one slow tick (250 ms) in 0.3 s
    assert below >= 10 and unknown >= 10  # 10 ms ticks: ~30 in 0.3 s, fewer on a busy machine
