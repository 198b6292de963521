"""Every flow's worst-case history, computed from statemachine/*.asl.json and the bounds of its loops
and Maps, stays under Step Functions' 25,000 events; a wait loop runs at most MAX_LOOP_ROUNDS rounds
whatever its poll settings and deadline. `pytest -s` prints the figures (before: the rounds the poll
settings alone allowed; after: the bound the loops now have)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servingctl.control.history import HISTORY_LIMIT, MAX_LOOP_ROUNDS, min_wait_s, state_events, worst_case_events
from servingctl.control.polling import backoff_wait, run_check
from servingctl.registry.models import FlowLimits
from servingctl.runs.matrix import MAX_SCENARIOS, MAX_WORKERS, BenchmarkInput
from servingctl.shared.errors import DeadlineExceeded
from servingctl.shared.flow_inputs import Poll, StopDeadlines

from .conftest import FakeClock

ROOT = Path(__file__).resolve().parents[3]
# Each flow's wait loops, named by their Wait state.
LOOPS = {
    "start_profile": ("WaitForCapacity", "WaitForTask", "WaitForTargets"),
    "stop_profile": ("WaitForLock", "WaitForDrain", "WaitForTermination"),
}
# The smallest pacing a start or stop input may ask for (Poll's own bounds).
FASTEST = Poll(interval_s=1, max_interval_s=1, backoff=1.0)
REGISTRY_MAX_DEADLINE_S = int(FlowLimits.model_fields["max_start_deadline_s"].metadata[1].le)
SWEEP_MAX_STEPS = int(BenchmarkInput.model_fields["sweep_max_steps"].metadata[1].le)


def load(stem: str) -> dict[str, Any]:
    return json.loads((ROOT / "statemachine" / f"{stem}.asl.json").read_text())


def rounds_by_pacing(poll: Poll, deadline_s: int) -> int:
    """Rounds a loop ran before this change: waits of the poll's back-off alone until the deadline."""
    elapsed, rounds = 0, 0
    while elapsed < deadline_s:
        elapsed += backoff_wait(poll, rounds)
        rounds += 1
    return rounds


def test_the_registry_bounds_read_here_are_the_models() -> None:
    assert REGISTRY_MAX_DEADLINE_S == 86400 and SWEEP_MAX_STEPS == 20
    assert (MAX_SCENARIOS, MAX_WORKERS) == (32, 8)


@pytest.mark.parametrize("stem", sorted(LOOPS))
def test_a_start_or_stop_stays_under_the_history_limit_at_its_loops_bound(stem: str) -> None:
    definition = load(stem)
    after = worst_case_events(definition, dict.fromkeys(LOOPS[stem], MAX_LOOP_ROUNDS), {})
    largest = FlowLimits().max_start_deadline_s if stem == "start_profile" else FlowLimits().max_stop_deadline_s
    before = worst_case_events(definition, dict.fromkeys(LOOPS[stem], rounds_by_pacing(FASTEST, largest)), {})
    default = worst_case_events(definition, dict.fromkeys(LOOPS[stem], rounds_by_pacing(Poll(), largest)), {})
    print(
        f"\nFIGURE {stem}: worst case {after:,} history events (limit {HISTORY_LIMIT:,}; {MAX_LOOP_ROUNDS} rounds a loop); "
        f"before: {before:,} at poll 1 s and the registry's default largest deadline ({largest} s), "
        f"{default:,} at the default poll"
    )
    assert after <= HISTORY_LIMIT
    assert before > HISTORY_LIMIT  # what the poll settings alone allowed


def test_run_benchmark_stays_under_the_history_limit_at_the_matrix_maxima() -> None:
    events = worst_case_events(
        load("run_benchmark"), {"SweepNext": SWEEP_MAX_STEPS}, {"RunScenarios": MAX_SCENARIOS, "RunShards": MAX_WORKERS}
    )
    print(
        f"\nFIGURE run_benchmark: worst case {events:,} history events (limit {HISTORY_LIMIT:,}; {MAX_SCENARIOS} scenarios "
        f"of {MAX_WORKERS} shards, {SWEEP_MAX_STEPS} sweep steps; its start and stop are child executions with their own)"
    )
    assert events <= HISTORY_LIMIT


def test_a_loop_without_a_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="no bound on its rounds"):
        worst_case_events(load("start_profile"), {"WaitForCapacity": 1, "WaitForTask": 1}, {})
    with pytest.raises(ValueError, match="Map state RunScenarios: no bound"):
        worst_case_events(load("run_benchmark"), {"SweepNext": 1}, {})


def test_a_task_counts_every_attempt_of_every_retrier() -> None:
    check = load("start_profile")["States"]["CheckCapacity"]
    # Entered, exited, and Scheduled/Started/Succeeded|Failed for 1 + 3 Lambda + 5 throttling attempts.
    assert state_events(check, {}) == 2 + 3 * (1 + 3 + 5)
    start_child = load("run_benchmark")["States"]["StartProfile"]
    assert state_events(start_child, {}) == 2 + 4 * (1 + sum(r["MaxAttempts"] for r in start_child["Retry"]))


@pytest.mark.parametrize("deadline_s", [60, MAX_LOOP_ROUNDS, MAX_LOOP_ROUNDS + 1, 7200, REGISTRY_MAX_DEADLINE_S])
def test_a_loop_at_the_fastest_poll_runs_at_most_the_round_bound_and_still_lasts_its_deadline(deadline_s: int) -> None:
    clock, last, rounds = FakeClock(), None, 0
    start = clock.now()
    with pytest.raises(DeadlineExceeded):
        while True:
            last = run_check(
                last=last,
                what="it",
                deadline_s=deadline_s,
                poll=FASTEST,
                clock=clock,
                probe=lambda _p: (False, "not yet"),
            )
            rounds += 1
            clock.advance(last.wait_s)
    assert rounds <= MAX_LOOP_ROUNDS
    assert (clock.now() - start).total_seconds() >= deadline_s  # the deadline is never shortened
    assert min_wait_s(deadline_s) == max(1, -(-deadline_s // MAX_LOOP_ROUNDS))


def test_the_pacing_asked_for_is_kept_when_the_bound_allows_it() -> None:
    clock = FakeClock()
    result = run_check(
        last=None,
        what="it",
        deadline_s=StopDeadlines().drain_s,
        poll=Poll(),
        clock=clock,
        probe=lambda _p: (False, "not yet"),
    )
    assert result.wait_s == Poll().interval_s
