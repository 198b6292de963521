"""A user's own prompts file against the real vLLM on CPU (tiny local model): every request's prompt
and output tokens as the server counts them; conversations whose later turns carry the history
(the server's replies included) and hit the prefix cache of their own conversation only; and the
same ShareGPT file through `vllm bench serve` and `servingctl bench`: the same requests (the
server's own prompt and generation counters move alike), the same output tokens per request, and
TTFT / E2E medians within SIDE_BY_SIDE_TOLERANCE."""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from servingctl.loadgen.backend import Backend
from servingctl.loadgen.outputs import read_results
from servingctl_cli.main import main
from servingctl_twin.modelserver import ModelServerProcess, tiny_model_dir, vllm_python

pytestmark = pytest.mark.e2e

# Medians of the two tools, run one after the other on a shared 2-core machine: the larger of a
# relative and an absolute difference is allowed (the tiny model's TTFT is a few ms, where a
# scheduler hiccup alone is a few ms).
SIDE_BY_SIDE_TOLERANCE = (0.25, 5.0)  # share, ms
TEXT = (
    "the quick brown fox jumps over a lazy dog while servers stream tokens to clients who measure "
    "every chunk and compare medians across tools on one machine"
)


def sentence(n: int, shift: int) -> str:
    words = TEXT.split()
    return " ".join(words[(shift + i) % len(words)] for i in range(n))


def sharegpt(path: Path, count: int) -> Path:
    """Prompts of 6 to 60 words and reference answers of 5 to 40 words (inside vLLM's own filter:
    at least 4 tokens each, prompt at most 1024, both at most 2048)."""
    rows = [
        {
            "id": f"conv-{i}",
            "conversations": [
                {"from": "human", "value": sentence(6 + (i * 7) % 55, i)},
                {"from": "gpt", "value": sentence(5 + (i * 11) % 36, i + 3)},
                {"from": "human", "value": "a later turn, not sent"},
            ],
        }
        for i in range(count)
    ]
    path.write_text(json.dumps(rows))
    return path


COUNTERS = (
    ("prompt", "vllm:prompt_tokens_total"),
    ("generation", "vllm:generation_tokens_total"),
    ("hits", "vllm:prefix_cache_hits_total"),
    ("queries", "vllm:prefix_cache_queries_total"),
)


def parse_counters(text: str) -> dict[str, float]:
    """vLLM's prompt, generation and prefix-cache counters of a /metrics text (sums over label sets)."""
    out = dict.fromkeys((key for key, _ in COUNTERS), 0.0)
    for line in text.splitlines():
        for key, name in COUNTERS:
            if re.match(rf"{re.escape(name)}(\{{|\s)", line):
                out[key] += float(line.rsplit(" ", 1)[1])
    return out


def counters(url: str) -> dict[str, float]:
    """The server's counters now (parse_counters)."""
    return parse_counters(httpx.get(f"{url}/metrics", timeout=10).text)


def settled(url: str, before: dict[str, float], generated: int) -> dict[str, float]:
    """Counters once they account for `generated` tokens (they move just after a stream ends)."""
    for _ in range(50):
        after = counters(url)
        if after["generation"] - before["generation"] >= generated:
            return after
        time.sleep(0.1)
    return counters(url)


def tokenize(url: str, model: str, **body) -> int:
    return httpx.post(f"{url}/tokenize", json={"model": model, **body}, timeout=30).json()["count"]


def run_servingctl(server: ModelServerProcess, dataset: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "bench",
            "--endpoint",
            server.url,
            "--model",
            server.model,
            "--dataset",
            str(dataset),
            "--concurrency",
            "1",
            "--timeout",
            "120",
            "--output",
            str(out),
            *extra,
        ]
    )


def test_sharegpt_file_lengths_exact_per_request_and_counters_equal(vllm_server, tmp_path, capsys):
    dataset = sharegpt(tmp_path / "sharegpt.json", 10)
    before = counters(vllm_server.url)
    code = run_servingctl(
        vllm_server,
        dataset,
        tmp_path / "out",
        "--warmup",
        "1",
        "--num-prompts",
        "8",
        "--dataset-output-tokens",
        "dataset",
        "--concurrency",
        "2",
    )
    assert code == 0, capsys.readouterr()
    run = read_results(tmp_path / "out")
    assert run.dataset is not None and (run.dataset.format, run.dataset.prompts, run.dataset.entries) == ("sharegpt", 8, 10)
    scenario = run.scenarios[0]
    assert scenario.summary.name == "dataset-c2-sustained" and scenario.summary.failed == 0
    measured = sorted((r for r in scenario.records if not r.warmup), key=lambda r: r.index)
    assert len(measured) == 8
    rows = json.loads(dataset.read_text())[:8]
    for record, row in zip(measured, rows, strict=True):
        human, reference = row["conversations"][0]["value"], row["conversations"][1]["value"]
        # the server's usage equals its own count of the first turn as one user message, chat template included
        assert record.prompt_tokens == tokenize(
            vllm_server.url, vllm_server.model, messages=[{"role": "user", "content": human}], add_generation_prompt=True
        )
        # the output length is the reference answer's tokens, exactly (ignore_eos)
        assert record.completion_tokens == tokenize(vllm_server.url, vllm_server.model, prompt=reference)
        assert record.finish_reason == "length" and not record.mismatches
    warm = [r for r in scenario.records if r.warmup]
    after = settled(vllm_server.url, before, sum(r.completion_tokens or 0 for r in scenario.records))
    assert after["prompt"] - before["prompt"] == sum(r.prompt_tokens or 0 for r in measured + warm)
    assert after["generation"] - before["generation"] == sum(r.completion_tokens or 0 for r in measured + warm)
    assert scenario.summary.server.generation_tokens_equal is True
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"sha256 {run.dataset.sha256}" in report


