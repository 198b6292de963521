"""The engine against the simulator server over real HTTP: counts, checks, salts, faults, modes."""

from __future__ import annotations

import asyncio
import csv
import json
import multiprocessing
import time
from collections import Counter

import httpx
import pytest

from servingctl.loadgen.backend import Backend, ChatRequest, Connection
from servingctl.loadgen.calibration import build_prompt
from servingctl.loadgen.measure import INDEX_STRIDE
from servingctl.loadgen.metrics import per_read, with_request_metrics
from servingctl.loadgen.outputs import read_results
from servingctl.loadgen.outputs.markdown import render_report
from servingctl.loadgen.outputs.tables import write_tables
from servingctl.loadgen.runner import run_benchmark
from servingctl.loadgen.slo import parse_slos
from servingctl.loadgen.spread import START_LEAD_S
from servingctl.schema.results import RunConfig, RunResult
from servingctl_cli.main import main
from servingctl_twin.simserver import Faults, SimConfig, running

MODEL = SimConfig().model
MAX_TOKENS = 24


def bench(url: str, **overrides) -> RunResult:
    config = RunConfig(
        **{
            "endpoint": url,
            "model": MODEL,
            "input_tokens": [256],
            "concurrencies": [2],
            "warmup": 1,
            "rounds": 2,
            "max_tokens": MAX_TOKENS,
            "timeout_s": 30.0,
            **overrides,
        }
    )
    return asyncio.run(run_benchmark(config))


def tokenize(url: str, prompt: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "add_generation_prompt": True}
    return httpx.post(f"{url}/tokenize", json=body).json()["count"]


@pytest.fixture(scope="module")
def sim():
    with running(SimConfig(speed=20)) as url:
        yield url


def test_burst_sweep_counts_agree_with_the_server(sim):
    run = bench(sim, input_tokens=[256, 1024], concurrencies=[1, 3])
    assert run.exit_code == 0 and [s.summary.name for s in run.scenarios] == ["in256-c1", "in256-c3", "in1024-c1", "in1024-c3"]
    assert run.metadata.server_version and "simulator" in json.dumps(run.metadata.server_version).lower()
    for scenario in run.scenarios:
        s, cal = scenario.summary, scenario.calibration
        assert cal.method == "tokenize" and cal.actual_tokens <= cal.target_tokens
        assert cal.actual_tokens == tokenize(sim, build_prompt(cal.repetitions))
        assert (s.ok, s.failed, s.requests) == (2 * s.concurrency, 0, 2 * s.concurrency)
        assert s.mismatches.prompt_tokens == s.mismatches.completion_tokens == s.mismatches.finish_reason == 0
        for record in scenario.records:
            assert record.prompt_tokens == cal.actual_tokens
            assert sum(t for _, t in record.chunks) == record.completion_tokens == MAX_TOKENS
        assert s.token_counts_exact and 2 in s.tokens_per_chunk  # MTP chunks carry 2 tokens
        assert s.server.generation_tokens_equal is True
        assert s.server.generation_tokens_delta == sum(r.completion_tokens for r in scenario.records)
        assert s.server.prefix_cache_ok is True and s.server.prefix_cache_hits_delta == 0
        assert s.server.spec_decode_acceptance_rate is not None
        assert len(s.rounds_output_tok_s) == 2 and s.output_tok_s is not None
        # one ITL sample per token after the first read; chunks of one read are coalesced and counted
        measured = [r for r in scenario.records if not r.warmup]
        assert s.itl_ms.count == sum(MAX_TOKENS - per_read(r.chunks)[0][1] for r in measured)
        assert s.coalesced_gaps == sum(len(r.chunks) - len(per_read(r.chunks)) for r in measured)


def test_without_salts_a_repeated_prompt_hits_the_prefix_cache(sim):
    salted = bench(sim, input_tokens=[1024], salt_mode="cache-salt").scenarios[0].summary.server
    unsalted = bench(sim, input_tokens=[1024], salt_mode="none").scenarios[0].summary.server
    assert salted.prefix_cache_hits_delta == 0 and salted.prefix_cache_ok is True
    assert unsalted.prefix_cache_hits_delta > 0 and unsalted.prefix_cache_ok is None


