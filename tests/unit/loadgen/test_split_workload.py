"""A workload dealt to the processes of `bench --processes N`: every request of the one-process plan
sent by exactly one process, each process's share in the plan's order, conversations whole, a
trace's timestamps kept on one t=0, and never more processes than there are requests to deal."""

from __future__ import annotations

from collections import Counter

import pytest

from servingctl.loadgen.measure import planned_offsets
from servingctl.loadgen.shards import shares
from servingctl.loadgen.spread import spread_count
from servingctl.loadgen.workload import PlannedPrompt, Workload, split_workload
from servingctl.schema.results import Calibration, DatasetSpec, RunConfig

CALIBRATION = Calibration(target_tokens=10, actual_tokens=10, repetitions=0, method="dataset", unit="", probes=0)


def prompt(i: int, timestamp_s: float | None = None) -> PlannedPrompt:
    return PlannedPrompt((("user", f"prompt {i}"),), max_tokens=4 + i, prompt_tokens=10 + i, timestamp_s=timestamp_s)


def workload(n: int, **kw) -> Workload:
    return Workload("dataset", [prompt(i) for i in range(n)], CALIBRATION, **kw)


def config(**kw) -> RunConfig:
    given = {"endpoint": "http://x", "model": "m", "mode": "sustained", "dataset": DatasetSpec(source="d.jsonl"), **kw}
    return RunConfig(**{"warmup": 0, "max_tokens": 4, **given})


def sent(parts: list[Workload]) -> Counter[str]:
    return Counter(p.messages[0][1] for part in parts for p in part.prompts)


def test_each_prompt_of_a_dataset_sent_once_goes_to_one_process_in_order() -> None:
    parts = split_workload(workload(7), shares(5, 3), requests=7, rounds=None)
    assert [[p.messages[0][1] for p in part.prompts] for part in parts] == [
        ["prompt 0", "prompt 3", "prompt 6"],
        ["prompt 1", "prompt 4"],
        ["prompt 2", "prompt 5"],
    ]
    assert sent(parts) == sent([workload(7)])  # each request once, nothing else
    # each prompt keeps its own output length and the prompt tokens it is checked against
    assert [(p.max_tokens, p.prompt_tokens) for p in parts[1].prompts] == [(5, 11), (8, 14)]


def test_more_requests_than_prompts_deal_the_one_process_cycle() -> None:
    parts = split_workload(workload(3), [1, 1], requests=8, rounds=None)
    # the one-process plan sends prompts 0 1 2 0 1 2 0 1: the same 8, split 4 and 4
    assert sent(parts) == Counter({"prompt 0": 3, "prompt 1": 3, "prompt 2": 2}) and [len(p.prompts) for p in parts] == [4, 4]


def test_burst_rounds_give_each_process_its_streams_slice_of_every_round() -> None:
    # 5 streams over 2 processes (3 and 2), 2 rounds: round r sends positions 5r..5r+4 of the plan
    parts = split_workload(workload(10), [3, 2], requests=None, rounds=2)
    names = [[p.messages[0][1].split()[1] for p in part.prompts] for part in parts]
    assert names == [["0", "1", "2", "5", "6", "7"], ["3", "4", "8", "9"]]


def test_conversations_stay_whole_in_one_process() -> None:
    a = [prompt(0), prompt(2), prompt(4)]
    b, c = [prompt(1)], [prompt(3), prompt(5)]
    talks = Workload("conversations", [*a, *b, *c], CALIBRATION, conversations=[a, b, c])
    parts = split_workload(talks, [1, 1], requests=6, rounds=None)
    assert [part.conversations for part in parts] == [[a, c], [b]]
    assert [part.prompts for part in parts] == [[*a, *c], b]


def test_a_trace_split_keeps_every_timestamp_on_the_whole_traces_t0() -> None:
    trace = Workload("dataset", [prompt(i, timestamp_s=5.0 + i * 0.5) for i in range(5)], CALIBRATION)
    replay = config(replay_speed=2.0)
    whole = planned_offsets(replay, trace)
    parts = split_workload(trace, [1, 1], requests=5, rounds=None)
    offsets = [planned_offsets(replay.model_copy(update={"requests": len(part.prompts)}), part) for part in parts]
    # process 2's first request is the trace's second: sent 0.25 s in, not at once
    assert offsets == [[0.0, 0.5, 1.0], [0.25, 0.75]]
    assert sorted(o for part in offsets for o in part or []) == whole


@pytest.mark.parametrize(
    ("given", "processes", "expected"),
    [
        ({"requests": None}, 4, 3),  # a dataset of 3 prompts sent once: at most 3 processes
        ({"requests": 2}, 4, 2),  # at the request count, and one past it
        ({"requests": None, "duration_s": 5.0}, 4, 3),  # a duration cycles the prompts: still 3 to deal
        ({"requests": 10}, 4, 4),
    ],
)
def test_never_more_processes_than_requests_to_deal(given: dict, processes: int, expected: int) -> None:
    assert spread_count(config(**given), 8, processes, workload(3)) == expected


def test_never_more_processes_than_conversations() -> None:
    a, b = [prompt(0), prompt(1)], [prompt(2), prompt(3)]
    talks = Workload("conversations", [*a, *b], CALIBRATION, conversations=[a, b])
    assert spread_count(config(), 8, 4, talks) == 2
    assert spread_count(config(), 8, 2, talks) == 2
