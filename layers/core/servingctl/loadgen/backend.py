"""HTTP side of the benchmark: one httpx.AsyncClient per scenario load, streaming chat completions
timed with a monotonic ns clock, plus the small GETs/POSTs the engine needs (/version, /v1/models,
/tokenize, /metrics).

A streamed request becomes one RequestRecord. Per-chunk token counts are exact when the server
sends cumulative usage in every chunk (`stream_options.continuous_usage_stats`, vLLM); otherwise
each content chunk counts as one token and the record says the counts are approximate.

Plain http:// endpoints go through `StreamTransport` (bench/transport.py): every network read is
stamped on arrival and parsed right there, all its events in one pass. https and proxies keep
httpx's own transport, read with aiter_raw and stamped when the read reaches the coroutine.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import orjson

from servingctl.loadgen.sse import SSEParser
from servingctl.loadgen.transport import StreamTransport
from servingctl.schema.results import Api, ErrorKind, RequestRecord

Clock = Callable[[], int]
COMPLETION_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
MAX_ERROR_CHARS = 300
PARSE_BATCH = 64  # reads kept before a stream past its first token is parsed (see _StreamState)
# Streams paced alike fill their batches together: at most this many reads parsed in one go over
# all streams (about 2.5 ms at 2.5 us a read), so the reads that arrive meanwhile are not held up
# longer (64 a stream at 256 paced streams held first tokens 20-45 ms, past the next token).
PARSE_WAVE_READS = 1024


def parse_batch(streams: int) -> int:
    """Reads a stream keeps before parsing them, when `streams` stream at once (1 to PARSE_BATCH)."""
    return max(1, min(PARSE_BATCH, PARSE_WAVE_READS // max(1, streams)))


def base_url(endpoint: str) -> str:
    """The server root: an endpoint given as .../v1 is accepted and stripped."""
    url = endpoint.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass(frozen=True)
class Connection:
    """Where and how to reach the server; the only place the API key and real header values live."""

    endpoint: str
    api_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0

    def request_headers(self) -> dict[str, str]:
        """Headers sent with every request: no compression (SSE timing), extra headers, Bearer auth."""
        headers = {"Accept-Encoding": "identity", **self.headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


@dataclass(frozen=True)
class ChatRequest:
    """What one benchmark request sends and where its record belongs."""

    scenario: str
    round: int
    index: int
    warmup: bool
    prompt: str
    cache_salt: str | None = None
    messages: list[dict[str, str]] | None = None  # a dataset's messages, sent instead of `prompt` as one user message


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: str | None = None  # /v1/completions
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    """The fields of a chat completion chunk the metrics read; msgspec skips the rest unparsed."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: msgspec.Raw = msgspec.Raw()  # kept raw: only its text is reported


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class _StreamState:
    """Accumulates one SSE stream: chunk timing, cumulative usage, finish reason, [DONE]. Token
    chunks are kept relative to the scenario's t0 as they come (no copy of hundreds per record).

    Reads are parsed as they arrive until the first token (the transport reads with kernel stamps
    until then); after it they are kept with their arrival stamps and parsed `batch` at a time
    and at the end. The times are the same either way; a paced stream's read wakes an idle process,
    and parsing it right then ran cold: 25-130 us of CPU a read in a paced loopback test on a 2-core
    VM, against 2.5 us for the same parse warm."""

    __slots__ = (
        "batch",
        "chunks",
        "completion_tokens",
        "cumulative",
        "done",
        "exact",
        "finish_reason",
        "malformed",
        "parser",
        "pending",
        "prompt_tokens",
        "server_error",
        "status",
        "t0",
        "t_done",
        "t_first_answer",
        "t_first_chunk",
        "t_sent",
        "text",
    )

    def __init__(self, t0: int, batch: int = PARSE_BATCH, text: list[str] | None = None) -> None:
        self.t0 = t0
        self.text = text  # the answer's pieces, kept only when asked (a conversation's history)
        self.batch = batch
        self.pending: list[tuple[bytes, int]] = []  # reads past the first token, not parsed yet
        self.parser = SSEParser()
        self.status: int | None = None
        self.t_sent: int | None = None  # clock when the request bytes were written (raw path)
        self.chunks: list[tuple[int, int]] = []  # (arrival - t0, tokens)
        self.t_first_chunk: int | None = None
        self.t_first_answer: int | None = None
        self.t_done: int | None = None
        self.cumulative = 0
        self.exact = True
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.malformed = 0
        self.server_error: str | None = None

    def feed(self, block: bytes, t: int) -> None:
        """One network read that arrived at t: parsed now until the first token, then in batches."""
        if self.chunks:
            pending = self.pending
            pending.append((block, t))
            if len(pending) >= self.batch:
                self.flush()
            return
        self._parse(block, t)

    def flush(self) -> None:
        """Parse the reads kept so far (before the record is read, whatever ended the stream)."""
        pending, self.pending = self.pending, []
        for block, t in pending:
            self._parse(block, t)

    def _parse(self, block: bytes, t: int) -> None:
        on_data = self.on_data
        for data in self.parser.feed_data(block):
            on_data(data, t)

    def close(self, t: int) -> None:
        """End of the body at t: a last unterminated event, and the malformed line count."""
        self.flush()
        for data in self.parser.close_data():
            self.on_data(data, t)
        self.malformed += self.parser.malformed_lines

    def on_data(self, data: bytes, t: int) -> None:
        """One event's data, arrived at t (the hot path: one call per streamed chunk)."""
        if data == b"[DONE]":
            self.done = True
            self.t_done = t
            return
        try:
            chunk = _decode_chunk(data)
        except (msgspec.DecodeError, msgspec.ValidationError):  # not JSON, or not a chunk's shape
            self.malformed += 1
            return
        choices = chunk.choices
        if not choices and chunk.error:
            self.server_error = bytes(chunk.error).decode("utf-8", "replace")[:MAX_ERROR_CHARS]
            return
        usage = chunk.usage
        completion = None
        if usage is not None:
            if usage.prompt_tokens is not None:
                self.prompt_tokens = usage.prompt_tokens
            completion = usage.completion_tokens
            if completion is not None:
                self.completion_tokens = completion
        if not choices:
            return  # the final usage-only chunk
        choice = choices[0]
        if self.t_first_chunk is None:
            self.t_first_chunk = t
        if choice.finish_reason:
            self.finish_reason = choice.finish_reason
        delta = choice.delta
        content = delta.content if delta is not None else choice.text  # chat, or /v1/completions
        if self.t_first_answer is None and content:
            self.t_first_answer = t  # the answer starts (after any reasoning)
        if self.text is not None and content:
            self.text.append(content)
        if completion is not None:
            tokens = completion - self.cumulative
            self.cumulative = completion
        else:
            tokens = 1 if content or (delta is not None and (delta.reasoning_content or delta.reasoning)) else 0
            self.exact = self.exact and not tokens
        if tokens > 0:
            self.chunks.append((t - self.t0, tokens))

    def record(self, t_end: int) -> dict[str, Any]:
        completion = self.completion_tokens
        if completion is None and self.chunks:
            completion = sum(tokens for _, tokens in self.chunks)
        chunks, t0 = self.chunks, self.t0
        return {
            "t_first_chunk_ns": self.t_first_chunk - t0 if self.t_first_chunk is not None else None,
            "t_first_ns": chunks[0][0] if chunks else None,
            "t_first_answer_ns": self.t_first_answer - t0 if self.t_first_answer is not None else None,
            "t_last_ns": chunks[-1][0] if chunks else None,
            "t_end_ns": (self.t_done if self.t_done is not None else t_end) - t0,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "finish_reason": self.finish_reason,
            "chunks": chunks,
            "token_counts_exact": self.exact and bool(self.chunks),
            "malformed_lines": self.malformed,
        }

    def failure(self) -> tuple[ErrorKind, str] | None:
        if self.server_error is not None:
            return "server_error", f"error event in stream: {self.server_error}"
        if self.malformed:
            return "malformed_sse", f"{self.malformed} malformed SSE line(s)"
        if not self.done or self.finish_reason is None:
            missing = [name for name, seen in (("[DONE]", self.done), ("finish_reason", self.finish_reason)) if not seen]
            return "stream_cut", f"stream ended without {' and '.join(missing)}"
        return None