def test_prompt_nonce_defeats_the_cache_and_keeps_the_calibrated_length(sim):
    scenario = bench(sim, input_tokens=[1024], salt_mode="prompt-nonce").scenarios[0]
    assert scenario.calibration.nonce_tokens and scenario.calibration.warnings == []
    assert scenario.summary.server.prefix_cache_hits_delta == 0
    assert scenario.summary.mismatches.prompt_tokens == 0
    prompts = {r.prompt_tokens for r in scenario.records}
    assert prompts == {scenario.calibration.actual_tokens}


def test_sustained_mode_reports_its_steady_window(sim):
    s = bench(sim, mode="sustained", concurrencies=[3], requests=15).scenarios[0].summary
    assert (s.requests, s.ok, s.name) == (15, 15, "in256-c3-sustained")
    w = s.steady_window
    assert w.method == "first completion -> last send" and w.t_end_ns > w.t_start_ns
    assert s.output_tok_s == pytest.approx(w.completion_tokens / w.duration_s)


NS = 1_000_000_000


@pytest.mark.parametrize(
    ("mode", "load"),
    [("burst", {}), ("sustained", {"requests": 6}), ("rate", {"rate": 20.0, "concurrencies": [4], "requests": 6})],
)
def test_a_warm_up_by_time_sends_load_for_about_that_long_and_none_of_it_is_measured(sim, tmp_path, mode, load):
    run = bench(sim, mode=mode, warmup=0, warmup_s=1.0, slos=parse_slos("ttft_ms=600000"), **load)
    scenario = run.scenarios[0]
    s = scenario.summary
    warm = [r for r in scenario.records if r.warmup]
    measured = [r for r in scenario.records if not r.warmup]
    # Load for about the warm-up's second: sends only before its end (slack for a busy machine), and
    # in burst and sustained the load goes on until then; it ends before the first measured send.
    first_send = min(r.t_start_ns for r in warm)
    assert len(warm) >= 2 and (max(r.t_start_ns for r in warm) - first_send) / NS < 1.5
    if mode != "rate":
        assert (max(r.t_end_ns for r in warm) - first_send) / NS >= 1.0
    assert max(r.t_end_ns for r in warm) <= min(r.t_start_ns for r in measured)
    # None counted as measured: counts, rounds, steady window, SLO and the CSV's warmup column.
    assert (s.requests, s.ok) == (len(measured), len(measured)) == ((4,) * 2 if mode == "burst" else (6,) * 2)
    if mode == "burst":
        assert [r.warmup for r in scenario.rounds].count(False) == 2 == len(s.rounds_output_tok_s)
    else:
        assert s.steady_window is not None and s.steady_window.t_start_ns >= min(r.t_start_ns for r in measured)
    assert s.slo is not None and s.slo.good_requests == len(measured)
    assert s.slo.duration_s <= (max(r.t_end_ns for r in measured) - min(r.t_start_ns for r in measured)) / NS
    write_tables(run, tmp_path)
    with (tmp_path / "requests.csv").open() as rows:
        flags = Counter(row["warmup"] for row in csv.DictReader(rows))
    assert flags == {"True": len(warm), "False": len(measured)}
    assert run.config.warmup_label() == "1s" and "--warmup 1s" in render_report(run)


def test_rate_mode_sends_the_poisson_schedule(sim):
    s = bench(sim, mode="rate", rate=40.0, concurrencies=[8], requests=12).scenarios[0].summary
    assert (s.requests, s.ok, s.name) == (12, 12, "in256-c8-rate40")
    assert s.achieved_rate_rps is not None and s.steady_window is not None


@pytest.mark.parametrize(
    ("faults", "kind", "timeout_s"),
    [
        (Faults(error_rate=0.5, seed=3), "http_status", 30.0),
        (Faults(stream_cut=0.5, seed=3), "stream_cut", 30.0),
        (Faults(malformed=0.5, seed=3), "malformed_sse", 30.0),
        (Faults(stall_s=2.0), "timeout", 0.5),
    ],
)
def test_faults_are_recorded_per_request_and_never_abort(faults, kind, timeout_s):
    with running(SimConfig(speed=20, faults=faults)) as url:
        run = bench(url, concurrencies=[1, 2], timeout_s=timeout_s, warmup=0)
        lenient = bench(url, concurrencies=[2], timeout_s=timeout_s, warmup=0, max_failure_rate=1.0)
    assert len(run.scenarios) == 2  # the sweep went on after failures
    summaries = [s.summary for s in run.scenarios]
    assert sum(s.failures_by_kind.get(kind, 0) for s in summaries) > 0
    assert all(s.ok + s.failed == s.requests for s in summaries)
    failed = [r for sc in run.scenarios for r in sc.records if not r.ok]
    assert failed and all(r.error_kind == kind and r.error for r in failed)
    assert run.exit_code == 1 and run.failed_scenarios
    assert lenient.exit_code == 0


