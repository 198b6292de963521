"""StreamTransport: HTTP/1.1 framing at every byte boundary, arrival stamps, keep-alive pool, errors
mapped to httpx's exceptions and to the engine's error kinds, timeouts; real loopback sockets."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servingctl.loadgen.backend import Backend, ChatRequest, Connection
from servingctl.loadgen.transport import StreamTransport, _Connection, timed_stream

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [b'data: {"a": 1}\n\n', b"data: [DONE]\n\n"]
CHUNKED = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\nx-trailer: 1\r\n\r\n"


class FakeSocket(asyncio.Transport):
    """What a connection writes, and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def feed_reads(reads: list[bytes]) -> tuple[list[tuple[bytes, int]], _Connection, FakeSocket]:
    """Feed a response to one connection read by read; return the (block, stamp) pairs its sink got."""
    got: list[tuple[bytes, int]] = []

    async def go():
        pool = StreamTransport(max_connections=1, clock=itertools.count(0).__next__)
        conn = _Connection(pool, ("h", 80), pool.clock)
        sock = FakeSocket()
        conn.connection_made(sock)
        assert conn.send(b"GET / HTTP/1.1\r\n\r\n", None, False) == 0  # stamped at the write: the clock's 0
        for read in reads:
            conn.data_received(read)
        assert conn.stream is not None
        conn.stream.deliver(lambda block, t: got.append((block, t)))
        return conn, sock

    conn, sock = asyncio.run(go())
    return got, conn, sock


@pytest.mark.parametrize("cut", range(1, len(HEAD + CHUNKED)))
def test_chunked_body_split_at_any_byte_is_decoded_and_ends_cleanly(cut):
    data = HEAD + CHUNKED
    got, conn, sock = feed_reads([data[:cut], data[cut:]])
    assert b"".join(block for block, _ in got) == b"".join(EVENTS)
    assert conn.stream.done and conn.alive and not sock.closed
    # each payload byte carries the stamp of the read that brought it (the clock gives 1, then 2)
    positions = [data.index(event) + k for event in EVENTS for k in range(len(event))]
    first_read = bytes(data[p] for p in positions if p < cut)
    assert b"".join(block for block, t in got if t == 1) == first_read
    assert b"".join(block for block, t in got if t == 2) == b"".join(EVENTS)[len(first_read) :]


FLOOD = [b'data: {"n": %d}\n\n' % i for i in range(5)]


