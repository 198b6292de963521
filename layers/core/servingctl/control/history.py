"""The flows against Step Functions' history quota: the events each state type writes, a flow's
worst-case history from its ASL and its loops' bounds, and the round budget of a wait loop.

A Standard execution fails at 25,000 history events (docs.aws.amazon.com/step-functions/latest/dg/
bp-history-limit.html), whatever its Catch says. A wait loop (check, choice, wait) writes at least 9
events a round, so its rounds are bounded here, not by its poll settings: a loop waits at least
deadline / MAX_LOOP_ROUNDS seconds a round (servingctl.control.polling), so it runs at most
MAX_LOOP_ROUNDS rounds before its deadline ends it, and tests/unit/control/test_history.py computes
every flow's worst case from statemachine/*.asl.json with that bound and shows it under the quota.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

HISTORY_LIMIT = 25_000
# Rounds one wait loop may run: 3 loops of a start at their worst (every retrier of the check
# exhausted every round: 33 events) plus the flow's other states stay under HISTORY_LIMIT.
MAX_LOOP_ROUNDS = 240

# Events per state type, as Step Functions writes them (HistoryEvent types in the API reference;
# counted on the twin, whose interpreter, moto's port of LocalStack's, writes AWS's sequences:
# tests/integration/twin/test_sfn_quotas.py checks the counts below against real histories).
EXECUTION_EVENTS = 2  # ExecutionStarted, ExecutionSucceeded | ExecutionFailed
STATE_EVENTS = 2  # <Type>StateEntered, <Type>StateExited (Pass, Wait, Choice, Succeed, Task, Map)
FAIL_STATE_EVENTS = 1  # FailStateEntered (the execution's ExecutionFailed follows)
TASK_ATTEMPT_EVENTS = 3  # TaskScheduled, TaskStarted, TaskSucceeded | TaskFailed, each attempt (retries too)
SYNC_ATTEMPT_EVENTS = 4  # + TaskSubmitted: the .sync integrations (startExecution.sync, ecs:runTask.sync)
MAP_EVENTS = 4  # MapStateEntered, MapStateStarted, MapStateSucceeded | MapStateFailed, MapStateExited
MAP_ITERATION_EVENTS = 2  # MapIterationStarted, MapIterationSucceeded | MapIterationFailed
DEFAULT_MAX_ATTEMPTS = 3  # a Retrier's MaxAttempts when absent (Amazon States Language)


def min_wait_s(deadline_s: float) -> int:
    """The shortest wait a loop of this deadline may take: MAX_LOOP_ROUNDS of them reach the deadline."""
    return max(1, math.ceil(deadline_s / MAX_LOOP_ROUNDS))


def retries(state: Mapping[str, Any]) -> int:
    """Most retries a state can make on one entry: every Retrier's MaxAttempts (each counts its own)."""
    return sum(int(r.get("MaxAttempts", DEFAULT_MAX_ATTEMPTS)) for r in state.get("Retry", []))


def state_events(state: Mapping[str, Any], map_items: Mapping[str, int], name: str = "") -> int:
    """Most events one entry of the state writes (every Retrier exhausted; a Map at its item bound,
    each item on its longest path); a Fail state's count leaves out the execution's own last event."""
    kind = state["Type"]
    if kind == "Fail":
        return FAIL_STATE_EVENTS
    if kind == "Task":
        per_attempt = SYNC_ATTEMPT_EVENTS if str(state["Resource"]).endswith((".sync", ".sync:2")) else TASK_ATTEMPT_EVENTS
        return STATE_EVENTS + per_attempt * (1 + retries(state))
    if kind == "Map":
        if name not in map_items:
            raise ValueError(f"Map state {name}: no bound on its items; known bounds: {sorted(map_items)}")
        processor = state.get("ItemProcessor") or state["Iterator"]
        item = MAP_ITERATION_EVENTS + longest_path(processor, {}, map_items)
        return MAP_EVENTS + map_items[name] * item
    return STATE_EVENTS


def _successors(state: Mapping[str, Any]) -> list[str]:
    found = [state[k] for k in ("Next", "Default") if k in state]
    found += [c["Next"] for c in state.get("Choices", [])]
    found += [c["Next"] for c in state.get("Catch", [])]
    return list(dict.fromkeys(found))


def _loops(states: Mapping[str, Mapping[str, Any]]) -> list[set[str]]:
    """The strongly connected components of the state graph (Tarjan), singletons included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for nxt in _successors(states[name]):
            if nxt not in index:
                visit(nxt)
                low[name] = min(low[name], low[nxt])
            elif nxt in stack:
                low[name] = min(low[name], index[nxt])
        if low[name] == index[name]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == name:
                    break
            found.append(component)

    for name in states:
        if name not in index:
            visit(name)
    return found


def longest_path(definition: Mapping[str, Any], loop_rounds: Mapping[str, int], map_items: Mapping[str, int]) -> int:
    """Most events the states of a definition (or a Map's item processor) can write from StartAt to an
    end: each loop (a cycle of states) at its bound of rounds, counted as one more full pass than its
    rounds (the last check and its exit), every state at its worst (state_events). loop_rounds names a
    state of each loop; a loop without a bound is an error: it could write events forever."""
    states: Mapping[str, Mapping[str, Any]] = definition["States"]
    component_of: dict[str, int] = {}
    cost: list[int] = []
    for number, component in enumerate(_loops(states)):
        for name in component:
            component_of[name] = number
        once = sum(state_events(states[n], map_items, n) for n in component)
        first = next(iter(component))
        if len(component) > 1 or first in _successors(states[first]):
            keys = [n for n in component if n in loop_rounds]
            if not keys:
                raise ValueError(f"loop {sorted(component)}: no bound on its rounds; give one for one of its states")
            once *= loop_rounds[keys[0]] + 1
        cost.append(once)
    memo: dict[int, int] = {}

    def best(number: int) -> int:
        if number not in memo:
            members = [n for n, c in component_of.items() if c == number]
            after = {component_of[s] for n in members for s in _successors(states[n])} - {number}
            memo[number] = cost[number] + max((best(a) for a in after), default=0)
        return memo[number]

    return best(component_of[definition["StartAt"]])


def worst_case_events(definition: Mapping[str, Any], loop_rounds: Mapping[str, int], map_items: Mapping[str, int]) -> int:
    """Most history events one execution of the state machine can write, its own two included."""
    return EXECUTION_EVENTS + longest_path(definition, loop_rounds, map_items)