@dataclass(frozen=True)
class Sent:
    """One request as servingctl sent it, the reply it streamed, and the server's counters it moved."""

    messages: list[dict[str, str]]
    reply: str
    moved: dict[str, float]


def conversations_file(path: Path) -> tuple[Path, dict[str, list[str]]]:
    """Three conversations of three turns as JSONL: a and b open with the same long first turn (over
    a few cache blocks), c with another; the later turns are short and differ."""
    opening = sentence(200, 0)
    talks = {
        "a": [opening, sentence(9, 1), sentence(7, 2)],
        "b": [opening, sentence(8, 5), sentence(10, 6)],
        "c": [sentence(180, 9), sentence(6, 3), sentence(11, 4)],
    }
    lines = [json.dumps({"conversation_id": cid, "prompt": turn}) for cid, turns in talks.items() for turn in turns]
    path.write_text("\n".join(lines) + "\n")
    return path, talks


def test_conversations_carry_the_history_and_hit_the_cache_of_their_own_conversation_only(
    vllm_server, tmp_path, capsys, monkeypatch
):
    dataset, talks = conversations_file(tmp_path / "talks.jsonl")
    url = vllm_server.url
    sent: list[Sent] = []
    stream_chat = Backend.stream_chat

    async def recorded(self, request, *, max_tokens, seed, t0, text=None):
        # What went out and came back, and the server's counters around this one request (one in flight).
        reply: list[str] = text if text is not None else []
        async with httpx.AsyncClient(timeout=10) as client:
            before = parse_counters((await client.get(f"{url}/metrics")).text)
            record = await stream_chat(self, request, max_tokens=max_tokens, seed=seed, t0=t0, text=reply)
            for _ in range(50):
                after = parse_counters((await client.get(f"{url}/metrics")).text)
                if after["generation"] - before["generation"] >= (record.completion_tokens or 0):
                    break
                await asyncio.sleep(0.1)
        sent.append(Sent(list(request.messages or []), "".join(reply), {k: after[k] - before[k] for k in after}))
        return record

    monkeypatch.setattr(Backend, "stream_chat", recorded)
    think_s = 0.05
    before = counters(url)
    code = run_servingctl(
        vllm_server, dataset, tmp_path / "out", "--warmup", "0", "--max-tokens", "8", "--think-time", str(think_s)
    )
    assert code == 0, capsys.readouterr()
    run = read_results(tmp_path / "out")
    scenario = run.scenarios[0]
    records = sorted(scenario.records, key=lambda r: r.index)
    assert scenario.summary.name == "conversations-c1-sustained" and scenario.summary.failed == 0
    assert len(records) == len(sent) == 9  # one conversation at a time: a's turns, then b's, then c's
    after = settled(url, before, sum(r.completion_tokens or 0 for r in records))
    moved = {k: after[k] - before[k] for k in after}

    turns = [(cid, k, turn) for cid, ts in talks.items() for k, turn in enumerate(ts)]
    for i, ((cid, k, turn), request, record) in enumerate(zip(turns, sent, records, strict=True)):
        # each turn: the whole history, the server's own replies included, then the file's next turn
        history = [] if k == 0 else [*sent[i - 1].messages, {"role": "assistant", "content": sent[i - 1].reply}]
        assert request.messages == [*history, {"role": "user", "content": turn}], (cid, k)
        assert len(request.reply) > 0 and record.completion_tokens == 8
        counted = tokenize(url, vllm_server.model, messages=request.messages, add_generation_prompt=True)
        assert record.prompt_tokens == request.moved["prompt"] == counted, (cid, k)
        if k:  # the reply came back before the next turn went out, a think time later
            assert record.t_start_ns - records[i - 1].t_end_ns >= think_s * 1e9
    # the server counted exactly these prompts: a dropped history would move it by far less
    assert moved["prompt"] == sum(request.moved["prompt"] for request in sent) == scenario.summary.server.prompt_tokens_delta

    # prefix-cache hits, request by request from the server's counters: every later turn reuses its
    # own conversation's cached prefix (at least the first turn's blocks); no first turn hits, not even
    # b's, identical to a's (one salt per conversation, so a's cached blocks are not b's)
    hits = [request.moved["hits"] for request in sent]
    first_turn_tokens = {cid: records[3 * j].prompt_tokens for j, cid in enumerate(talks)}
    for (cid, k, _), hit in zip(turns, hits, strict=True):
        if k == 0:
            assert hit == 0, (cid, hits)
        else:
            assert hit >= first_turn_tokens[cid] / 2, (cid, k, hits)  # cached in whole blocks
    assert sent[0].messages == sent[3].messages and hits[1] > 0 == hits[3]
    # servingctl reports the same counters in results.json, and no salt failure for reused prefixes
    server = scenario.summary.server
    assert server.prefix_cache_hits_delta == moved["hits"] == sum(hits) > 0
    assert server.prefix_cache_queries_delta == moved["queries"]
    assert server.prefix_cache_ok is None and not server.failures


