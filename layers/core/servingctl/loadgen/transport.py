"""A lean HTTP/1.1 transport for httpx on a raw asyncio.Protocol, for plain http:// endpoints.

Owns the keep-alive pool, the response framing (Content-Length, chunked, read until close) and the
arrival time of body bytes: each network read is stamped with the monotonic ns clock inside
`data_received`, so a busy event loop does not move a timestamp to when a coroutine got scheduled.
On Linux a streaming exchange reads its connection itself (recvmsg) from the request's write until
its reader has the first token, each read stamped with the kernel's receive time of its last
segment (shared.rxstamp): a loop busy with other streams (64 requests ending and starting together
kept it ~3 ms at 64 streams) does not move TTFT when the first token waited alone, as a server's
next token is an engine step behind. Then the loop's transport reads the rest.
A streaming reader registers a sink with `TimedStream.deliver(sink)`: sink(block, t_ns) is then
called from `data_received` for every read (no coroutine wake-up per chunk) and `await finished()`
returns at the end of the body or raises the httpx error that ended it. Other responses are read
through the ordinary async iterator, so httpx's client API (headers, auth, timeouts) is unchanged.
The benchmark's streaming requests skip httpx altogether: `exchange()` writes request bytes the
caller encoded once and returns the clock at that write, and `warm()` opens the connections before
the clock starts, so no request's TTFT holds a TCP handshake or the request-building path.
Errors are httpx's: ConnectError/ConnectTimeout, PoolTimeout, ReadTimeout, RemoteProtocolError for
a cut or malformed response, ReadError for a reset connection. Requests are written whole into
asyncio's buffer (no write timeout); a request body given as a stream is sent as one chunk.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import httpx

from servingctl.shared import rxstamp

Clock = Callable[[], int]
Sink = Callable[[bytes, int], None]
TIMED_STREAM = "servingctl.timed_stream"
MAX_HEAD_BYTES = 65_536
_READ_SIZE = 262_144  # as uvloop's reads
_HEAD, _BODY, _IDLE, _CLOSED = range(4)


def timed_stream(response: httpx.Response) -> TimedStream | None:
    """The response's TimedStream when it came through StreamTransport, else None."""
    return response.extensions.get(TIMED_STREAM)