def test_cli_writes_results_and_prints_the_reference_table(sim, tmp_path, capsys):
    code = main(
        [
            "bench",
            "--endpoint",
            sim,
            "--model",
            MODEL,
            "--input-tokens",
            "256",
            "--concurrency",
            "1,2",
            "--warmup",
            "0",
            "--rounds",
            "2",
            "--max-tokens",
            str(MAX_TOKENS),
            "--output",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    # the reference's columns, in two-line headers, then one row per scenario in input order
    top = next(i for i, line in enumerate(lines) if line.startswith("input"))
    header = [cell for line in lines[top : top + 2] for cell in line.split()]
    for word in ("input", "conc.", "output", "TTFT", "median", "decode", "failed"):
        assert word in header
    run = read_results(tmp_path)
    assert [s.summary.name for s in run.scenarios] == ["in256-c1", "in256-c2"]
    # the scenario rows (a busy machine adds a HOST BUSY line under a row)
    rows = [line.split() for line in lines[top + 2 :] if line.startswith("256 ")]
    for row, scenario in zip(rows, run.scenarios, strict=True):
        # input tokens, concurrency and output tok/s as written to results.json
        assert row[:2] == ["256", str(scenario.summary.concurrency)]
        assert float(row[2].replace(",", "")) == round(scenario.summary.output_tok_s, 2)
    assert (tmp_path / "vllm" / "in256-c2.json").exists() and (tmp_path / "report.md").exists()


def test_cli_exit_code_follows_the_failure_rate(tmp_path, capsys):
    with running(SimConfig(speed=20, faults=Faults(error_rate=1.0))) as url:
        args = [
            "bench",
            "--endpoint",
            url,
            "--model",
            MODEL,
            "--input-tokens",
            "256",
            "--concurrency",
            "1",
            "--warmup",
            "0",
            "--rounds",
            "1",
            "--max-tokens",
            "8",
            "--json",
        ]
        assert main(args) == 1
        assert json.loads(capsys.readouterr().out)["failed_scenarios"] == ["in256-c1"]
        assert main([*args, "--max-failure-rate", "1"]) == 0


def test_processes_spread_the_streams_and_merge_them_on_the_hosts_one_clock():
    with running(SimConfig(speed=20, debug_timings=True)) as url:
        config = RunConfig(
            endpoint=url,
            model=MODEL,
            input_tokens=[256],
            concurrencies=[5],
            mode="sustained",
            requests=20,
            warmup=1,
            max_tokens=MAX_TOKENS,
            timeout_s=30.0,
        )
        events = []
        run = asyncio.run(run_benchmark(config, processes=2, progress=events.append))
        truth = {s["cache_salt"]: s for s in httpx.get(f"{url}/debug/timings").json()["streams"]}
        single = asyncio.run(run_benchmark(config.model_copy(update={"concurrencies": [1], "requests": 2}), processes=2))
        one_request = asyncio.run(run_benchmark(config.model_copy(update={"requests": 1, "warmup": 0}), processes=2))
    scenario = run.scenarios[0]
    s = scenario.summary
    assert run.exit_code == 0 and (s.name, s.requests, s.ok, s.concurrency) == ("in256-c5-sustained", 20, 20, 5)
    # two processes: 3 and 2 of the 5 streams (their warm-ups), 10 measured requests each, numbered apart
    part = Counter((r.warmup, r.index // INDEX_STRIDE) for r in scenario.records)
    assert part == {(True, 1): 3, (True, 2): 2, (False, 1): 10, (False, 2): 10}
    assert s.client.processes == 2 and s.server.generation_tokens_equal is True
    assert s.server.generation_tokens_delta == sum(r.completion_tokens for r in scenario.records) == 25 * MAX_TOKENS
    # one timeline: the server received every request a loopback flight after its merged send time,
    # the same for both processes (a part merged on another clock would be off by its start-up)
    flights = [truth[f"{run.metadata.run_id}-{s.name}-{r.index}"]["received_ns"] - r.t_start_ns for r in scenario.records]
    assert max(flights) - min(flights) < 50e6

    # one progress line for the scenario: both processes' finished requests summed, up to all 25
    started = [e for e in events if e.kind == "scenario_started"]
    done = [e.done for e in events if e.kind == "request_done"]
    assert [e.total for e in started] == [25] and "over 2 processes" in started[0].message
    assert done == sorted(done) and done[-1] == 25
    # one stream cannot be spread: concurrency 1 runs in this process, numbered from 0
    assert single.scenarios[0].summary.client.processes == 1 and max(r.index for r in single.scenarios[0].records) < INDEX_STRIDE
    # nor one request: a second process would have nothing to send
    assert one_request.scenarios[0].summary.client.processes == 1 and len(one_request.scenarios[0].records) == 1


def test_processes_deal_a_datasets_requests_and_conversations_each_once(tmp_path):
    # 9 prompts, each with its own output length (so each record names its line), and 3 conversations
    # of 2 turns: --processes 2 sends each exactly once, from one of two processes, checked as one.
    single = tmp_path / "prompts.jsonl"
    single.write_text(
        "\n".join(json.dumps({"prompt": f"question number {i} " * (1 + i), "output_tokens": 3 + i}) for i in range(9))
    )
    talks = tmp_path / "talks.jsonl"
    turns = [{"prompt": f"turn {k} of {c}", "conversation_id": c, "output_tokens": 2 + k} for k in range(2) for c in "abc"]
    talks.write_text("\n".join(json.dumps(t) for t in turns))
    with running(SimConfig(speed=20)) as url:
        common = {"endpoint": url, "model": MODEL, "concurrencies": [3], "mode": "sustained", "warmup": 0, "timeout_s": 30.0}
        spec = {"output_tokens": "dataset"}
        run = asyncio.run(run_benchmark(RunConfig(**common, dataset={"source": str(single), **spec}), processes=2))
        chats = asyncio.run(run_benchmark(RunConfig(**common, dataset={"source": str(talks), **spec}), processes=2))
    [scenario] = run.scenarios
    s = scenario.summary
    assert run.exit_code == 0 and (s.name, s.requests, s.ok) == ("dataset-c3-sustained", 9, 9)
    assert sorted(r.completion_tokens for r in scenario.records) == list(range(3, 12))  # each line once
    assert not any(r.mismatches for r in scenario.records)  # each prompt's tokens as the server counted them
    assert Counter(r.index // INDEX_STRIDE for r in scenario.records) == {1: 5, 2: 4}  # lines 0 2 4 6 8, then 1 3 5 7
    assert s.client.processes == 2 and s.server.generation_tokens_equal is True
    [talk] = chats.scenarios
    assert talk.summary.name == "conversations-c3-sustained" and talk.summary.ok == 6 and talk.summary.client.processes == 2
    # whole conversations: a and c (2 streams) in process 1, b in process 2, each second turn after the first
    by_process: dict[int, list[int]] = {}
    for r in sorted(talk.records, key=lambda r: r.t_start_ns):
        by_process.setdefault(r.index // INDEX_STRIDE, []).append(r.completion_tokens)
    assert by_process == {1: [2, 2, 3, 3], 2: [2, 3]}


def test_processes_refuse_rate_mode_naming_the_flag_and_its_values(capsys):
    with pytest.raises(SystemExit):
        main(
            [
                "bench",
                "--endpoint",
                "http://127.0.0.1:9",
                "--model",
                MODEL,
                "--mode",
                "rate",
                "--rate",
                "2",
                "--requests",
                "4",
                "--processes",
                "2",
            ]
        )
    err = capsys.readouterr().err
    assert "--processes: rate mode runs in one process" in err and "1 to 64 with --mode burst or sustained" in err
    with pytest.raises(SystemExit):
        main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", MODEL, "--processes", "65"])
    assert "an integer from 1 to 64" in capsys.readouterr().err


def test_an_interrupted_spread_stops_every_process_it_started():
    with running(SimConfig(speed=20, faults=Faults(stall_s=60))) as url:  # every stream stalls
        config = RunConfig(
            endpoint=url,
            model=MODEL,
            input_tokens=[256],
            concurrencies=[4],
            mode="sustained",
            requests=8,
            warmup=0,
            max_tokens=MAX_TOKENS,
            timeout_s=120.0,
        )

        async def interrupted() -> tuple[int, float, list]:
            task = asyncio.create_task(run_benchmark(config, processes=2))
            deadline = time.monotonic() + 60
            while len(multiprocessing.active_children()) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            running_then = len(multiprocessing.active_children())
            await asyncio.sleep(START_LEAD_S + 1)  # their requests are out, stalled
            task.cancel()  # what Ctrl-C does to the CLI's main task
            cancelled = time.monotonic()
            with pytest.raises(asyncio.CancelledError):
                await task
            return running_then, time.monotonic() - cancelled, multiprocessing.active_children()

        running_then, stopping_s, left = asyncio.run(interrupted())
    # the processes are stopped, not waited for: their streams would stall for a minute
    assert running_then == 2 and left == [] and stopping_s < 15


def test_ttft_is_when_the_first_token_reached_the_socket_even_with_the_loop_busy():
    async def busy_while_it_streams(url):
        async with Backend(Connection(url), MODEL, max_connections=1) as backend:
            await backend.warm(1)
            request = ChatRequest("busy", 0, 0, False, "hello", cache_salt="busy")
            task = asyncio.create_task(backend.stream_chat(request, max_tokens=3, seed=1, t0=0))
            await asyncio.sleep(0.005)  # the request is out
            time.sleep(0.3)  # the loop cannot read when the first token arrives (~5 ms)
            await asyncio.sleep(0.02)  # it reads it
            time.sleep(0.35)  # nor when the second arrives, a pace (400 ms) after the first
            return await task

    with running(SimConfig(speed=20, mtp_tokens=0, pace_ms=400, pace_phase="stream", debug_timings=True)) as url:
        record = with_request_metrics(asyncio.run(busy_while_it_streams(url)))
        (truth,) = httpx.get(f"{url}/debug/timings").json()["streams"]
    assert record.ok and record.completion_tokens == 3
    server_ttft_ms = (truth["first_content_sent_ns"] - truth["received_ns"]) / 1e6
    # the first token's read carries the kernel's receive time: loopback flights from the server's
    # TTFT, not the 300 ms the loop was away
    assert server_ttft_ms < 100 and abs(record.ttft_ms - server_ttft_ms) < 5
    # after the first token the loop's transport reads: the second is stamped when the loop got to it
    assert (record.chunks[1][0] - record.t_start_ns) / 1e6 >= 650


# A trace of 12 requests over 5 s from t=100 s, one line out of order and two pairs of equal
# timestamps. Replayed at speed 2 it spans 2.5 s: ignoring the timestamps (all at once) or the speed
# (twice as long) puts the last request 2.5 s off, far past REPLAY_TOLERANCE_S, which still leaves a
# busy 2-core machine a quarter of a second of lateness per request.
TRACE_S = [100.0, 100.3, 100.3, 101.0, 100.9, 101.8, 102.5, 102.5, 103.1, 104.0, 104.2, 105.0]
REPLAY_SPEED = 2.0
REPLAY_TOLERANCE_S = 0.25


def test_replay_sends_each_request_at_its_timestamp_divided_by_the_speed(sim, tmp_path, capsys):
    # prompt i has 3 + 2i words: the server's prompt-token count tells which line a record sent
    lines = [{"prompt": " ".join(["word"] * (3 + 2 * i)), "timestamp": t} for i, t in enumerate(TRACE_S)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code = main(
        [
            "bench",
            "--endpoint",
            sim,
            "--model",
            MODEL,
            "--dataset",
            str(trace),
            "--replay",
            str(REPLAY_SPEED),
            "--concurrency",
            str(len(TRACE_S)),  # the cap never delays a send
            "--warmup",
            "0",
            "--max-tokens",
            "4",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0, capsys.readouterr()
    scenario = read_results(tmp_path / "out").scenarios[0]
    assert scenario.summary.name == f"dataset-c{len(TRACE_S)}-replay2" and scenario.summary.ok == len(TRACE_S)
    line_of = {tokenize(sim, line["prompt"]): i for i, line in enumerate(lines)}
    assert len(line_of) == len(lines)
    sent = sorted(scenario.records, key=lambda r: r.t_start_ns)
    # the order is the timestamps' (ties in file order), and sending order is index order
    assert [line_of[r.prompt_tokens] for r in sent] == sorted(range(len(lines)), key=lambda i: TRACE_S[i])
    assert [r.index for r in sent] == sorted(r.index for r in sent)
    # each request left at (its timestamp - the first one's) / speed after the first request
    first = sent[0].t_start_ns
    for record in sent:
        planned_s = (TRACE_S[line_of[record.prompt_tokens]] - TRACE_S[0]) / REPLAY_SPEED
        actual_s = (record.t_start_ns - first) / 1e9
        assert abs(actual_s - planned_s) <= REPLAY_TOLERANCE_S, (line_of[record.prompt_tokens], actual_s, planned_s)
