"""Traffic traces for the cost what-if: request arrival times with their input and output tokens,
read from CSV, JSON Lines or an Application Load Balancer's access logs.

CSV and JSONL carry `timestamp` (ISO 8601, a zone offset or Z; without one it is UTC; or seconds
since the epoch), `input_tokens` and `output_tokens` (whole numbers, at least 0), one request per
row, in time order. A bad row is refused with its line and field.

ALB access logs (AWS's space-separated entry, quoted fields in double quotes, `.gz` files as
delivered) have no tokens: each entry's arrival is its `request_creation_time` and its tokens are
assumed (`AlbTokens`): a fixed count per request, or the request and response bytes divided by a
bytes-per-token figure. Only POST entries are requests to the model (GET /v1/models and other
probes are skipped and counted). Entries come unordered from several load balancer nodes and
files, so they are sorted.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

TraceFormat = Literal["csv", "jsonl", "alb"]
FORMATS: tuple[TraceFormat, ...] = ("csv", "jsonl", "alb")
FIELDS = ("timestamp", "input_tokens", "output_tokens")
# ALB access log entry fields by position (AWS: "Access log entries", Application Load Balancers).
ALB_TYPE, ALB_RECEIVED_BYTES, ALB_SENT_BYTES, ALB_REQUEST, ALB_REQUEST_CREATION_TIME = 0, 10, 11, 12, 21
ALB_FIELDS = {
    ALB_TYPE: "type",
    ALB_RECEIVED_BYTES: "received_bytes",
    ALB_SENT_BYTES: "sent_bytes",
    ALB_REQUEST: "request",
    ALB_REQUEST_CREATION_TIME: "request_creation_time",
}
_EMPTY = " (an empty trace has nothing to replay)"
_ALB_TOKEN = re.compile(r'"[^"]*"|\S+')


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, line and field."""


@dataclass(frozen=True)
class Request:
    """One request of a trace: when it arrived and its tokens."""

    at: datetime
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class AlbTokens:
    """What an ALB entry's tokens are assumed to be: `fixed` counts per request, or `bytes`: the
    request's received bytes and the response's sent bytes (headers included) / bytes_per_token."""

    mode: Literal["fixed", "bytes"] = "fixed"
    input_tokens: int = 1000
    output_tokens: int = 256
    bytes_per_token: float = 4.0


@dataclass(frozen=True)
class Trace:
    """Requests in time order, and the ALB entries skipped as not model requests."""

    requests: tuple[Request, ...]
    skipped: int = 0


def read_trace(path: str | Path, fmt: TraceFormat | None = None, alb: AlbTokens | None = None) -> Trace:
    """Read a trace file (format from the flag, else its suffix: .csv, .jsonl, .log/.log.gz for ALB),
    or for ALB a directory of log files (every .log and .log.gz under it, as `aws s3 sync` copies
    them); TraceError names the line and field of the first bad row, or says the trace is empty."""
    name = str(path)
    if Path(path).is_dir():
        if fmt != "alb":
            raise TraceError(f"{name}: a directory is read as ALB access logs only (give --format alb)")
        files = sorted(p for p in Path(path).rglob("*") if p.name.endswith((".log", ".log.gz")))
        requests: list[Request] = []
        skipped = 0
        for file in files:
            try:
                part = parse_trace(_text(file), "alb", name=str(file), alb=alb)
            except TraceError as exc:
                if not str(exc).endswith(_EMPTY):
                    raise
                continue
            requests += part.requests
            skipped += part.skipped
        if not requests:
            raise TraceError(f"{name}: no requests in {len(files)} log file{'s' if len(files) != 1 else ''}{_EMPTY}")
        return Trace(tuple(sorted(requests, key=lambda r: r.at)), skipped)
    return parse_trace(_text(Path(path)), fmt or _format_of(name), name=name, alb=alb)