@pytest.mark.parametrize(
    ("events", "last_chunk", "ends"),
    [
        (FLOOD, b"", False),  # whole chunks, more to come
        (FLOOD, b"0\r\n\r\n", True),  # and the last chunk
        ([], b"0\r\n\r\n", True),  # the last chunk alone
        ([b"data: a\r\n\r\n", *FLOOD], b"0\r\n\r\n", True),  # a CRLF inside a payload
        (FLOOD, b"0\r\nx-trailer: 1\r\n\r\n", True),  # trailers
        (FLOOD, b"00\r\n\r\n", True),  # a zero written as two
    ],
)
def test_a_read_of_many_whole_chunks_is_one_block_with_its_stamp(events, last_chunk, ends):
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + last_chunk
    got, conn, sock = feed_reads([HEAD, body])
    assert b"".join(block for block, _ in got) == b"".join(events) and all(t == 2 for _, t in got)
    assert conn.stream.done is ends and not sock.closed


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=4),
    ends=st.booleans(),
)
def test_any_chunks_read_in_any_pieces_decode_to_their_payloads(payloads, cuts, ends):
    # payloads with CR, LF and CRLF in them too: the whole-chunk shortcuts must hand those to the loop
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + (b"0\r\n\r\n" if ends else b"")
    bounds = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    reads = [HEAD] + [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    got, conn, sock = feed_reads(reads)
    assert b"".join(block for block, _ in got) == b"".join(payloads)
    assert conn.stream.done is ends and not sock.closed


def test_byte_by_byte_reads_keep_their_own_arrival_stamps():
    data = HEAD + CHUNKED
    got, conn, _ = feed_reads([data[i : i + 1] for i in range(len(data))])
    assert b"".join(block for block, _ in got) == b"".join(EVENTS)
    body_start = len(HEAD) + CHUNKED.index(b"\r\n") + 2  # first payload byte: read number body_start + 1
    assert got[0] == (EVENTS[0][:1], body_start + 1)
    assert [t for _, t in got] == sorted(t for _, t in got) and len({t for _, t in got}) == len(got)
    assert conn.stream.done


def test_a_response_head_arriving_after_its_waiter_was_cancelled_closes_the_connection():
    # Ctrl-C cancels the awaited head; the server's bytes may land in the same loop turn, before the
    # waiter's own cleanup runs: that must not raise inside the transport's read callback.
    async def go():
        pool = StreamTransport(max_connections=1, clock=itertools.count(0).__next__)
        conn = _Connection(pool, ("h", 80), pool.clock)
        sock = FakeSocket()
        conn.connection_made(sock)
        conn.send(b"GET / HTTP/1.1\r\n\r\n", None, False)
        assert conn.head is not None
        conn.head.cancel()
        conn.data_received(HEAD + CHUNKED)
        return conn, sock

    conn, sock = asyncio.run(go())
    assert sock.closed and not conn.reusable


def test_malformed_chunk_framing_is_a_protocol_error():
    _got, conn, sock = feed_reads([HEAD + b"zz\r\nhello\r\n"])

    async def finished():
        await conn.stream.finished()

    with pytest.raises(httpx.RemoteProtocolError, match="chunked"):
        asyncio.run(finished())
    assert sock.closed and not conn.alive


Respond = Callable[[asyncio.StreamWriter, int, bytes], Awaitable[None]]


class Server:
    """A loopback HTTP/1.1 server: reads each request (Content-Length or chunked body) and lets
    `respond(writer, request number, request bytes)` write whatever bytes a test needs."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[tuple[int, bytes]] = []  # (connection number, request bytes)
        self.connections = 0
        self.open = self.peak_open = 0

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lower = head.lower()
                if b"transfer-encoding: chunked" in lower:
                    body = await reader.readuntil(b"0\r\n\r\n")
                else:
                    length = int(lower.split(b"content-length: ")[1].split(b"\r\n")[0]) if b"content-length" in lower else 0
                    body = await reader.readexactly(length)
                self.requests.append((number, head + body))
                await self.respond(writer, len(self.requests), head + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


def ok(body: bytes = b"hello") -> Respond:
    async def respond(writer, n, request):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    return respond


def client(url: str, max_connections: int = 2, **timeouts: float) -> httpx.AsyncClient:
    timeout = httpx.Timeout(5.0, **timeouts)
    return httpx.AsyncClient(base_url=url, transport=StreamTransport(max_connections=max_connections), timeout=timeout)


def test_keep_alive_reuses_one_connection_and_sends_headers_and_bodies():
    async def go():
        server = Server(ok())
        async with server as url, client(url) as http:
            answers = [await http.post("/v1/x?q=1", json={"i": i}, headers={"X-LLM-Profile": "p"}) for i in range(5)]
            return server, answers

    server, answers = asyncio.run(go())
    assert [a.text for a in answers] == ["hello"] * 5 and answers[0].status_code == 200
    assert server.connections == 1 and [n for n, _ in server.requests] == [1] * 5
    head, body = server.requests[4][1].split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /v1/x?q=1 HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in head.lower() and b"\r\nx-llm-profile: p" in head.lower()
    assert json.loads(body) == {"i": 4}


def test_a_streamed_request_body_is_sent_chunked():
    async def parts():
        yield b"ab"
        yield b"cd"

    async def go():
        server = Server(ok())
        async with server as url, client(url) as http:
            await http.post("/", content=parts())
            return server

    request = asyncio.run(go()).requests[0][1]
    assert request.endswith(b"\r\n\r\n4\r\nabcd\r\n0\r\n\r\n")


def test_pool_never_opens_more_than_max_connections_and_times_out_waiting():
    async def slow(writer, n, request):
        await asyncio.sleep(0.05)
        await ok()(writer, n, request)

    async def go():
        server = Server(slow)
        async with server as url:
            async with client(url, max_connections=2) as http:
                answers = await asyncio.gather(*(http.get("/") for _ in range(6)))
            async with client(url, max_connections=1, pool=0.01) as http:
                with pytest.raises(httpx.PoolTimeout):
                    await asyncio.gather(http.get("/"), http.get("/"))
            return server, answers

    server, answers = asyncio.run(go())
    assert [a.text for a in answers] == ["hello"] * 6
    assert server.peak_open == 2 and server.connections == 2 + 1  # the second client opened one


async def close_delimited(writer, n, request):
    writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
    await writer.drain()
    writer.close()


async def says_close(writer, n, request):
    writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 13\r\n\r\nuntil the end")
    await writer.drain()  # and keeps the socket open: the header alone forbids reuse


@pytest.mark.parametrize("respond", [close_delimited, says_close])
def test_connection_close_and_close_delimited_bodies_are_not_reused(respond):
    async def go():
        server = Server(respond)
        async with server as url, client(url) as http:
            texts = [(await http.get("/")).text for _ in range(3)]
            return server, texts

    server, texts = asyncio.run(go())
    assert texts == ["until the end"] * 3 and server.connections == 3


def test_a_server_that_closes_an_idle_connection_gets_a_fresh_one():
    async def once(writer, n, request):
        await ok()(writer, n, request)
        writer.close()  # no Connection: close header: the client only sees the EOF

    async def go():
        server = Server(once)
        async with server as url, client(url) as http:
            first = await http.get("/")
            await asyncio.sleep(0.05)  # the EOF reaches the idle connection
            second = await http.get("/")
            return server, first, second

    server, first, second = asyncio.run(go())
    assert first.text == second.text == "hello" and server.connections == 2


def test_refused_connection_is_a_connect_error():
    async def go():
        async with Server(ok()) as url:
            pass  # closed: nothing listens on the port any more
        async with client(url) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get("/")

    asyncio.run(go())


def test_cut_stream_is_a_protocol_error_with_the_blocks_before_it_delivered():
    async def cut(writer, n, request):
        writer.write(HEAD + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0]))
        await writer.drain()
        writer.close()

    async def go():
        got = []
        async with Server(cut) as url, client(url) as http, http.stream("GET", "/") as response:
            stream = timed_stream(response)
            stream.deliver(lambda block, t: got.append(block))
            with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
                await stream.finished()
        return got

    assert b"".join(asyncio.run(go())) == EVENTS[0]


def test_stalled_response_head_and_body_time_out():
    async def stall_body(writer, n, request):
        writer.write(HEAD if n == 1 else b"")
        await writer.drain()

    async def go():
        async with Server(stall_body) as url, client(url, read=0.1) as http:
            async with http.stream("GET", "/") as response:
                with pytest.raises(httpx.ReadTimeout):
                    await timed_stream(response).finished()
            with pytest.raises(httpx.ReadTimeout):
                await http.get("/")

    asyncio.run(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def cut_mid_stream(writer, n, request):
    writer.write(HEAD + b"%x\r\n%s\r\n" % (len(EVENTS[0]), EVENTS[0]))
    writer.close()


async def stall(writer, n, request):
    writer.write(HEAD)


@pytest.mark.parametrize(("respond", "kind"), [(cut_mid_stream, "stream_cut"), (stall, "timeout"), (None, "connect")])
def test_backend_maps_transport_failures_to_error_kinds(respond, kind):
    async def chat(url):
        async with Backend(Connection(url, timeout_s=0.2), "m", max_connections=1) as backend:
            return await backend.stream_chat(ChatRequest("s", 0, 0, False, "p"), max_tokens=4, seed=1, t0=0)

    async def go():
        if respond is None:
            return await chat(f"http://127.0.0.1:{free_port()}")
        async with Server(respond) as url:
            return await chat(url)

    record = asyncio.run(go())
    assert (record.ok, record.error_kind) == (False, kind)


def sse_answer(tokens: int) -> Respond:
    """A streamed chat answer of `tokens` one-token chunks with usage, one network write each."""

    async def respond(writer, n, request):
        events = [b'data: {"choices":[{"delta":{"role":"assistant","content":""}}],"usage":{"completion_tokens":0}}\n\n']
        events += [
            b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":%s}],"usage":{"prompt_tokens":3,'
            b'"completion_tokens":%d}}\n\n' % (b'"length"' if i == tokens else b"null", i)
            for i in range(1, tokens + 1)
        ]
        writer.write(HEAD)
        for event in [*events, b"data: [DONE]\n\n"]:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    return respond


def test_warm_connections_and_prebuilt_requests_stamped_at_the_write():
    clock = itertools.count(1000).__next__  # every clock read advances 1

    async def go():
        server = Server(sse_answer(3))
        async with server as url:
            connection = Connection(url + "/v1", api_key="sk-x", headers={"X-LLM-Profile": "p"}, timeout_s=5)
            async with Backend(connection, "m", max_connections=5, clock=clock) as backend:
                await backend.warm(4)
                warmed = server.connections
                t0 = clock()
                records = await asyncio.gather(
                    *(backend.stream_chat(ChatRequest("s", 0, i, False, "hi"), max_tokens=3, seed=1, t0=t0) for i in range(4))
                )
        return server, warmed, records, url

    server, warmed, records, url = asyncio.run(go())
    # four connections before the clock, and the four requests ran on them: no handshake in any TTFT
    assert warmed == 4 and server.connections == 4 and sorted(n for n, _ in server.requests) == [1, 2, 3, 4]
    assert all(r.ok and r.completion_tokens == 3 and r.prompt_tokens == 3 for r in records)
    # each request reads the clock as it begins (its start if it never gets to write), then at the write:
    # four requests written back to back after t0, each timed from its write
    assert sorted(r.t_start_ns for r in records) == [2, 4, 6, 8]
    head, body = server.requests[0][1].split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    headers = dict(line.split(b": ", 1) for line in lines[1:])
    assert headers[b"Host"] == url.removeprefix("http://").encode() and headers[b"Authorization"] == b"Bearer sk-x"
    assert headers[b"X-LLM-Profile"] == b"p" and headers[b"Accept-Encoding"] == b"identity"
    assert int(headers[b"Content-Length"]) == len(body) and json.loads(body)["stream"] is True


def test_warm_never_opens_more_than_the_pool_holds():
    async def go():
        server = Server(ok())
        async with server as url, Backend(Connection(url), "m", max_connections=2) as backend:
            await backend.warm(8)
            await backend.warm(8)  # already warm: nothing new
            return server.connections

    assert asyncio.run(go()) == 2


def test_get_text_on_the_plain_http_path_sends_the_headers_and_reuses_the_connection():
    async def metrics(writer, n, request):
        body = b"vllm:num_requests_running 3\n" if n < 3 else b"busy"
        status = b"200 OK" if n < 3 else b"503 Service Unavailable"
        writer.write(b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()

    async def go():
        server = Server(metrics)
        async with server as url:
            connection = Connection(url + "/prefix/v1", api_key="sk-x", headers={"X-LLM-Profile": "p"}, timeout_s=5)
            async with Backend(connection, "m", max_connections=2) as backend:
                answers = [await backend.get_text("/metrics") for _ in range(3)]
        refused = Backend(Connection(f"http://127.0.0.1:{free_port()}", timeout_s=1), "m", max_connections=1)
        async with refused:
            answers.append(await refused.get_text("/metrics"))
        return server, answers, url

    server, answers, url = asyncio.run(go())
    assert answers[:3] == [(200, "vllm:num_requests_running 3\n")] * 2 + [(503, "busy")]
    assert answers[3][0] is None and answers[3][1].startswith("ConnectError")
    assert [n for n, _ in server.requests] == [1, 1, 1]  # one keep-alive connection for every scrape
    lines = server.requests[0][1].split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert lines[0] == b"GET /prefix/metrics HTTP/1.1"
    headers = dict(line.split(b": ", 1) for line in lines[1:])
    assert headers[b"Host"] == url.removeprefix("http://").encode() and headers[b"Authorization"] == b"Bearer sk-x"
    assert headers[b"X-LLM-Profile"] == b"p" and headers[b"Accept-Encoding"] == b"identity"
