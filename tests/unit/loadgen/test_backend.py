"""One streamed request -> RequestRecord, against httpx.MockTransport with a fake ns clock."""

import asyncio
import itertools
import json

import httpx

from servingctl.loadgen import backend
from servingctl.loadgen.backend import (
    PARSE_BATCH,
    PARSE_WAVE_READS,
    Backend,
    ChatRequest,
    Connection,
    _StreamState,
    base_url,
    parse_batch,
)

MS = 1_000_000


def chunk(content=None, *, role=None, usage=None, finish=None, reasoning=None) -> bytes:
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    doc = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        doc["usage"] = {"prompt_tokens": 254, "completion_tokens": usage, "total_tokens": 254 + usage}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


USAGE_ONLY = b'data: {"choices": [], "usage": {"prompt_tokens": 254, "completion_tokens": 4}}\n\n'
DONE = b"data: [DONE]\n\n"


def run(reads, *, status=200, raise_exc=None, api_key="sk-test", headers=None):
    """Stream `reads` (one byte string per network read) and return (record, captured request)."""
    seen = {}

    async def body():
        for read in reads:
            yield read
        if raise_exc is not None:
            raise raise_exc

    def handler(request: httpx.Request) -> httpx.Response:
        seen["request"] = request
        return httpx.Response(status, content=body())

    clock = itertools.count(MS, MS).__next__  # every clock read advances 1 ms

    async def go():
        connection = Connection("http://server/v1", api_key=api_key, headers=headers or {}, timeout_s=5)
        async with Backend(connection, "m", max_connections=1, clock=clock, transport=httpx.MockTransport(handler)) as backend:
            req = ChatRequest(scenario="in256-c1", round=0, index=3, warmup=False, prompt="hello", cache_salt="run-3")
            return await backend.stream_chat(req, max_tokens=4, seed=42, t0=0)

    return asyncio.run(go()), seen.get("request")


def test_exact_counts_from_continuous_usage_and_ttft_skips_the_role_chunk():
    reads = [
        chunk("", role="assistant", usage=0),
        chunk("Hel", usage=1),
        chunk("lo w", usage=3) + chunk("", usage=4, finish="length"),
        USAGE_ONLY + DONE,
    ]
    record, _request = run(reads)
    assert record.ok and record.error_kind is None
    # clock reads: send 1 ms, reads at 2, 3, 4, 5 ms, close 6 ms, end 7 ms
    assert record.t_start_ns == 1 * MS
    assert record.t_first_chunk_ns == 2 * MS  # TTFC as vLLM counts it: the role chunk
    assert record.t_first_ns == 3 * MS  # "Hel", not the role chunk at 2 ms
    assert record.t_first_answer_ns == 3 * MS  # no reasoning: the first answer token is the first token
    assert record.chunks == [(3 * MS, 1), (4 * MS, 2), (4 * MS, 1)]
    assert record.t_last_ns == 4 * MS
    assert record.t_end_ns == 5 * MS  # [DONE] arrival
    assert (record.prompt_tokens, record.completion_tokens, record.finish_reason) == (254, 4, "length")
    assert record.token_counts_exact
    assert sum(t for _, t in record.chunks) == record.completion_tokens


def test_reasoning_tokens_count_for_ttft_and_the_first_answer_token_for_ttfot():
    reads = [
        chunk("", role="assistant", usage=0),
        chunk(reasoning="Let", usage=1),
        chunk(reasoning=" me", usage=2),
        chunk("Yes", usage=3),
        chunk("!", usage=4, finish="length"),
        USAGE_ONLY + DONE,
    ]
    record, _ = run(reads)
    # clock reads: send 1 ms, reads at 2 (role), 3, 4 (reasoning), 5, 6 (answer) ms
    assert (record.t_first_chunk_ns, record.t_first_ns, record.t_first_answer_ns) == (2 * MS, 3 * MS, 5 * MS)
    assert sum(t for _, t in record.chunks) == record.completion_tokens == 4


def test_request_body_and_headers():
    _, request = run([chunk("a", usage=1, finish="length"), DONE], headers={"X-LLM-Profile": "ds"})
    body = json.loads(request.content)
    assert str(request.url) == "http://server/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["x-llm-profile"] == "ds"
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert (body["max_tokens"], body["ignore_eos"], body["temperature"], body["seed"], body["stream"]) == (4, True, 0, 42, True)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["cache_salt"] == "run-3"


def test_without_continuous_usage_each_content_chunk_counts_one_and_is_flagged():
    reads = [chunk("", role="assistant"), chunk(reasoning="think"), chunk("a"), chunk("b", finish="length"), USAGE_ONLY, DONE]
    record, _ = run(reads)
    assert record.ok
    assert record.t_first_ns == 3 * MS  # reasoning content counts as the first token
    assert [t for _, t in record.chunks] == [1, 1, 1]
    assert not record.token_counts_exact
    assert record.completion_tokens == 4  # the final usage chunk still gives the true total