class TimedStream(httpx.AsyncByteStream):
    """One response body: blocks with their arrival times, to a sink or through async iteration."""

    __slots__ = ("_blocks", "_closed", "_conn", "_error", "_sink", "_stamped_until", "_waiter", "done")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self._blocks: list[tuple[bytes, int]] = []
        self._sink: Sink | None = None
        self._stamped_until: Callable[[], bool] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.done = False
        self._error: BaseException | None = None
        self._closed = False

    def push(self, block: bytes, t: int) -> None:
        """A body block arrived at t (called by the connection)."""
        if self._sink is None:
            self._blocks.append((block, t))
            self._wake()
            return
        try:
            self._sink(block, t)
        except Exception as exc:  # a reader bug: end the stream and surface it in finished()
            self._conn.abort()
            self.end(exc)

    def end(self, error: BaseException | None) -> None:
        """The body ended, cleanly (None) or with an error (called by the connection)."""
        if not self.done:
            self.done, self._error = True, error
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        await self._waiter
        self._waiter = None

    def deliver(self, sink: Sink, stamped_until: Callable[[], bool] | None = None) -> None:
        """Hand every block (those already buffered first) to sink(block, t_ns) as it arrives; an
        exchange's reads carry kernel receive stamps until stamped_until() is true (or now, without)."""
        blocks, self._blocks = self._blocks, []
        for block, t in blocks:
            sink(block, t)
        self._sink = sink
        self._stamped_until = stamped_until or (lambda: True)
        self._conn.stamped_reads_check()

    def wants_stamps(self) -> bool:
        """Whether reads should still carry kernel stamps: until the reader says it has what it times."""
        return self._stamped_until is None or not self._stamped_until()

    async def finished(self) -> None:
        """Wait for the end of the body; raise the error that ended it, if any."""
        while not self.done:
            await self._wait()
        if self._error is not None:
            raise self._error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """Body blocks as they arrive (the non-streaming path: httpx's aread)."""
        while True:
            if self._blocks:
                blocks, self._blocks = self._blocks, []
                for block, _ in blocks:
                    yield block
            elif self.done:
                if self._error is not None:
                    raise self._error
                return
            else:
                await self._wait()

    async def aclose(self) -> None:
        """Give the connection back: to the pool after a complete body, else closed."""
        if not self._closed:
            self._closed = True
            self._conn.release()


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: writes a request, parses the response head, de-frames the body."""

    def __init__(self, pool: StreamTransport, key: tuple[str, int], clock: Clock) -> None:
        self.pool, self.key, self.clock = pool, key, clock
        self.transport: asyncio.Transport | None = None
        self.state = _IDLE
        self.requests = 0
        self.reusable = True
        self.stream: TimedStream | None = None
        self.head: asyncio.Future[tuple[int, bytes, list[tuple[bytes, bytes]]]] | None = None
        self.buffer = b""
        self.mode = ""  # "length", "chunked" or "close"
        self.left = 0  # bytes left in the body ("length") or in the current chunk ("chunked")
        self.skip = 0  # CRLF bytes still expected after a chunk's data
        self.trailer = False
        self.no_body = False
        self.last_read = 0.0
        self.timeout: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.own: socket.socket | None = None  # a dup of the socket, read with kernel stamps
        self.own_reading = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport; turn the socket's receive stamps on where the kernel has them."""
        self.transport = cast(asyncio.Transport, transport)  # loop.create_connection's: a stream transport
        raw = transport.get_extra_info("socket")
        if rxstamp.SUPPORTED and raw is not None:
            self.own = socket.socket(raw.family, raw.type, fileno=os.dup(raw.fileno()))
            rxstamp.enable(self.own)

    def send(self, request: bytes, read_timeout: float | None, no_body: bool, stamped: bool = False) -> int:
        """Write one request and expect its response; return the clock when its bytes were written.
        `stamped`: read the response with kernel stamps until its stream's reader has what it times."""
        assert self.transport is not None
        self.requests += 1
        self.state, self.buffer, self.trailer, self.skip, self.no_body = _HEAD, b"", False, 0, no_body
        self.stream = TimedStream(self)
        self.head = asyncio.get_running_loop().create_future()
        if stamped and self.own is not None:
            self._read_own(True)
        t_sent = self.clock()
        self.transport.write(request)
        self.timeout = read_timeout
        self.last_read = time.monotonic()
        if read_timeout is not None:
            self.timer = asyncio.get_running_loop().call_later(read_timeout, self._check_timeout)
        return t_sent

    def _check_timeout(self) -> None:
        assert self.timeout is not None
        remaining = self.last_read + self.timeout - time.monotonic()
        if remaining > 0:
            self.timer = asyncio.get_running_loop().call_later(remaining, self._check_timeout)
            return
        self.timer = None
        self._fail(httpx.ReadTimeout(f"no data for {self.timeout:g} s"))

    def _read_own(self, on: bool) -> None:
        """Read the socket here with kernel stamps (on), or give reading back to the transport."""
        if on == self.own_reading or self.own is None or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        if on:
            self.transport.pause_reading()
            loop.add_reader(self.own.fileno(), self._own_ready)
        else:
            loop.remove_reader(self.own.fileno())
            if not self.transport.is_closing():
                self.transport.resume_reading()
        self.own_reading = on

    def _own_ready(self) -> None:
        assert self.own is not None
        try:
            data, t = rxstamp.recv_stamped(self.own, _READ_SIZE, self.clock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # end of stream or an error: the transport meets it and ends the exchange its usual way
            self._read_own(False)
            return
        self._received(data, t)
        self.stamped_reads_check()

    def stamped_reads_check(self) -> None:
        """Back to the transport's reads once the body's reader has what it times (the end of the
        exchange, an abort and a lost connection give them back too)."""
        if self.own_reading and self.state == _BODY and self.stream is not None and not self.stream.wants_stamps():
            self._read_own(False)

    def data_received(self, data: bytes) -> None:
        """A read by the transport: stamp it, then parse."""
        self._received(data, self.clock())

    def _received(self, data: bytes, t: int) -> None:
        """Parse the head or de-frame the body of a read that arrived at t."""
        self.last_read = time.monotonic()
        if self.state == _BODY:
            self._body(data, t)
        elif self.state == _HEAD:
            self._head(data, t)
        else:  # bytes nobody asked for: the connection cannot be trusted any more
            self.reusable = False

    def _head(self, data: bytes, t: int) -> None:
        buffer = self.buffer + data
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            self.buffer = buffer
            if len(buffer) > MAX_HEAD_BYTES:
                self._fail(httpx.RemoteProtocolError("response head too large"))
            return
        self.buffer = b""
        try:
            status, reason, headers = _parse_head(buffer[:end])
        except ValueError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response head: {exc}"))
            return
        if status < 200:  # an interim response (100 Continue): the real one follows
            self._head(buffer[end + 4 :], t)
            return
        framing = _framing(status, headers, self.no_body)
        self.mode, self.left = framing
        if self.mode == "close" or any(name.lower() == b"connection" and b"close" in value.lower() for name, value in headers):
            self.reusable = False
        assert self.head is not None
        if self.head.done():  # the waiter was cancelled (Ctrl-C, a deadline): nobody reads this response
            self.abort()
            return
        self.state = _BODY
        self.head.set_result((status, reason, headers))
        if self.mode == "length" and self.left == 0:
            self._finish()
        elif end + 4 < len(buffer):
            self._body(buffer[end + 4 :], t)

    def _body(self, data: bytes, t: int) -> None:
        stream = self.stream
        assert stream is not None
        if self.mode == "chunked":
            try:
                block, ended = self._dechunk(data)
            except ValueError as exc:
                self._fail(httpx.RemoteProtocolError(f"malformed chunked body: {exc}"))
                return
            if block:
                stream.push(block, t)
            if ended:
                self._finish()
        elif self.mode == "length":
            if len(data) > self.left:
                self.reusable = False  # more bytes than announced
                data = data[: self.left]
            self.left -= len(data)
            stream.push(data, t)
            if self.left == 0:
                self._finish()
        else:
            stream.push(data, t)

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """The payload bytes of `data` and whether the last chunk ended (raises ValueError)."""
        if not (self.buffer or self.left or self.skip or self.trailer) and data[-2:] == b"\r\n":
            # The common read of a paced stream: exactly one whole chunk, taken without the loop below.
            eol = data.find(b"\r\n")
            if 0 < eol < 9:
                try:
                    size = int(data[:eol], 16)
                except ValueError:
                    size = -1
                if size > 0 and len(data) == eol + size + 4:
                    return data[eol + 2 : -2], False
            # A flood's read: whole chunks only, none with CRLF inside, split in C (1.05 -> 0.45 us per
            # chunk); any other shape goes through the loop below.
            fields = data.split(b"\r\n")
            if len(fields) % 2:
                sizes, payloads = fields[0:-1:2], fields[1:-1:2]
                try:
                    whole = all(int(size, 16) == len(payload) for size, payload in zip(sizes, payloads, strict=True))
                except ValueError:
                    whole = False
                if whole and b"" not in payloads[:-1]:  # a size 0 ends the body: only the last may be one
                    if payloads[-1]:
                        return b"".join(payloads), False
                    if fields[-3] == b"0" and fields[-2] == b"":  # the last chunk, and no trailers
                        return b"".join(payloads[:-1]), True
        buffer = self.buffer + data if self.buffer else data
        self.buffer = b""
        parts: list[bytes] = []
        pos, size = 0, len(buffer)
        while pos < size:
            if self.left:
                take = min(self.left, size - pos)
                parts.append(buffer[pos : pos + take])
                pos += take
                self.left -= take
                if not self.left:
                    self.skip = 2
            elif self.skip == 2 and size - pos >= 2:
                if buffer[pos : pos + 2] != b"\r\n":
                    raise ValueError("chunk data not followed by CRLF")
                pos += 2
                self.skip = 0
            elif self.skip:  # the CRLF straddles two reads
                if buffer[pos] != b"\r\n"[2 - self.skip]:
                    raise ValueError("chunk data not followed by CRLF")
                pos += 1
                self.skip -= 1
            else:
                eol = buffer.find(b"\r\n", pos)
                if eol < 0:
                    self.buffer = buffer[pos:]
                    if len(self.buffer) > MAX_HEAD_BYTES:
                        raise ValueError("chunk size line too long")
                    break
                line = buffer[pos:eol]
                pos = eol + 2
                if self.trailer:
                    if not line:  # the blank line after the trailers ends the body
                        if pos < size:
                            self.reusable = False
                        return b"".join(parts), True
                    continue
                self.left = int(line.partition(b";")[0] if b";" in line else line, 16)
                if self.left < 0:
                    raise ValueError(f"negative chunk size {line!r}")
                if not self.left:
                    self.trailer = True
                elif pos + self.left + 2 <= size:  # the whole chunk is in this read: take it at once
                    end = pos + self.left
                    if buffer[end : end + 2] != b"\r\n":
                        raise ValueError("chunk data not followed by CRLF")
                    parts.append(buffer[pos:end])
                    pos, self.left = end + 2, 0
        return (parts[0] if len(parts) == 1 else b"".join(parts)), False

    def _finish(self) -> None:
        self.state = _IDLE
        self._cancel_timer()
        self._read_own(False)
        assert self.stream is not None
        self.stream.end(None)

    def _fail(self, error: Exception) -> None:
        """End the exchange with an error and close the connection."""
        self.abort()
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        if self.stream is not None:
            self.stream.end(error)

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def abort(self) -> None:
        """Close the connection for good."""
        self.reusable = False
        self.state = _CLOSED
        self._cancel_timer()
        self._read_own(False)
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        """The server closed its side: let the transport close."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """End a close-delimited body cleanly; anything else in progress is a cut."""
        state, self.state, self.reusable = self.state, _CLOSED, False
        self._cancel_timer()
        self._read_own(False)
        if self.own is not None:
            self.own.close()
        self.pool.forget(self)
        if state == _BODY and self.mode == "close" and exc is None:
            assert self.stream is not None
            self.stream.end(None)
        elif state in (_HEAD, _BODY):
            if exc is not None:
                error: Exception = httpx.ReadError(f"{type(exc).__name__}: {exc}")
            elif state == _HEAD:
                error = httpx.RemoteProtocolError("Server disconnected without sending a response.")
            else:
                error = httpx.RemoteProtocolError("peer closed connection without sending complete message body")
            self._fail(error)

    def release(self) -> None:
        """The reader is done with the response: pool the connection or close it."""
        if self.state == _IDLE and self.reusable:
            self.pool.put_back(self)
        else:
            self.abort()
            self.pool.forget(self)
        self.pool.slots.release()

    @property
    def alive(self) -> bool:
        """Idle, reusable and still open."""
        return self.state == _IDLE and self.reusable and self.transport is not None and not self.transport.is_closing()


def _parse_head(head: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """Status code, reason phrase and headers of a response head (raises ValueError)."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    if not version.startswith(b"HTTP/1."):
        raise ValueError(f"status line {lines[0][:80]!r}")
    code, _, reason = rest.partition(b" ")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise ValueError(f"header line {line[:80]!r}")
        headers.append((name, value.strip()))
    if version == b"HTTP/1.0":
        headers.append((b"Connection", b"close"))  # no keep-alive negotiation with HTTP/1.0 servers
    return int(code), reason, headers


def _framing(status: int, headers: list[tuple[bytes, bytes]], no_body: bool) -> tuple[str, int]:
    """How the body is delimited: ("length", n), ("chunked", 0) or ("close", 0) (RFC 9112 6.3)."""
    if no_body or status in (204, 304):
        return "length", 0
    length = None
    for name, value in headers:
        lower = name.lower()
        if lower == b"transfer-encoding" and value.lower().endswith(b"chunked"):
            return "chunked", 0
        if lower == b"content-length":
            length = int(value)
    return ("close", 0) if length is None else ("length", length)


class StreamTransport(httpx.AsyncBaseTransport):
    """httpx transport for http:// URLs: HTTP/1.1 keep-alive pool of at most max_connections."""

    def __init__(self, *, max_connections: int, clock: Clock = time.monotonic_ns) -> None:
        self.clock = clock
        self.max_connections = max_connections
        self.slots = asyncio.Semaphore(max_connections)
        self.idle: dict[tuple[str, int], list[_Connection]] = {}
        self.open: set[_Connection] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request and return its response as soon as the head arrived."""
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"StreamTransport speaks http:// only, not {request.url.scheme}://")
        timeouts = request.extensions.get("timeout", {})
        head, body = await _serialize(request)
        no_body = request.method == "HEAD"
        conn, _, (status, reason, headers) = await self._send(
            request.url.host,
            request.url.port or 80,
            head + body,
            pool_timeout=timeouts.get("pool"),
            connect_timeout=timeouts.get("connect"),
            read_timeout=timeouts.get("read"),
            no_body=no_body,
        )
        return httpx.Response(
            status,
            headers=headers,
            stream=conn.stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason, TIMED_STREAM: conn.stream},
        )

    async def exchange(
        self,
        host: str,
        port: int,
        request: bytes,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> tuple[int, int, TimedStream]:
        """The streaming path without httpx: write pre-encoded request bytes on a pooled connection.

        Returns (the clock when the bytes were written, status, body stream) once the response head
        arrived; raises httpx's errors like handle_async_request. The caller must aclose() the stream.
        """
        conn, t_sent, (status, _, _) = await self._send(
            host,
            port,
            request,
            pool_timeout=None,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            no_body=False,
            stamped=True,
        )
        assert conn.stream is not None  # the response head arrived: the connection has its body stream
        return t_sent, status, conn.stream

    async def _send(
        self,
        host: str,
        port: int,
        request: bytes,
        *,
        pool_timeout: float | None,
        connect_timeout: float | None,
        read_timeout: float | None,
        no_body: bool,
        stamped: bool = False,
    ) -> tuple[_Connection, int, tuple[int, bytes, list[tuple[bytes, bytes]]]]:
        """Take a slot and a pooled connection, write the request, wait for the response head.

        Returns (connection, the clock at the write, the head); the slot is released on any failure.
        """
        await self._acquire_slot(pool_timeout)
        try:
            conn = await self._open(host, port, connect_timeout)
            t_sent = conn.send(request, read_timeout, no_body, stamped)
            assert conn.head is not None and conn.stream is not None
            try:
                head = await conn.head
            except BaseException:
                conn.abort()
                raise
        except BaseException:
            self.slots.release()
            raise
        return conn, t_sent, head

    async def warm(self, host: str, port: int, count: int, connect_timeout: float | None) -> None:
        """Open up to `count` idle connections to host:port now, so no request pays for its own."""
        missing = min(count - len(self.idle.get((host, port), ())), self.max_connections - len(self.open))
        if missing <= 0:
            return
        conns = await asyncio.gather(*(self._dial(host, port, connect_timeout) for _ in range(missing)))
        for conn in conns:
            self.put_back(conn)

    async def _acquire_slot(self, timeout: float | None) -> None:
        if not self.slots.locked():
            await self.slots.acquire()
            return
        try:
            await asyncio.wait_for(self.slots.acquire(), timeout)
        except TimeoutError:
            raise httpx.PoolTimeout(f"no free connection of {self.max_connections} within {timeout:g} s") from None

    async def _open(self, host: str, port: int, timeout: float | None) -> _Connection:
        """An idle pooled connection to host:port, else a new one."""
        idle = self.idle.get((host, port))
        while idle:
            conn = idle.pop()
            if conn.alive:
                return conn
            conn.abort()
            self.open.discard(conn)
        if len(self.open) >= self.max_connections:  # make room: close an idle connection to another host
            for conns in self.idle.values():
                if conns:
                    conns.pop().abort()
                    break
        return await self._dial(host, port, timeout)

    async def _dial(self, host: str, port: int, timeout: float | None) -> _Connection:
        """A new connection to host:port, counted as open."""
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self, (host, port), self.clock), host, port), timeout
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} took over {timeout:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{host}:{port}: {exc}") from None
        self.open.add(conn)
        return conn

    def put_back(self, conn: _Connection) -> None:
        """Keep an idle connection for the next request to its host."""
        self.idle.setdefault(conn.key, []).append(conn)

    def forget(self, conn: _Connection) -> None:
        """A closed connection leaves the pool."""
        self.open.discard(conn)
        conns = self.idle.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)

    async def aclose(self) -> None:
        """Close every connection."""
        for conn in list(self.open):
            conn.abort()
        self.open.clear()
        self.idle.clear()


async def _serialize(request: httpx.Request) -> tuple[bytes, bytes]:
    """The request head and body bytes (a chunked request body is sent as one chunk)."""
    if not isinstance(request.stream, httpx.AsyncByteStream):
        raise TypeError("a request sent through an async transport has an async body")
    body = b"".join([part async for part in request.stream])
    headers = request.headers.raw
    if any(name.lower() == b"transfer-encoding" for name, _ in headers):
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)]
    lines += [b"%s: %s\r\n" % (name, value) for name, value in headers]
    lines.append(b"\r\n")
    return b"".join(lines), body
