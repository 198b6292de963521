"""Client self-check verdicts from lag samples and CPU time."""

import asyncio

from servingctl.bench.selfcheck import SelfCheck, judge


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
