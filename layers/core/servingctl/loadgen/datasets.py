"""A user's prompts file read into requests: ShareGPT JSON, JSONL or CSV, the format detected from
the content or named, the first N prompts taken, and the file's fingerprint (sha256, counts).

- ShareGPT (a JSON array): as `vllm bench serve --dataset-name sharegpt` reads it, without its
  shuffle: entries with fewer than two turns are skipped (and counted), the first turn's value is
  sent as one user message, the second turn's value is the reference answer whose token count is
  the output length when asked.
- JSONL: one JSON object a line with `prompt` (a string) or `messages` (a list of {role, content}),
  optional `output_tokens` (an integer >= 1), `reference` (an answer whose token count is the output
  length when asked), `timestamp` (seconds from the trace's start) and `conversation_id`.
- CSV: a header line naming `prompt` or `messages` (a JSON list as text), optionally the other
  JSONL columns; one request a line.

`to_jsonl` writes taken prompts back as JSONL that reads as the same requests: what a run inside
the VPC is given instead of the user's file (only the prompts it sends, whatever the file's format).

Other fields or columns are ignored. A malformed line is an error naming the line (ShareGPT: the
entry) and the field; nothing is sent then.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servingctl.schema.results import DATASET_FORMATS, Api, DatasetFingerprint, DatasetFormat, DatasetSpec, Mode

# A file larger than this is refused before it is read (ShareGPT V3, the usual file, is 642 MB).
MAX_DATASET_BYTES = 1024 * 1024 * 1024
# Prompts one run may take (each is counted through the server's /tokenize before the load).
MAX_PROMPTS = 100_000
ROLES = ("system", "user", "assistant")
JSONL_FIELDS = ("prompt", "messages", "output_tokens", "reference", "timestamp", "conversation_id")


class DatasetError(ValueError):
    """The file cannot be used: the message names the line (or entry) and the field."""


@dataclass(frozen=True)
class DatasetPrompt:
    """One request of a dataset: its messages, optional output length, reference answer and timestamp."""

    line: int  # 1-based line of the file (ShareGPT: 0-based entry index of the JSON array)
    messages: tuple[tuple[str, str], ...]  # (role, content)
    output_tokens: int | None = None
    reference: str | None = None  # ShareGPT: the answer whose token count is the output length when asked
    timestamp_s: float | None = None
    conversation: str | None = None  # turns of one conversation share it, in file order


@dataclass(frozen=True)
class Dataset:
    """The prompts taken from a file, with its fingerprint."""

    prompts: list[DatasetPrompt]
    fingerprint: DatasetFingerprint


def detect_format(text: str) -> DatasetFormat:
    """sharegpt when the content is a JSON array, jsonl when it starts with an object, else csv."""
    head = text.lstrip("\ufeff \t\r\n")[:1]
    if head == "[":
        return "sharegpt"
    if head == "{":
        return "jsonl"
    return "csv"


def _where(line: int, fmt: DatasetFormat) -> str:
    return f"entry {line}" if fmt == "sharegpt" else f"line {line}"


def _messages(value: Any, where: str, field: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: {field}: expected a non-empty list of {{role, content}} objects")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise DatasetError(f"{where}: {field}[{i}]: expected an object with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise DatasetError(f"{where}: {field}[{i}].role: {role!r}; allowed: {', '.join(ROLES)}")
        if not isinstance(content, str) or not content:
            raise DatasetError(f"{where}: {field}[{i}].content: expected a non-empty string")
        out.append((role, content))
    return tuple(out)


def _prompt(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, str) or not value:
        raise DatasetError(f"{where}: prompt: expected a non-empty string")
    return (("user", value),)


def _output_tokens(value: Any, where: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):  # CSV cells are text
        try:
            value = int(value)
        except ValueError:
            raise DatasetError(f"{where}: output_tokens: {value!r}; expected an integer >= 1") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DatasetError(f"{where}: output_tokens: {value!r}; expected an integer >= 1")
    return value


def _timestamp(value: Any, where: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise DatasetError(f"{where}: timestamp: {value!r}; expected seconds, a number >= 0") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise DatasetError(f"{where}: timestamp: {value!r}; expected seconds, a number >= 0")
    return float(value)


def _row(fields: dict[str, Any], line: int, fmt: DatasetFormat) -> DatasetPrompt:
    """One JSONL object or CSV row as a prompt."""
    where = _where(line, fmt)
    has_prompt = fields.get("prompt") not in (None, "")
    has_messages = fields.get("messages") not in (None, "")
    if has_prompt == has_messages:
        raise DatasetError(f"{where}: prompt or messages: give exactly one (fields read: {', '.join(JSONL_FIELDS)})")
    if has_prompt:
        messages = _prompt(fields["prompt"], where)
    else:
        value = fields["messages"]
        if fmt == "csv" and isinstance(value, str):  # the list as JSON text in a cell
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: messages: not JSON ({exc.msg})") from None
        messages = _messages(value, where, "messages")
    return DatasetPrompt(
        line=line,
        messages=messages,
        output_tokens=_output_tokens(fields.get("output_tokens"), where),
        reference=_reference(fields.get("reference"), where),
        timestamp_s=_timestamp(fields.get("timestamp"), where),
        conversation=_conversation(fields.get("conversation_id"), where),
    )


def _reference(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DatasetError(f"{where}: reference: {value!r}; expected the answer's text")
    return value


def _conversation(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DatasetError(f"{where}: conversation_id: {value!r}; expected a string or an integer")
    return str(value)


def parse_jsonl(text: str) -> tuple[list[DatasetPrompt], int]:
    """Prompts of a JSONL text (blank lines skipped) and how many were skipped (always 0)."""
    prompts = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            fields = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"line {line}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(fields, dict):
            raise DatasetError(f"line {line}: expected a JSON object with prompt or messages")
        prompts.append(_row(fields, line, "jsonl"))
    return prompts, 0


def parse_csv(text: str) -> tuple[list[DatasetPrompt], int]:
    """Prompts of a CSV text with a header line, and how many were skipped (always 0)."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline=""), strict=True)
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise DatasetError(f"line 1: header: {exc}") from None
    if "prompt" not in header and "messages" not in header:
        raise DatasetError(f"line 1: header: {header}; needs a prompt or messages column (read: {', '.join(JSONL_FIELDS)})")
    prompts = []
    try:
        for row in reader:
            if None in row:  # more cells than the header names
                cells = len(row) - 1 + len(row[None])
                raise DatasetError(f"line {reader.line_num}: {cells} cells; the header names {len(header)}")
            if all(not (v or "").strip() for v in row.values()):
                continue
            prompts.append(_row(row, reader.line_num, "csv"))
    except csv.Error as exc:
        raise DatasetError(f"line {reader.line_num}: {exc}") from None
    return prompts, 0


