"""The simulator's HTTP surface: a lean ASGI app with vLLM's OpenAI-compatible routes.

A plain ASGI callable rather than a framework: per chunk the hot path is one string build and one
``send``, which keeps the server out of the way of client benchmarks at hundreds of streams.
Requests and errors follow vLLM's shapes (``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import servingctl
from servingctl_twin.simserver import metrics, tokenizer
from servingctl_twin.simserver.config import SimConfig
from servingctl_twin.simserver.runtime import Engine
from servingctl_twin.simserver.scheduler import Seq

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SIMULATOR_VERSION = f"servingctl-simulator {servingctl.__version__}"
# --debug-timings keeps this many finished streams (oldest dropped first).
DEBUG_TIMINGS_KEPT = 100_000
ARRIVAL_NS = "servingctl.arrival_ns"  # scope extension: monotonic ns when the request's first read arrived


class StreamCut(Exception):
    """Raised inside a stream to make the server drop the connection (the stream-cut fault)."""


class ApiError(Exception):
    """An error answered as OpenAI-style JSON."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        """Keep the HTTP status, message and offending field."""
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        """vLLM's error document."""
        kind = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}.get(self.status, "Error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(_Strict):
    role: tokenizer.Role
    content: str | list[TextPart]

    def text(self) -> str:
        """Content as one string (text parts joined)."""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class StreamOptions(_Strict):
    include_usage: bool = True  # vLLM's default once stream_options is given
    continuous_usage_stats: bool = False


class ChatRequest(_Strict):
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    ignore_eos: bool = False
    temperature: float | None = Field(default=None, ge=0, le=2)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = Field(default=None, min_length=1)


class TokenizeRequest(_Strict):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = True


def _validation_error(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "body"
    return ApiError(400, f"{field}: {first['msg']}", field)


class SimServer:
    """ASGI application: routes, request validation, streaming and fault injection."""

    def __init__(self, config: SimConfig) -> None:
        """Build the engine; it starts with the first request or the lifespan startup."""
        self.config = config
        self.engine = Engine(config)
        self.created = int(time.time())
        self._fault_rng = random.Random(config.faults.seed)
        self._request_counter = itertools.count()
        self._models_failures_left = config.faults.models_fail
        # With pace_ms the engine finishes a sequence long before its stream is written out; such a
        # stream is still a request the paced (GPU-like) server is generating, so /metrics counts it
        # as running, as vLLM would.
        self.pacing: set[Seq] = set()
        self._routes: dict[tuple[str, str], Callable[[Scope, Receive, Send], Awaitable[None]]] = {
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/tokenize"): self._tokenize,
            ("GET", "/health"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
        }
        # Ground truth for client benchmarks (monotonic ns is system-wide on Linux, so comparable
        # with a client's clock): when each stream arrived and when its first chunks left.
        self.timings: deque[dict[str, Any]] | None = None
        if config.debug_timings:
            self.timings = deque(maxlen=DEBUG_TIMINGS_KEPT)
            self._routes[("GET", "/debug/timings")] = self._debug_timings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        handler = self._routes.get((scope["method"], scope["path"]))
        if handler is None:
            known = any(path == scope["path"] for _, path in self._routes)
            status = 405 if known else 404
            await _json(send, status, ApiError(status, f"{scope['method']} {scope['path']} is not served").body())
            return
        try:
            await handler(scope, receive, send)
        except ApiError as err:
            await _json(send, err.status, err.body())

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ---- small routes ---------------------------------------------------------------------------
    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _json(send, 200, {"version": SIMULATOR_VERSION, "simulator": True})

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._models_failures_left > 0:
            self._models_failures_left -= 1
            raise ApiError(503, "injected fault: models-fail")
        model = self.config.model
        card = {
            "id": model,
            "object": "model",
            "created": self.created,
            "owned_by": "servingctl-simulator",
            "root": model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
        }
        await _json(send, 200, {"object": "list", "data": [card]})

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        still_streaming = sum(1 for seq in self.pacing if seq.finished)
        body = metrics.render(self.engine.scheduler, self.config.model, still_streaming=still_streaming).encode()
        headers = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.config.model:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")

    async def _tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            req = TokenizeRequest.model_validate(await _read_json(receive))
        except ValidationError as exc:
            raise _validation_error(exc) from None
        self._check_model(req.model)
        if (req.prompt is None) == (req.messages is None):
            raise ApiError(400, "give exactly one of prompt or messages", "prompt")
        if req.messages is not None:
            msgs = [{"role": m.role, "content": m.text()} for m in req.messages]
            tokens = tokenizer.apply_chat_template(msgs, req.add_generation_prompt)
        else:
            tokens = tokenizer.encode_prompt(req.prompt or "", req.add_special_tokens)
        await _json(
            send, 200, {"count": len(tokens), "max_model_len": self.config.max_model_len, "tokens": tokens, "token_strs": None}
        )

    async def _debug_timings(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _json(send, 200, {"clock": "CLOCK_MONOTONIC ns", "streams": list(self.timings or ())})

    # ---- chat -----------------------------------------------------------------------------------
    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The request's first bytes arrived then (server.py stamps them); the app's own clock otherwise.
        received_ns = ((scope.get("extensions") or {}).get(ARRIVAL_NS) or {}).get("ns") or time.monotonic_ns()
        try:
            req = ChatRequest.model_validate(await _read_json(receive))
        except ValidationError as exc:
            raise _validation_error(exc) from None
        self._check_model(req.model)
        if req.stream_options is not None and not req.stream:
            raise ApiError(400, "stream_options: only allowed when stream is true", "stream_options")
        faults = self.config.faults
        # One draw per fault per request, in a fixed order, so a seeded run is reproducible.
        rng = self._fault_rng
        error, cut, malformed = (
            rng.random() < faults.error_rate,
            rng.random() < faults.stream_cut,
            rng.random() < faults.malformed,
        )
        if error:
            raise ApiError(500, "injected fault: error-rate")
        msgs = [{"role": m.role, "content": m.text()} for m in req.messages]
        prompt = tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
        limit = self.config.max_model_len
        if len(prompt) >= limit:
            raise ApiError(400, f"messages: prompt has {len(prompt)} tokens, max_model_len is {limit}", "messages")
        field = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
        max_tokens = req.max_completion_tokens or req.max_tokens or limit - len(prompt)
        if len(prompt) + max_tokens > limit:
            raise ApiError(
                400,
                f"{field}: {max_tokens} + {len(prompt)} prompt tokens exceeds max_model_len {limit}",
                field,
            )
        number = next(self._request_counter)
        text_rng = random.Random(req.seed if req.seed is not None else number)
        target, reason = max_tokens, "length"
        if not req.ignore_eos:  # the simulated model may emit EOS first, deterministically per seed
            natural = text_rng.randint(1, 2 * max_tokens)
            if natural < max_tokens:
                target, reason = natural, "stop"
        hashes = self.engine.scheduler.prefix_cache.block_hashes(prompt, req.cache_salt)
        seq = self.engine.new_seq(len(prompt), target, reason, hashes, seed=text_rng.getrandbits(32))
        offset = text_rng.randrange(len(tokenizer.TOKEN_TEXTS))
        await asyncio.sleep(self.config.timing.frontend_ms / 1000 / self.config.speed)
        self.engine.submit(seq)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        if req.stream:
            opts = req.stream_options
            stream = _Stream(self, seq, request_id, offset, opts, cut, malformed)
            await stream.run(receive, send)
            if self.timings is not None:
                headers = dict(scope.get("headers") or [])
                self.timings.append(
                    {
                        "cache_salt": req.cache_salt,
                        "x_request_id": headers.get(b"x-request-id", b"").decode() or None,
                        "received_ns": received_ns,
                        "first_chunk_sent_ns": stream.first_chunk_ns,
                        "first_content_sent_ns": stream.first_content_ns,
                        "completion_tokens": seq.generated,
                    }
                )
        else:
            await self._complete(seq, request_id, offset, send)

    async def _complete(self, seq: Seq, request_id: str, offset: int, send: Send) -> None:
        try:
            while not seq.finished:
                await seq.sink.wait()
        except asyncio.CancelledError:
            self.engine.abort(seq)
            raise
        usage = {
            "prompt_tokens": seq.prompt_len,
            "total_tokens": seq.prompt_len + seq.generated,
            "completion_tokens": seq.generated,
            "prompt_tokens_details": None,
        }
        message = {"role": "assistant", "content": tokenizer.generated_text(offset, 0, seq.generated), "tool_calls": []}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": seq.finish_reason, "stop_reason": None}
        await _json(
            send,
            200,
            {
                "id": request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.config.model,
                "choices": [choice],
                "usage": usage,
            },
        )


class _Stream:
    """One SSE stream: a chunk per engine step that produced text, vLLM's chunk shapes."""

    def __init__(
        self, server: SimServer, seq: Seq, request_id: str, offset: int, opts: StreamOptions | None, cut: bool, malformed: bool
    ) -> None:
        self.server, self.seq, self.offset = server, seq, offset
        self.include_usage = bool(opts and opts.include_usage)
        self.continuous = bool(opts and opts.include_usage and opts.continuous_usage_stats)
        self.cut, self.malformed = cut, malformed
        self.stall = server.config.faults.stall_s
        pace_s = server.config.pace_ms / 1000
        step = server.config.pace_phase == "step"
        self.step_s = pace_s if step else 0.0  # writes wait for the engine's next step instant
        self.pace_s = 0.0 if step else pace_s  # writes wait pace_s after the stream's own last write
        self.last_step = 0  # the step instant (loop time / step_s) of the last write
        self.batch_writes = server.config.batch_writes
        self.head = (
            f'data: {{"id":"{request_id}","object":"chat.completion.chunk","created":{int(time.time())},'
            f'"model":{json.dumps(server.config.model)},"choices":'
        )
        self.disconnected = False
        # Monotonic ns just after the first body (role chunk) and the first content were written.
        self.first_chunk_ns: int | None = None
        self.first_content_ns: int | None = None

    def _usage(self, completion: int) -> str:
        p = self.seq.prompt_len
        return f'"usage":{{"prompt_tokens":{p},"total_tokens":{p + completion},"completion_tokens":{completion}}}'

    def _chunk(self, delta: str, finish: str | None, completion: int) -> bytes:
        finish_json = f'"{finish}","stop_reason":null' if finish else "null"
        tail = f",{self._usage(completion)}" if self.continuous else ""
        return (f'{self.head}[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish_json}}}]{tail}}}\n\n').encode()

    def _stamp(self, content: bool) -> None:
        """Note the write time of the first body and of the first body carrying content (called
        right after send: with --debug-timings the bytes go to the socket inside it, server._WriteNow)."""
        now = time.monotonic_ns()
        if self.first_chunk_ns is None:
            self.first_chunk_ns = now
        if content and self.first_content_ns is None:
            self.first_content_ns = now

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        self.server.engine.abort(self.seq)
        self.seq.sink.wake()

    async def run(self, receive: Receive, send: Send) -> None:
        """Stream until the sequence finishes, the client leaves or a fault strikes."""
        seq, sink = self.seq, self.seq.sink
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(self._watch(receive))
        if self.pace_s or self.step_s:
            self.server.pacing.add(seq)
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        half = max(1, seq.target_len // 2)
        sent = 0  # tokens whose text was streamed
        stalled = False
        try:
            while True:
                while not sink.events and not self.disconnected:
                    await sink.wait()
                if self.step_s:  # one step grid on the loop's clock: every stream due now writes together
                    now = loop.time()
                    # the next step instant, and never this write's step again (the loop may wake a timer
                    # a little before its instant: uvloop's clock counts whole ms)
                    step = self.last_step = max(math.floor(now / self.step_s) + 1, self.last_step + 1)
                    await asyncio.sleep(step * self.step_s - now)
                if self.disconnected:
                    return
                body, content = b"", False
                # One event per write, or with batch_writes every event pending since the last write.
                while sink.events:
                    new, finished = sink.events.popleft()
                    if sent == 0:
                        body += self._chunk('{"role":"assistant","content":""}', None, 0)
                    text = tokenizer.generated_text(self.offset, sent, new)
                    sent += new
                    if finished:
                        body += self._chunk('{"content":' + json.dumps(text) + "}", seq.finish_reason, sent)
                        if self.include_usage:
                            body += f"{self.head}[],{self._usage(sent)}}}\n\n".encode()
                        body += b"data: [DONE]\n\n"
                        await send({"type": "http.response.body", "body": body})
                        self._stamp(True)
                        return
                    if text:  # a step whose tokens decode to no text sends nothing (like vLLM)
                        body += self._chunk('{"content":' + json.dumps(text) + "}", None, sent)
                        content = True
                    if sent >= half:
                        if self.malformed:
                            self.malformed = False
                            body += f'{self.head}[{{"index":0,"delta":{{"content":"\n\n'.encode()
                        if self.cut:
                            if body:
                                await send({"type": "http.response.body", "body": body, "more_body": True})
                            self.server.engine.abort(seq)
                            raise StreamCut("injected fault: stream-cut")
                        if self.stall and not stalled:
                            break
                    if not self.batch_writes:
                        break
                if body:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    self._stamp(content)
                    if self.pace_s:  # one event per write, pace_s after this stream's last
                        await asyncio.sleep(self.pace_s)
                if self.stall and not stalled and sent >= half:
                    stalled = True
                    await asyncio.sleep(self.stall)
        except asyncio.CancelledError:
            self.server.engine.abort(seq)
            raise
        finally:
            watcher.cancel()
            self.server.pacing.discard(seq)


async def _read_json(receive: Receive) -> Any:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "body: client disconnected before sending it", "body")
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    try:
        return json.loads(b"".join(chunks) or b"null")
    except ValueError as exc:
        raise ApiError(400, f"body: not valid JSON ({exc})", "body") from None


async def _json(send: Send, status: int, doc: Any) -> None:
    body = json.dumps(doc).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app(config: SimConfig | None = None) -> SimServer:
    """The ASGI app of the simulator for ``config`` (defaults: the reference deployment)."""
    return SimServer(config or SimConfig())
