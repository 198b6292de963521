"""The start timeline's arithmetic: vLLM's phases from its lines (several versions), phase spans,
the controller's overhead, and the p50/p90 expectations from past starts."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from servingctl.control.timeline import (
    FACTOR,
    LABELS,
    MARGIN_S,
    MIN_HISTORY,
    derived_wait,
    expected_ready,
    hook_wait_marks,
    merge,
    next_mark,
    note_hook_waits,
    overheads,
    percentile,
    phase_history,
    spans,
    vllm_marks,
)
from servingctl.store.models import Mark, StartRecord

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)

# vLLM 0.32 on CPU (--enforce-eager), as the real server printed it on this machine.
CPU_0_32 = [
    "(APIServer pid=23944) INFO 12-04 12:21:55 [api_utils.py:286] non-default args: {'host': '127.0.0.1'}",
    (
        "(APIServer pid=23944) WARNING 12-04 12:21:55 [vllm.py:1703] "
        "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup."
    ),
    "(Worker pid=24059) INFO 12-04 12:22:18 [cpu_model_runner.py:68] Starting to load model /work/main/.cache/tiny-llama...",
    "(Worker pid=24059) INFO 12-04 12:22:18 [base_loader.py:82] Initializing model took 0.118493 seconds",
    "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 436.95it/s]",
    "(Worker pid=24059) INFO 12-04 12:22:18 [default_loader.py:501] Loading weights took 0.00 seconds",
    "(EngineCore pid=23988) INFO 12-04 12:22:20 [core.py:402] init engine (profile, create kv cache, warmup model) took 0.37 s",
    "INFO:     Application startup complete.",
]
# A GPU server of the 0.9 era (lines as vLLM issue reports quote them).
GPU_0_9 = [
    "INFO 06-19 23:05:01 [loader.py:447] Loading weights took 0.69 seconds",
    "INFO 06-19 23:05:01 [gpu_model_runner.py:1273] Model loading took 3.4213 GiB and 0.902026 seconds",
    "INFO 06-19 23:05:09 [backends.py:426] Dynamo bytecode transform time: 7.51 s",
    "INFO 06-19 23:05:18 [monitor.py:33] torch.compile takes 7.51 s in total",
    "INFO 06-19 23:05:35 [gpu_model_runner.py:1608] Graph capturing finished in 17 secs, took 0.48 GiB",
    "INFO 06-19 23:05:35 [core.py:162] init engine (profile, create kv cache, warmup model) took 34.11 seconds",
    "INFO 06-19 23:05:36 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000",
]


def _events(lines: list[str]) -> list[tuple[datetime, str]]:
    return [(T0 + timedelta(seconds=i), line) for i, line in enumerate(lines)]


def test_vllm_cpu_lines_give_five_phases_and_ignore_the_rest() -> None:
    marks = vllm_marks(_events(CPU_0_32))
    assert [(m.name, (m.at - T0).total_seconds()) for m in marks] == [
        ("vllm_load_started", 2),
        ("vllm_model_initialized", 3),
        ("vllm_weights_loaded", 5),
        ("vllm_engine_ready", 6),
        ("vllm_api_ready", 7),
    ]  # the "disabling torch.compile" warning is not a compile


def test_the_streamers_last_progress_line_ends_the_weights() -> None:
    # vLLM 0.32 on CPU, --load-format runai_streamer on an s3:// model (the twin's S3), as printed here.
    streamed = [
        "(Worker pid=28329) INFO 12-06 20:24:58 [cpu_model_runner.py:68] Starting to load model /root/.cache/vllm/assets/x...",
        "(Worker pid=28329) INFO 12-06 20:24:59 [base_loader.py:82] Initializing model took 0.178657 seconds",
        "Loading safetensors using Runai Model Streamer:   0% Completed | 0/21 [00:00<?, ?it/s]",
        "Loading safetensors using Runai Model Streamer: 100% Completed | 21/21 [00:00<00:00, 244.45it/s]",
        "(EngineCore pid=28317) INFO 12-06 20:25:00 [core.py:402] "
        "init engine (profile, create kv cache, warmup model) took 0.86 s",
    ]
    marks = vllm_marks(_events(streamed))
    assert [(m.name, (m.at - T0).total_seconds()) for m in marks] == [
        ("vllm_load_started", 0),
        ("vllm_model_initialized", 1),
        ("vllm_weights_loaded", 3),
        ("vllm_engine_ready", 4),
    ]


def test_vllm_gpu_lines_give_compile_and_graph_capture() -> None:
    names = [m.name for m in vllm_marks(_events(GPU_0_9))]
    assert names == [
        "vllm_weights_loaded",
        "vllm_model_loaded",
        "vllm_compiled",
        "vllm_graphs_captured",
        "vllm_engine_ready",
        "vllm_api_ready",
    ]


def test_the_last_compile_range_ends_torch_compile() -> None:
    lines = [
        "Compiling a graph for compile range (1, 512) takes 12.50 s",
        "Compiling a graph for compile range (513, 8192) takes 30.10 s",
    ]
    [mark] = vllm_marks(_events(lines))
    assert mark.at == T0 + timedelta(seconds=1)


def _record(offsets: dict[str, float], outcome: str = "READY", start: datetime = T0) -> StartRecord:
    record = StartRecord(profile="p", start_id=f"{start.isoformat()}#x", execution="x", requested_at=start, outcome=outcome)
    merge(record, [Mark(name=n, at=start + timedelta(seconds=s), source="test") for n, s in offsets.items()], start)
    return record


def test_spans_run_from_mark_to_mark_and_add_up_to_the_start() -> None:
    record = _record({"requested": 0, "instance_launched": 10, "instance_registered": 70, "pull_stopped": 190, "ready": 900})
    assert spans(record) == [
        ("instance_launched", 10, 10),
        ("instance_registered", 60, 70),
        ("pull_stopped", 120, 190),
        ("ready", 710, 900),
    ]


def test_a_wait_on_the_launch_hook_is_a_phase_of_its_own_and_only_when_the_start_waited() -> None:
    waits: dict[str, list[str | None]] = {}
    polls = [
        # The start's instance prepares in the warm pool (a refill beside it is not the start's).
        (20, [("i-warm", "Warmed:Pending:Wait"), ("i-refill", "Warmed:Pending")]),
        (35, [("i-warm", "Warmed:Pending:Wait"), ("i-refill", "Warmed:Pending:Wait")]),
        (50, [("i-warm", "Warmed:Stopped"), ("i-refill", "Warmed:Pending:Wait")]),
        (65, [("i-warm", "InService"), ("i-refill", "Warmed:Pending:Wait")]),
    ]
    for at, seen in polls[:2]:
        note_hook_waits(waits, seen, T0 + timedelta(seconds=at))
    # Still held: the wait has begun, not ended.
    assert [m.name for m in hook_wait_marks(waits, ["i-warm"])] == ["hook_wait_started"]
    for at, seen in polls[2:]:
        note_hook_waits(waits, seen, T0 + timedelta(seconds=at))
    marks = hook_wait_marks(waits, ["i-warm"])
    assert [(m.name, m.at) for m in marks] == [
        ("hook_wait_started", T0 + timedelta(seconds=20)),
        ("hook_wait_ended", T0 + timedelta(seconds=50)),
    ]
    record = StartRecord(profile="p", start_id="s", execution="e", requested_at=T0)
    merge(record, [Mark(name="requested", at=T0, source="controller"), *marks], T0 + timedelta(seconds=70))
    merge(record, [Mark(name="instance_registered", at=T0 + timedelta(seconds=60), source="ecs")], T0 + timedelta(seconds=70))
    assert spans(record) == [
        ("hook_wait_started", 20.0, 20.0),
        ("hook_wait_ended", 30.0, 50.0),
        ("instance_registered", 10.0, 60.0),
    ]
    assert LABELS["hook_wait_ended"] == "launch lifecycle hook wait (the warm pool's prepare step)"
    # A start whose instances never waited on a hook has no such phase.
    assert hook_wait_marks(waits, ["i-cold"]) == [] and hook_wait_marks({}, []) == []


def test_merge_keeps_when_a_mark_was_first_seen_and_overheads_measure_it() -> None:
    record = _record({"requested": 0})
    seen = T0 + timedelta(seconds=12)
    assert merge(record, [Mark(name="pull_stopped", at=T0 + timedelta(seconds=10), source="ecs")], seen)
    assert not merge(
        record, [Mark(name="pull_stopped", at=T0 + timedelta(seconds=10), source="ecs")], seen + timedelta(seconds=5)
    )
    assert overheads(record)["pull_stopped"] == 2


@pytest.mark.parametrize(("values", "q", "expected"), [([5.0], 90, 5.0), ([1, 2, 3, 4], 50, 2.5), ([10, 20], 90, 19.0)])
def test_percentile_interpolates(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_next_mark_and_ready_come_from_past_ready_starts_only() -> None:
    history = [
        _record({"instance_launched": 10, "pull_stopped": 200, "ready": 800}),
        _record({"instance_launched": 30, "pull_stopped": 220, "ready": 1000}),
        _record({"instance_launched": 5, "ready": 5}, outcome="FAILED"),  # a failed start predicts nothing
    ]
    now = _record({"requested": 0, "instance_launched": 12})
    name, due = next_mark(now, history)
    assert name == "pull_stopped" and due == T0 + timedelta(seconds=210)
    assert expected_ready(now, history, T0) == T0 + timedelta(seconds=900)
    assert expected_ready(now, history, T0 + timedelta(seconds=950)) == T0 + timedelta(seconds=950)  # late: never in the past
    assert phase_history(history)["ready"] == [600, 780]


def test_without_history_the_next_mark_is_the_next_in_order_with_no_time() -> None:
    assert next_mark(_record({"requested": 0}), []) == ("instance_launched", None)
    assert expected_ready(_record({"requested": 0}), [], T0) is None
    assert next_mark(_record({"requested": 0, "ready": 5}), []) is None


def _health_history(seconds: list[float], outcome: str = "READY") -> list[StartRecord]:
    return [
        _record({"task_started": 100, "target_healthy": 100 + s}, outcome=outcome, start=T0 + timedelta(hours=i))
        for i, s in enumerate(seconds)
    ]


SPAN = ("task_started", "target_healthy")


def test_a_derived_wait_needs_enough_ready_starts_that_passed_both_marks() -> None:
    assert derived_wait(_health_history([300.0] * (MIN_HISTORY - 1)), SPAN, 60, 7200) is None  # one short: the fixed guess
    failed = _health_history([300.0], outcome="FAILED")
    assert derived_wait(_health_history([300.0] * (MIN_HISTORY - 1)) + failed, SPAN, 60, 7200) is None
    without = [_record({"task_started": 100}) for _ in range(MIN_HISTORY)]  # never reached health: says nothing
    assert derived_wait(without, SPAN, 60, 7200) is None
    assert derived_wait(_health_history([300.0] * MIN_HISTORY), SPAN, 60, 7200) == 300 * FACTOR + MARGIN_S


def test_a_derived_wait_is_the_p90_with_its_margin_within_its_bounds() -> None:
    history = _health_history([100.0, 200.0, 300.0, 400.0, 1000.0])
    expected = math.ceil(percentile([100, 200, 300, 400, 1000], 90) * FACTOR + MARGIN_S)
    assert derived_wait(history, SPAN, 60, 7200) == expected
    # At the bounds and one past them.
    assert derived_wait(history, SPAN, 60, expected) == expected
    assert derived_wait(history, SPAN, 60, expected - 1) == expected - 1
    assert derived_wait(history, SPAN, expected, 7200) == expected
    assert derived_wait(history, SPAN, expected + 1, 7200) == expected + 1
    assert derived_wait(_health_history([0.0] * MIN_HISTORY), SPAN, 60, 7200) == max(60, MARGIN_S)