def parse_sharegpt(text: str, multi_turn: bool = False) -> tuple[list[DatasetPrompt], int]:
    """Prompts of a ShareGPT JSON array, and the entries skipped for fewer than two turns; with
    multi_turn, every (user, reference) pair of an entry, the entry's turns one conversation."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"line {exc.lineno}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, list):
        raise DatasetError("line 1: expected a JSON array of {conversations: [{from, value}, ...]} entries")
    prompts, skipped = [], 0
    for index, entry in enumerate(data):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            raise DatasetError(f"{where}: expected an object with conversations")
        turns = entry.get("conversations")
        if turns is None or (isinstance(turns, list) and len(turns) < 2):
            skipped += 1  # vllm bench serve drops these without a word; counted here
            continue
        if not isinstance(turns, list):
            raise DatasetError(f"{where}: conversations: expected a list of {{from, value}} turns")
        values = []
        for i in range(len(turns) // 2 * 2 if multi_turn else 2):
            turn = turns[i]
            value = turn.get("value") if isinstance(turn, dict) else None
            if not isinstance(value, str):
                raise DatasetError(f"{where}: conversations[{i}].value: expected a string")
            if i % 2 == 0 and not value:
                raise DatasetError(f"{where}: conversations[{i}].value: empty prompt")
            values.append(value)
        conversation = str(index) if multi_turn else None
        prompts += [
            DatasetPrompt(line=index, messages=(("user", values[i]),), reference=values[i + 1], conversation=conversation)
            for i in range(0, len(values), 2)
        ]
    return prompts, skipped


_PARSERS = {"sharegpt": parse_sharegpt, "jsonl": parse_jsonl, "csv": parse_csv}


def first_prompts(prompts: list[DatasetPrompt], count: int | None) -> list[DatasetPrompt]:
    """The first `count` prompts, or with conversations every turn of the first `count` conversations."""
    if count is None:
        return prompts
    if all(p.conversation is None for p in prompts):
        return prompts[:count]
    kept: set[str | int] = set()
    taken = []
    for p in prompts:
        key: str | int = p.conversation if p.conversation is not None else -p.line - 1  # a lone prompt: its own
        if key not in kept and len(kept) == count:
            continue
        kept.add(key)
        taken.append(p)
    return taken


def conversations(prompts: list[DatasetPrompt]) -> list[list[DatasetPrompt]]:
    """Turns grouped by conversation in order of first appearance (a prompt without one is alone)."""
    groups: dict[str | int, list[DatasetPrompt]] = {}
    for p in prompts:
        groups.setdefault(p.conversation if p.conversation is not None else -p.line - 1, []).append(p)
    return list(groups.values())


def parse_dataset(data: bytes, spec: DatasetSpec, *, max_bytes: int = MAX_DATASET_BYTES) -> Dataset:
    """The first spec.num_prompts prompts of a file's bytes, with its fingerprint."""
    if len(data) > max_bytes:
        raise DatasetError(f"{spec.source}: {len(data)} bytes; allowed: at most {max_bytes}")
    if spec.num_prompts is not None and spec.num_prompts > MAX_PROMPTS:
        raise DatasetError(f"num_prompts: {spec.num_prompts}; allowed: 1..{MAX_PROMPTS}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DatasetError(f"line {line}: not UTF-8 text ({exc.reason})") from None
    fmt: DatasetFormat = spec.format or detect_format(text)
    if fmt not in DATASET_FORMATS:
        raise DatasetError(f"format: {fmt!r}; allowed: {', '.join(DATASET_FORMATS)}")
    prompts, skipped = parse_sharegpt(text, spec.multi_turn) if fmt == "sharegpt" else _PARSERS[fmt](text)
    if not prompts:
        raise DatasetError(f"{spec.source}: no prompts in the file (read as {fmt})")
    taken = first_prompts(prompts, spec.num_prompts)
    if len(taken) > MAX_PROMPTS:
        raise DatasetError(f"{spec.source}: {len(taken)} prompts; allowed: at most {MAX_PROMPTS} (take fewer with num_prompts)")
    return Dataset(
        prompts=taken,
        fingerprint=DatasetFingerprint(
            source=spec.source,
            format=fmt,
            sha256=hashlib.sha256(data).hexdigest(),
            prompts=len(taken),
            entries=len(prompts),
            skipped=skipped,
            output_tokens=spec.output_tokens,
        ),
    )


def load_dataset(spec: DatasetSpec, *, max_bytes: int = MAX_DATASET_BYTES) -> Dataset:
    """Read a local dataset file (the CLI's --dataset) and parse it."""
    path = Path(spec.source)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DatasetError(f"{spec.source}: cannot read ({exc.strerror})") from None
    if size > max_bytes:  # refused before reading a huge file into memory
        raise DatasetError(f"{spec.source}: {size} bytes; allowed: at most {max_bytes}")
    return parse_dataset(path.read_bytes(), spec, max_bytes=max_bytes)


def to_jsonl(prompts: list[DatasetPrompt]) -> bytes:
    """The prompts as JSONL (messages, and output_tokens, reference, timestamp and conversation_id where
    set) that parse_jsonl reads back as the same requests, in the same order."""
    lines = []
    for p in prompts:
        row: dict[str, Any] = {"messages": [{"role": role, "content": content} for role, content in p.messages]}
        optional = {
            "output_tokens": p.output_tokens,
            "reference": p.reference,
            "timestamp": p.timestamp_s,
            "conversation_id": p.conversation,
        }
        row |= {k: v for k, v in optional.items() if v is not None}
        lines.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(lines).encode()


def check_usable(dataset: Dataset, *, api: Api, mode: Mode, replay: bool) -> None:
    """The engine's rules on a dataset's prompts, checked before anything is counted or sent:
    /v1/completions takes one prompt a request, conversations run in mode sustained, a replay
    needs a timestamp on every prompt and no conversation."""
    if api == "completions":
        several = next((p for p in dataset.prompts if len(p.messages) > 1 or p.conversation is not None), None)
        if several is not None:
            raise DatasetError(
                f"line {several.line}: messages: /v1/completions sends one prompt; this line has {len(several.messages)} "
                "messages or a conversation (use --api chat)"
            )
    talks = next((g for g in conversations(dataset.prompts) if len(g) > 1), None)
    if talks is not None and mode != "sustained":
        raise DatasetError(
            f"line {talks[0].line}: conversation_id: conversations run in mode sustained (the default with a dataset); "
            f"got mode {mode}"
        )
    if replay:
        check_replayable(dataset)


def check_replayable(dataset: Dataset) -> None:
    """A trace to replay: every prompt has a timestamp and none belongs to a conversation."""
    missing = [p.line for p in dataset.prompts if p.timestamp_s is None]
    if missing:
        raise DatasetError(f"line {missing[0]}: timestamp: required to replay ({len(missing)} prompts have none)")
    talking = [p.line for p in dataset.prompts if p.conversation is not None]
    if talking:
        raise DatasetError(f"line {talking[0]}: conversation_id: a replay sends single requests at their timestamps; drop it")
