"""Client self-check verdicts from lag samples and CPU time."""

import asyncio
import time

from servingctl.loadgen.selfcheck import (
    BUSY_CLIENT_SHARE,
    FAST_PHASE_BELOW_S,
    FAST_SAMPLES,
    SLOW_TICK_S,
    Machine,
    SelfCheck,
    judge,
    run_queue_wait_s,
    steal_and_total,
)


def test_quiet_client_is_not_bound():
    c = judge([0.1] * 200, cpu_s=1.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8)
    assert not c.client_bound and c.reasons == [] and c.cpu_share == 0.1


LATE = [0.1] * 190 + [20.0] * 10  # lag p99 20 ms


def test_a_late_loop_of_a_busy_client_is_client_bound():
    c = judge(LATE, cpu_s=6.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8, machine=Machine(wait_s=0.5))
    assert c.client_bound and not c.host_busy
    assert c.reasons == ["event-loop lag p99 20.0 ms > 5 ms: timestamps are late, the client busy 60% of a core"]


def test_a_late_loop_of_an_idle_client_on_a_busy_machine_is_the_machine_not_the_client():
    busy = Machine(wait_s=2.0, steal_share=0.03, load_average=15.9, cpus=2)
    c = judge(LATE, cpu_s=1.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8, machine=busy)
    assert not c.client_bound and c.reasons == []
    assert c.host_busy and c.host_reasons == [
        "event-loop lag p99 20.0 ms > 5 ms: timestamps are late by the machine, not the client (it used 10% of a core; "
        "the event loop waited 2.0 s for a CPU (20% of the time), load average 15.9 on 2 CPUs, steal 3%): "
        "measure on an idle machine; more client processes would not help"
    ]
    assert (c.run_queue_wait_s, c.steal_share, c.load_average) == (2.0, 0.03, 15.9)


def test_the_busy_client_share_is_the_line_between_client_and_machine():
    at = judge(LATE, cpu_s=10.0 * BUSY_CLIENT_SHARE, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8, machine=Machine(wait_s=1.0))
    below = judge(
        LATE, cpu_s=10.0 * BUSY_CLIENT_SHARE - 0.1, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8, machine=Machine(wait_s=1.0)
    )
    assert at.client_bound and not at.host_busy
    assert below.host_busy and not below.client_bound


def test_a_late_loop_that_neither_worked_nor_waited_for_a_cpu_blocked_itself():
    c = judge(LATE, cpu_s=1.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8, machine=Machine(wait_s=0.05))
    assert c.client_bound and not c.host_busy and c.reasons[0].endswith("nor waiting for a CPU: it blocked")


def test_without_the_kernel_s_run_queue_figure_an_idle_late_client_is_still_not_blamed():
    c = judge(LATE, cpu_s=1.0, wall_s=10.0, lag_limit_ms=5.0, cpu_limit=0.8)
    assert c.host_busy and not c.client_bound and "its load unknown" in c.host_reasons[0]


def test_the_kernel_figures_are_read_where_linux_has_them(tmp_path):
    schedstat = tmp_path / "schedstat"
    schedstat.write_text("123 2500000000 7\n")
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    assert run_queue_wait_s(str(schedstat)) == 2.5
    assert steal_and_total(str(stat)) == (35, 1000)
    assert run_queue_wait_s(str(tmp_path / "missing")) is None and steal_and_total(str(tmp_path / "missing")) is None


def test_a_kernel_that_does_not_account_gives_no_run_queue_figure_rather_than_zero(tmp_path):
    """Kernels without scheduler accounting print "0 0 0": no figure, which would read as "never waited"."""
    schedstat = tmp_path / "schedstat"
    schedstat.write_text("0 0 0\n")
    assert run_queue_wait_s(str(schedstat)) is None
    schedstat.write_text("0 0 1\n")  # one timeslice, never queued: a real zero
    assert run_queue_wait_s(str(schedstat)) == 0.0
    schedstat.write_text("123 45\n")
    assert run_queue_wait_s(str(schedstat)) is None


def test_a_busy_machine_is_seen_from_the_client_s_own_thread():
    """Processes hogging the CPUs keep a loop that wants to run waiting on the run queue, which the check reads."""
    import os
    import subprocess
    import sys

    cpus = os.sched_getaffinity(0)
    cpu = min(cpus)
    # More hogs than CPUs, each pinned where the loop's thread is pinned: contention even where
    # pinning is ignored (containers that accept and drop it).
    hogs = [
        subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
        for _ in range(3 * len(cpus))
    ]
    try:
        os.sched_setaffinity(0, {cpu})

        async def go():
            await asyncio.sleep(0.5)  # the hogs are up and spinning
            check = SelfCheck()
            check.start()
            end = time.perf_counter() + 1.0
            while (now := time.perf_counter()) < end:  # the loop wants a CPU all along
                while time.perf_counter() < now + 0.0005:
                    pass
                await asyncio.sleep(0)  # and lets the sampler tick
            return await check.stop()

        result = asyncio.run(go())
    finally:
        os.sched_setaffinity(0, cpus)
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert result.cpu_share < BUSY_CLIENT_SHARE and not result.client_bound  # kept off the CPU, not working
    if run_queue_wait_s() is None:  # this kernel does not account: the check says it does not know
        assert result.run_queue_wait_s is None
    else:  # most of the wanted time went waiting behind the hogs
        assert result.run_queue_wait_s is not None and result.run_queue_wait_s > 0.3 * result.wall_seconds


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
    past = judge([5.1] * 200, cpu_s=6.0, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert past.client_bound and past.reasons == [
        "event-loop lag p99 5.1 ms > 5 ms: timestamps are late, the client busy 60% of a core"
    ]


def test_cpu_share_at_the_default_limit_is_not_bound_and_a_point_past_it_is():
    check = SelfCheck()
    at = judge([0.1] * 200, cpu_s=8.0, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert at.cpu_share == 0.8 and not at.client_bound
    past = judge([0.1] * 200, cpu_s=8.1, wall_s=10.0, lag_limit_ms=check.lag_limit_ms, cpu_limit=check.cpu_limit)
    assert past.client_bound and past.reasons == ["client CPU 81% of one core > 80%: the client sets the pace"]


def test_a_benchmark_input_judges_with_the_same_defaults():
    from servingctl.runs.matrix import BenchmarkInput

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
