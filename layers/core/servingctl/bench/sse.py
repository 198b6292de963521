"""Server-sent events parsing over raw byte chunks (the WHATWG event-stream rules).

Owns line splitting (LF, CRLF, CR, even when a CRLF pair straddles two network reads), the
`data:` / `event:` / `id:` / `retry:` fields, comments, multi-line data joined with "\\n", and a
count of lines that follow none of these rules. Events are dispatched on a blank line.
"""

from __future__ import annotations

from dataclasses import dataclass

_FIELDS = frozenset({b"data", b"event", b"id", b"retry"})


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: its data (lines joined by newline) and its event type."""

    data: str
    event: str = "message"


class SSEParser:
    """Incremental parser: feed() byte chunks as they arrive, get the events they complete."""

    __slots__ = ("_buffer", "_data", "_event", "_skip_lf", "malformed_lines")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._event = b""
        self._skip_lf = False
        self.malformed_lines = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume one chunk of bytes and return the events completed by it (possibly none)."""
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            # A trailing CR may be the first half of CRLF: remember to drop the LF if it comes next.
            self._skip_lf = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: an unterminated last line is processed and a pending event dispatched."""
        events: list[SSEEvent] = []
        if self._buffer:
            line, self._buffer = self._buffer, b""
            self._line(line)
        event = self._line(b"")
        if event is not None:
            events.append(event)
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            if not self._data:
                self._event = b""
                return None
            event = SSEEvent(
                data=b"\n".join(self._data).decode("utf-8", "replace"),
                event=self._event.decode("utf-8", "replace") or "message",
            )
            self._data = []
            self._event = b""
            return event
        if line.startswith(b":"):
            return None  # comment (keep-alive pings)
        # A line without a colon is a field name with an empty value (e.g. a bare "data").
        name, _, value = line.partition(b":")
        if name not in _FIELDS:
            self.malformed_lines += 1
            return None
        if value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        return None