def _request_head(method: str, url: httpx.URL, headers: dict[str, str]) -> bytes:
    """An HTTP/1.1 request head without its closing blank line, encoded once."""
    lines = [
        f"{method} {url.raw_path.decode()} HTTP/1.1",
        f"Host: {url.netloc.decode()}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return "\r\n".join(lines).encode()


class Backend:
    """An OpenAI-compatible server reached through one keep-alive connection pool."""

    def __init__(
        self,
        connection: Connection,
        model: str,
        *,
        max_connections: int,
        clock: Clock = time.monotonic_ns,
        transport: httpx.AsyncBaseTransport | None = None,
        api: Api = "chat",
    ) -> None:
        self.connection = connection
        self.model = model
        self.api = api
        self.clock = clock
        self._parse_batch = parse_batch(max_connections)
        if transport is None and httpx.URL(connection.endpoint).scheme == "http":
            transport = StreamTransport(max_connections=max_connections, clock=clock)
        self._chat_url = httpx.URL(base_url(connection.endpoint) + COMPLETION_PATHS[api])  # merged once
        self._stream = transport if isinstance(transport, StreamTransport) else None
        self._address = (self._chat_url.host, self._chat_url.port or 80)
        # Ends with "Content-Length: ": each request appends its length and body.
        self._chat_head = _request_head("POST", self._chat_url, connection.request_headers()) + (
            b"\r\nContent-Type: application/json\r\nContent-Length: "
        )
        self._get_requests: dict[str, bytes] = {}
        self._client = httpx.AsyncClient(
            base_url=base_url(connection.endpoint),
            headers=connection.request_headers(),
            timeout=httpx.Timeout(connection.timeout_s, connect=min(connection.timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )

    async def warm(self, connections: int) -> None:
        """Open the connections a load will use before its clock starts (no-op through plain httpx)."""
        if self._stream is not None:
            # On failure the requests fail with their own connect error, each recorded.
            with contextlib.suppress(httpx.HTTPError):
                await self._stream.warm(*self._address, connections, min(self.connection.timeout_s, 30.0))

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    def chat_body(
        self,
        prompt: str,
        max_tokens: int,
        seed: int,
        cache_salt: str | None,
        stream: bool = True,
        messages: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """The request body: greedy, fixed length (ignore_eos), usage in every chunk; `messages`
        replaces the one user message of `prompt`."""
        body: dict[str, Any] = {"model": self.model}
        if self.api == "completions":  # one prompt, no chat template (a dataset's one message's content)
            body["prompt"] = messages[-1]["content"] if messages else prompt
        else:
            body["messages"] = messages if messages is not None else [{"role": "user", "content": prompt}]
        body |= {
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "seed": seed,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if cache_salt is not None:
            body["cache_salt"] = cache_salt
        return body

    async def stream_chat(
        self, request: ChatRequest, *, max_tokens: int, seed: int, t0: int, text: list[str] | None = None
    ) -> RequestRecord:
        """Send one streaming chat completion and time it; never raises for server or network faults.
        `text` receives the answer's content pieces (a conversation carries them to its next turn)."""
        body = self.chat_body(request.prompt, max_tokens, seed, request.cache_salt, messages=request.messages)
        state = _StreamState(t0, self._parse_batch, text)
        failure: tuple[ErrorKind, str] | None = None
        t_start = self.clock()
        try:
            content = orjson.dumps(body)
            exchange = self._exchange if self._stream is not None else self._via_httpx
            failure = await exchange(content, state)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            failure = ("connect", f"{type(exc).__name__}: {exc}")
        except httpx.TimeoutException as exc:
            failure = ("timeout", f"{type(exc).__name__} after {self.connection.timeout_s:g} s: {exc}")
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            failure = ("stream_cut", f"{type(exc).__name__}: {exc}")
        except httpx.HTTPError as exc:
            failure = ("other", f"{type(exc).__name__}: {exc}")
        t_end = self.clock()
        state.flush()  # a cut or timed-out stream keeps the chunks it had
        if failure is None:
            failure = state.failure()
        return RequestRecord(
            scenario=request.scenario,
            round=request.round,
            index=request.index,
            warmup=request.warmup,
            ok=failure is None,
            error_kind=failure[0] if failure else None,
            error=failure[1][:MAX_ERROR_CHARS] if failure else None,
            http_status=state.status,
            t_start_ns=(state.t_sent if state.t_sent is not None else t_start) - t0,
            **state.record(t_end),
        )

    async def _via_httpx(self, content: bytes, state: _StreamState) -> tuple[ErrorKind, str] | None:
        """https, proxies or an injected transport: httpx's request path, reads stamped as they come.
        Returns the failure or None; raises httpx's errors."""
        headers = {"Content-Type": "application/json"}
        async with self._client.stream("POST", self._chat_url, content=content, headers=headers) as response:
            state.status = response.status_code
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                return "http_status", f"HTTP {response.status_code}: {text[:MAX_ERROR_CHARS]}"
            # Raw reads: the body is requested uncompressed, so no decoder pass per chunk.
            async for raw in response.aiter_raw():
                state.feed(raw, self.clock())
            state.close(self.clock())
            return None

    async def _exchange(self, content: bytes, state: _StreamState) -> tuple[ErrorKind, str] | None:
        """The plain-http streaming path: pre-encoded bytes on a warm connection, every read parsed
        where it arrives. Returns the failure or None; raises httpx's errors."""
        assert self._stream is not None
        timeout = self.connection.timeout_s
        request = b"%s%d\r\n\r\n%s" % (self._chat_head, len(content), content)
        state.t_sent, state.status, timed = await self._stream.exchange(
            *self._address, request, connect_timeout=min(timeout, 30.0), read_timeout=timeout
        )
        try:
            if state.status != 200:
                text = b"".join([block async for block in timed]).decode("utf-8", "replace")
                return "http_status", f"HTTP {state.status}: {text[:MAX_ERROR_CHARS]}"
            timed.deliver(state.feed, stamped_until=lambda: bool(state.chunks))  # TTFT: the first token
            await timed.finished()
            state.close(self.clock())
            return None
        finally:
            await timed.aclose()

    async def get_json(self, path: str) -> dict[str, Any] | None:
        """GET a JSON object; None when the server does not answer it with 200 and a JSON object."""
        try:
            response = await self._client.get(path)
            document = response.json() if response.status_code == 200 else None
            return document if isinstance(document, dict) else None
        except (httpx.HTTPError, ValueError):
            return None

    async def get_text(self, path: str) -> tuple[int | None, str]:
        """GET a text document: (status, body); status None on a network error (body says which)."""
        try:
            if self._stream is not None:
                return await self._get_raw(path)
            response = await self._client.get(path)
            return response.status_code, response.text
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"

    async def _get_raw(self, path: str) -> tuple[int, str]:
        """GET on the plain-http path with request bytes encoded once per path: the /metrics scrapes
        of a long scenario cost no httpx request building (about 0.5 ms of CPU each); raises httpx's errors."""
        assert self._stream is not None
        request = self._get_requests.get(path)
        if request is None:
            url = httpx.URL(base_url(self.connection.endpoint) + path)
            request = self._get_requests[path] = _request_head("GET", url, self.connection.request_headers()) + b"\r\n\r\n"
        timeout = self.connection.timeout_s
        _, status, timed = await self._stream.exchange(
            *self._address, request, connect_timeout=min(timeout, 30.0), read_timeout=timeout
        )
        try:
            body = b"".join([block async for block in timed])
        finally:
            await timed.aclose()
        return status, body.decode("utf-8", "replace")

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int | None, Any]:
        """POST JSON: (status, parsed body or text); status None on a network error."""
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text