def test_http_error_status_is_recorded_with_its_body():
    record, _ = run([b'{"error": "overloaded"}'], status=503)
    assert not record.ok
    assert (record.error_kind, record.http_status) == ("http_status", 503)
    assert "overloaded" in record.error


def test_stream_without_done_is_a_cut_stream_keeping_partial_timing():
    record, _ = run([chunk("a", usage=1), chunk("b", usage=2)])
    assert (record.ok, record.error_kind) == (False, "stream_cut")
    assert "[DONE]" in record.error and "finish_reason" in record.error
    assert record.completion_tokens == 2 and len(record.chunks) == 2


def test_connection_dropped_mid_stream_is_a_cut_stream():
    record, _ = run([chunk("a", usage=1)], raise_exc=httpx.RemoteProtocolError("peer closed connection"))
    assert record.error_kind == "stream_cut"


def test_a_stream_cut_after_many_reads_keeps_every_chunk_it_had_read():
    reads = [chunk("", role="assistant", usage=0)] + [chunk("x", usage=i) for i in range(1, 101)]
    record, _ = run(reads, raise_exc=httpx.RemoteProtocolError("peer closed connection"))
    assert record.error_kind == "stream_cut"
    assert record.completion_tokens == 100 and [tokens for _, tokens in record.chunks] == [1] * 100


def test_reads_past_the_first_token_are_parsed_when_a_batch_is_full_and_not_one_read_before():
    state = _StreamState(t0=0)
    state.feed(chunk("a", usage=1), 1)  # the first token: parsed at once (TTFT, and the kernel stamps stop)
    assert state.chunks == [(1, 1)]
    for i in range(2, PARSE_BATCH + 1):  # PARSE_BATCH - 1 reads kept
        state.feed(chunk("b", usage=i), i)
    assert state.chunks == [(1, 1)]
    state.feed(chunk("c", usage=PARSE_BATCH + 1), PARSE_BATCH + 1)  # the batch is full: all parsed
    assert state.chunks == [(t, 1) for t in range(1, PARSE_BATCH + 2)]


def test_streams_paced_alike_parse_at_most_a_wave_of_reads_at_once():
    # full batches while the wave stays within PARSE_WAVE_READS, smaller past it, never below one read
    at = PARSE_WAVE_READS // PARSE_BATCH
    assert parse_batch(1) == parse_batch(at) == PARSE_BATCH
    assert parse_batch(at + 1) == PARSE_WAVE_READS // (at + 1) < PARSE_BATCH
    assert parse_batch(257) * 257 <= PARSE_WAVE_READS  # 256 streams and the /metrics connection
    assert parse_batch(PARSE_WAVE_READS) == 1 and parse_batch(PARSE_WAVE_READS + 1) == 1


def test_batched_parsing_gives_the_record_parsing_each_read_at_once_gives(monkeypatch):
    reads = [chunk("", role="assistant", usage=0)] + [chunk("x", usage=i) for i in range(1, 150)]
    reads[-1] += chunk("", usage=149, finish="length") + DONE
    batched, _ = run(reads)
    monkeypatch.setattr(backend, "PARSE_BATCH", 1)
    at_once, _ = run(reads)
    assert batched.ok and batched.completion_tokens == 149
    assert batched == at_once


def test_malformed_lines_fail_the_request_and_are_counted():
    reads = [chunk("a", usage=1), b"data: {not json\n\n", b"garbage line\n", chunk("b", usage=2, finish="length"), DONE]
    record, _ = run(reads)
    assert (record.ok, record.error_kind, record.malformed_lines) == (False, "malformed_sse", 2)
    assert record.completion_tokens == 2


def test_error_event_in_stream():
    record, _ = run([chunk("a", usage=1), b'data: {"error": {"message": "engine dead"}}\n\n', DONE])
    assert record.error_kind == "server_error" and "engine dead" in record.error


def test_timeout_and_connect_errors_are_kinds_not_exceptions():
    record, _ = run([chunk("a", usage=1)], raise_exc=httpx.ReadTimeout("timed out"))
    assert record.error_kind == "timeout"

    def refuse(request):
        raise httpx.ConnectError("connection refused")

    async def go():
        async with Backend(Connection("http://server"), "m", max_connections=1, transport=httpx.MockTransport(refuse)) as backend:
            return await backend.stream_chat(ChatRequest("s", 0, 0, False, "p"), max_tokens=4, seed=1, t0=0)

    record = asyncio.run(go())
    assert (record.ok, record.error_kind) == (False, "connect")


def test_base_url_strips_v1():
    assert base_url("https://api.example.com/inference/v1/") == "https://api.example.com/inference"
    assert base_url("http://alb.internal") == "http://alb.internal"