def _text(path: Path) -> str:
    try:
        raw = path.read_bytes()
        return (gzip.decompress(raw) if path.name.endswith(".gz") else raw).decode()
    except (OSError, UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
        raise TraceError(f"{path}: cannot read: {exc}") from exc


def parse_trace(text: str, fmt: TraceFormat, *, name: str = "trace", alb: AlbTokens | None = None) -> Trace:
    """Parse a trace's text in a format; TraceError on a bad row or an empty trace."""
    if fmt == "alb":
        trace = _alb(text, name, alb or AlbTokens())
    else:
        requests = list(_csv(text, name) if fmt == "csv" else _jsonl(text, name))
        trace = Trace(tuple(requests))
    if not trace.requests:
        raise TraceError(f"{name}: no requests in the trace{_EMPTY}")
    return trace


def _format_of(name: str) -> TraceFormat:
    stem = name.removesuffix(".gz")
    for suffix, fmt in ((".csv", "csv"), (".jsonl", "jsonl"), (".log", "alb")):
        if stem.endswith(suffix):
            return fmt  # type: ignore[return-value]
    raise TraceError(f"{name}: format: cannot tell from the file name; give --format (allowed: {', '.join(FORMATS)})")


def _timestamp(value: object, where: str) -> datetime:
    if isinstance(value, bool) or value is None or value == "":
        raise TraceError(f"{where}: timestamp: missing")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    text = str(value).strip()
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(
            f"{where}: timestamp: {text!r} is not an ISO 8601 time (e.g. 2026-12-01T09:00:00Z) or seconds since the epoch"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _tokens(value: object, field: str, where: str) -> int:
    if value is None or value == "":
        raise TraceError(f"{where}: {field}: missing")
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise TraceError(f"{where}: {field}: {value!r} is not a whole number")
    try:
        count = int(value) if isinstance(value, int | float) else int(str(value).strip())
    except ValueError:
        raise TraceError(f"{where}: {field}: {value!r} is not a whole number") from None
    if count < 0:
        raise TraceError(f"{where}: {field}: {count} is negative (tokens are 0 or more)")
    return count


def _row(values: dict[str, object], where: str, previous: datetime | None) -> Request:
    at = _timestamp(values.get("timestamp"), where)
    if previous is not None and at < previous:
        raise TraceError(
            f"{where}: timestamp: {at.isoformat()} is before the previous row's {previous.isoformat()} (sort the trace by time)"
        )
    return Request(
        at,
        _tokens(values.get("input_tokens"), "input_tokens", where),
        _tokens(values.get("output_tokens"), "output_tokens", where),
    )


def _csv(text: str, name: str) -> Iterator[Request]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(
            f"{name}:1: header: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (needs {', '.join(FIELDS)})"
        )
    previous: datetime | None = None
    for row in reader:
        request = _row(dict(row), f"{name}:{reader.line_num}", previous)
        previous = request.at
        yield request


def _jsonl(text: str, name: str) -> Iterator[Request]:
    previous: datetime | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            values = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not valid JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(values, dict):
            raise TraceError(f"{where}: not a JSON object with {', '.join(FIELDS)}")
        missing = [f for f in FIELDS if f not in values]
        if missing:
            raise TraceError(f"{where}: {missing[0]}: missing (needs {', '.join(FIELDS)})")
        request = _row(values, where, previous)
        previous = request.at
        yield request


def _alb(text: str, name: str, tokens: AlbTokens) -> Trace:
    requests: list[Request] = []
    skipped = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        fields = _ALB_TOKEN.findall(line)
        if len(fields) <= ALB_REQUEST_CREATION_TIME:
            raise TraceError(
                f"{where}: {ALB_FIELDS[ALB_REQUEST_CREATION_TIME]}: missing (an ALB access log entry has at least "
                f"{ALB_REQUEST_CREATION_TIME + 1} fields, this line {len(fields)})"
            )
        if not fields[ALB_REQUEST].strip('"').startswith("POST "):
            skipped += 1
            continue
        at = _timestamp(fields[ALB_REQUEST_CREATION_TIME], where)
        if tokens.mode == "fixed":
            requests.append(Request(at, tokens.input_tokens, tokens.output_tokens))
            continue
        received = _tokens(fields[ALB_RECEIVED_BYTES], ALB_FIELDS[ALB_RECEIVED_BYTES], where)
        # sent_bytes is "-" when the load balancer sent no response.
        sent_field = fields[ALB_SENT_BYTES]
        sent = _tokens("0" if sent_field == "-" else sent_field, ALB_FIELDS[ALB_SENT_BYTES], where)
        requests.append(Request(at, round(received / tokens.bytes_per_token), round(sent / tokens.bytes_per_token)))
    requests.sort(key=lambda r: r.at)
    return Trace(tuple(requests), skipped)