# `vllm bench serve ARG...` through its module: the venv's vllm carries no package metadata, which the
# `vllm` console entry point reads for --version.
VLLM_BENCH_SERVE = (
    "import sys; from vllm.benchmarks import serve; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(); serve.add_cli_args(p); serve.main(p.parse_args(sys.argv[1:]))"
)


def run_vllm_bench(server: ModelServerProcess, dataset: Path, out: Path, prompts: int) -> dict:
    """`vllm bench serve` on the same file: chat backend, no shuffle, the reference lengths as outputs,
    one request at a time (its server counters moved by exactly these requests: servingctl then runs
    with --warmup 0)."""
    cmd = [
        str(vllm_python()),
        "-c",
        VLLM_BENCH_SERVE,
        "--backend",
        "openai-chat",
        "--base-url",
        server.url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        str(tiny_model_dir()),
        "--served-model-name",
        server.model,
        "--tokenizer",
        str(tiny_model_dir()),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--disable-shuffle",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        "1",
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,e2el",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out),
        "--result-filename",
        "vllm.json",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "vllm.json").read_text())


def close(ours: float, theirs: float) -> bool:
    share, ms = SIDE_BY_SIDE_TOLERANCE
    return abs(ours - theirs) <= max(share * theirs, ms)


def test_side_by_side_with_vllm_bench_serve_on_the_same_sharegpt_file(vllm_server, tmp_path, capsys):
    prompts = 16
    dataset = sharegpt(tmp_path / "sharegpt.json", prompts)
    url = vllm_server.url

    before = counters(url)
    theirs = run_vllm_bench(vllm_server, dataset, tmp_path, prompts)
    assert theirs["completed"] == prompts and theirs["failed"] == 0
    vllm_moved = settled(url, before, sum(theirs["output_lens"]))
    vllm_delta = {k: vllm_moved[k] - before[k] for k in ("prompt", "generation")}  # it sends no cache salt

    before = counters(url)
    code = run_servingctl(vllm_server, dataset, tmp_path / "ours", "--warmup", "0", "--dataset-output-tokens", "dataset")
    assert code == 0, capsys.readouterr()
    run = read_results(tmp_path / "ours")
    scenario = run.scenarios[0]
    measured = sorted((r for r in scenario.records if not r.warmup), key=lambda r: r.index)
    ours_moved = settled(url, before, sum(r.completion_tokens or 0 for r in scenario.records))
    ours_delta = {k: ours_moved[k] - before[k] for k in ("prompt", "generation")}

    # the same requests: both tools moved the server's prompt and generation counters alike, and
    # each request's output tokens match in order
    assert ours_delta == vllm_delta, (ours_delta, vllm_delta, [r.completion_tokens for r in measured], theirs["output_lens"])
    assert [r.completion_tokens for r in measured] == theirs["output_lens"]
    # vLLM's input_lens count the prompt without the chat template; the server's usage with it: one
    # constant apart (the template), request by request
    assert len({r.prompt_tokens - n for r, n in zip(measured, theirs["input_lens"], strict=True)}) == 1

    figures = {
        "ttft_ms": (scenario.summary.ttfc_ms.median, theirs["median_ttft_ms"]),
        "e2e_ms": (scenario.summary.e2e_ms.median, theirs["median_e2el_ms"]),
    }
    print(f"\nside by side, {prompts} ShareGPT prompts at concurrency 1 (servingctl, vllm bench serve):")
    for name, (ours, vllm) in figures.items():
        print(f"  median {name}: {ours:.2f} / {vllm:.2f}")
    print(f"  server counters moved: {ours_delta} / {vllm_delta}")
    for name, (ours, vllm) in figures.items():
        assert ours is not None and close(ours, vllm), (name, ours, vllm, SIDE_BY_SIDE_TOLERANCE)
    assert statistics.median(r.completion_tokens or 0 for r in measured) == statistics.median(theirs["output_lens"])
