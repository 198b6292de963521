"""The start timeline on the twin: every mark from its real source (EC2, ECS, the containers' log
streams in CloudWatch Logs, the ALB, the smoke test), in DynamoDB and in the start's events."""

from __future__ import annotations

from typing import Any

from servingctl.control.timeline import (
    GRACE_BOUNDS_S,
    GRACE_SPAN,
    LOOP_SPANS,
    MARGIN_S,
    MIN_HISTORY,
    MIN_WAIT_S,
    ORDER,
    derived_wait,
    spans,
)
from servingctl_twin.twin import Twin

Probe = Any  # conftest.Probe (conftest modules are not importable under --import-mode=importlib)
PROFILE = "nemotron-nano"


def test_a_start_records_its_timeline_from_every_source(twin: Twin, probe: Probe) -> None:
    started = probe.start(PROFILE, "timeline")
    assert started.status == "SUCCEEDED", (started.error, started.cause)
    try:
        [record] = [r for r in probe.store.list_starts(PROFILE) if r.execution == started.arn]
        assert record.outcome == "READY" and record.ended_at is not None
        names = [m.name for m in record.marks]
        # Every source gave its marks: EC2, ECS, the prefetch container's and the server's log
        # streams (the simulator prints uvicorn's startup line as vLLM's API server does), the
        # ALB, the smoke test and the controller.
        assert set(names) >= {
            "requested",
            "instance_launched",
            "instance_registered",
            "task_created",
            "pull_started",
            "pull_stopped",
            "prefetch_started",
            "prefetch_finished",
            "task_started",
            "vllm_api_ready",
            "target_healthy",
            "first_token",
            "ready",
        }
        # ...in the order a start passes them, each stamped by the source the world answered from.
        ecs_order = [
            n for n in names if n in ("instance_registered", "task_created", "pull_started", "pull_stopped", "task_started")
        ]
        assert ecs_order == sorted(ecs_order, key=ORDER.__getitem__)
        assert record.mark("pull_stopped").source == "ecs:DescribeTasks pullStoppedAt"
        assert record.mark("prefetch_finished").at >= record.mark("prefetch_started").at >= record.mark("pull_stopped").at
        assert record.mark("ready").at >= record.mark("first_token").at >= record.mark("target_healthy").at
        # The controller saw each world mark after it happened, never before.
        assert all(m.seen_at is not None and m.seen_at >= m.at for m in record.marks)
        # The phases add up to the start's length.
        total = sum(seconds for _, seconds, _ in spans(record))
        assert abs(total - (record.mark("ready").at - record.requested_at).total_seconds()) < 1e-3
        # The start's events: the READY event and the execution's output carry the same timeline.
        assert [row["mark"] for row in started.output["record"]["timeline"]] == [n for n in names if n != "requested"]
    finally:
        probe.stop(PROFILE, "timeline")


def test_deadlines_and_the_grace_period_come_from_past_starts_once_there_are_enough(twin: Twin, probe: Probe) -> None:
    profile = "deepseek-v4-flash"
    spec = probe.registry.profiles[profile]
    poll = {"interval_s": 1, "max_interval_s": 2, "backoff": 1.5}
    fixed = (spec.start.capacity_timeout_s, spec.start.task_timeout_s, spec.start.health_timeout_s)
    for number in range(MIN_HISTORY + 1):
        # No deadlines in the input: the registry's until MIN_HISTORY starts were READY, then history's;
        # a deadline the input sets is kept.
        given = {"health_s": 600} if number == MIN_HISTORY else {}
        started = twin.run(
            "start_profile", {"profile": profile, "poll": poll, "deadlines": given}, name=f"start-{profile}-h{number}"
        )
        assert started.status == "SUCCEEDED", (started.error, started.cause)
        deadlines = started.output["config"]["settings"]["deadlines"]
        grace = probe.service(profile)["healthCheckGracePeriodSeconds"]
        if number < MIN_HISTORY:
            assert (deadlines["capacity_s"], deadlines["task_s"], deadlines["health_s"]) == fixed and deadlines["derived"] == []
            assert started.output["scale"]["health_grace_s"] is None and grace == twin.grace_s  # Terraform's, untouched
        else:
            # The READY starts before it set the waits (the formula and its bounds: tests/unit/control/test_timeline.py).
            history = [r for r in probe.store.list_starts(profile) if r.execution != started.arn]
            assert len(history) == MIN_HISTORY and deadlines["derived"] == ["capacity_s", "task_s"]
            expected = [
                derived_wait(history, LOOP_SPANS[name], MIN_WAIT_S, spec.limits.max_start_deadline_s)
                for name in ("capacity_s", "task_s")
            ]
            assert [deadlines["capacity_s"], deadlines["task_s"], deadlines["health_s"]] == [*expected, 600]
            assert MARGIN_S <= expected[0] < fixed[0]  # seconds-long twin starts: far below the fixed guess
            assert started.output["scale"]["health_grace_s"] == grace == derived_wait(history, GRACE_SPAN, *GRACE_BOUNDS_S)
        assert probe.stop(profile, f"h{number}").status == "SUCCEEDED"
