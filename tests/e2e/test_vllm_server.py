"""What a user checks on the real vLLM serving the tiny local model: the endpoints the benchmark
engine relies on (health, models, /tokenize, streaming usage, cache_salt, speculative chunks)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from servingctl.loadgen.sse import SSEParser
from servingctl_twin.modelserver import ModelServerProcess

pytestmark = pytest.mark.e2e

SENTENCE = "This is deterministic benchmark input text. "


def _messages(repeats: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a benchmark target."},
        {"role": "user", "content": SENTENCE * repeats},
    ]


def _stream_chat(server: ModelServerProcess, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming chat request and return the decoded JSON chunks (without [DONE])."""
    payload = {
        "model": server.model,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "temperature": 0,
        **body,
    }
    parser = SSEParser()
    events = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=payload, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        for raw in resp.iter_raw():
            events += parser.feed(raw)
    events += parser.close()
    assert parser.malformed_lines == 0
    assert events[-1].data == "[DONE]"
    return [json.loads(event.data) for event in events[:-1]]


def _counter(server: ModelServerProcess, name: str) -> float:
    """Sum of a Prometheus counter's samples (all label sets) from the server's /metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
    samples = pattern.findall(text)
    assert samples, f"{name} not in /metrics"
    return sum(float(value) for value in samples)


def _chat(server: ModelServerProcess, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": server.model, "temperature": 0, "max_tokens": 2, **body},
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_health_and_models_list_the_served_name(vllm_server: ModelServerProcess) -> None:
    assert httpx.get(f"{vllm_server.url}/health", timeout=10).status_code == 200
    models = httpx.get(f"{vllm_server.url}/v1/models", timeout=10).json()
    assert [model["id"] for model in models["data"]] == ["tiny-llama"]


def test_tokenize_count_equals_chat_prompt_tokens(vllm_server: ModelServerProcess) -> None:
    messages = _messages(repeats=7)
    tokenized = httpx.post(
        f"{vllm_server.url}/tokenize",
        json={"model": vllm_server.model, "messages": messages, "add_generation_prompt": True},
        timeout=30,
    ).json()
    plain = httpx.post(
        f"{vllm_server.url}/tokenize",
        json={"model": vllm_server.model, "prompt": SENTENCE * 7},
        timeout=30,
    ).json()
    # The chat template adds role markers around the content, so the templated count is larger.
    assert tokenized["count"] > plain["count"] > 7

    usage = _chat(vllm_server, {"messages": messages})["usage"]

    assert usage["prompt_tokens"] == tokenized["count"]


def test_stream_with_ignore_eos_returns_exactly_max_tokens(vllm_server: ModelServerProcess) -> None:
    chunks = _stream_chat(vllm_server, {"messages": _messages(3), "max_tokens": 40, "ignore_eos": True})

    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 40
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == ["length"]
    # continuous_usage_stats: cumulative usage on every chunk, never decreasing, ending at max_tokens.
    running = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    assert len(running) == len(chunks) - 1
    assert running == sorted(running) and running[-1] == 40


def test_cache_salt_isolates_the_prefix_cache(vllm_server: ModelServerProcess) -> None:
    hits = "vllm:prefix_cache_hits_total"

    def hits_gained(**extra: Any) -> float:
        before = _counter(vllm_server, hits)
        _chat(vllm_server, extra)
        return _counter(vllm_server, hits) - before

    unsalted = _messages(repeats=60)  # several hundred tokens: many full cache blocks
    hits_gained(messages=unsalted)
    assert hits_gained(messages=unsalted) > 0

    salted = _messages(repeats=61)
    assert hits_gained(messages=salted, cache_salt="salt-a") == 0
    assert hits_gained(messages=salted, cache_salt="salt-b") == 0
    # The same salt again does hit: the zeros above come from the salts, not from a cold cache.
    assert hits_gained(messages=salted, cache_salt="salt-a") > 0


def test_speculative_decoding_chunks_carry_several_tokens(vllm_spec_server: ModelServerProcess) -> None:
    accepted_before = _counter(vllm_spec_server, "vllm:spec_decode_num_accepted_tokens_total")
    chunks = _stream_chat(vllm_spec_server, {"messages": _messages(3), "max_tokens": 48, "ignore_eos": True})

    running = [c["usage"]["completion_tokens"] for c in chunks if c["choices"]]
    per_chunk = [b - a for a, b in zip([0, *running], running, strict=False) if b > a]
    assert sum(per_chunk) == chunks[-1]["usage"]["completion_tokens"] == 48
    # Without speculation a chunk carries one token (two when a token decodes to no text); with a
    # draft that agrees with the target, steps yield up to 1 + 3 tokens each.
    assert sum(per_chunk) / len(per_chunk) > 2
    assert _counter(vllm_spec_server, "vllm:spec_decode_num_accepted_tokens_total") > accepted_before
