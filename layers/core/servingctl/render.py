"""Plain text that fits the terminal, for the CLI's tables and the benchmark's terminal report:
aligned columns (headers on one or more lines), "name  value" details and notes wrapped to the
width at spaces only (ARNs and ids are never cut), times shown short. No rich: `status` stays quick
to start, and pipes get the same text as terminals."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime

MIN_WIDTH = 40


def width() -> int:
    """The terminal's columns ($COLUMNS wins; 80 when there is no terminal)."""
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


def when(moment: str | datetime | None, *, short: bool = False) -> str:
    """A time (ISO text or datetime) as 2026-12-03 08:01 UTC, or short as 12-03 08:01 for a table
    column whose header says UTC ('-' when absent)."""
    if not moment:
        return "-"
    if isinstance(moment, str):
        text = moment
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return text
    return (moment.astimezone(UTC) if moment.tzinfo else moment).strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M UTC")


def per_hour(usd: float | None) -> str:
    """An hourly price as 12.17 USD/h (or that the price catalog has none)."""
    return "not in the price catalog" if usd is None else f"{usd:.2f} USD/h"


def wrap(text: str, columns: int, indent: int = 0) -> list[str]:
    """Lines of at most `columns` characters, broken at spaces only (a long id stays whole)."""
    lines = textwrap.wrap(text, max(10, columns - indent), break_long_words=False, break_on_hyphens=False)
    return lines or [""]


def paragraph(text: str, columns: int | None = None) -> str:
    """text wrapped at the terminal width, later lines indented by two (an id stays whole)."""
    return "\n  ".join(wrap(text, columns or width(), 2))


def details(rows: Sequence[tuple[str, str]], columns: int | None = None) -> str:
    """'name  value' lines, values wrapped under themselves; a value may hold several lines."""
    columns = columns or width()
    label = max((len(name) for name, _ in rows), default=0) + 2
    out = []
    for name, value in rows:
        lines = [line for part in value.split("\n") for line in wrap(part, columns, label + 2)]
        out.append(f"  {name:<{label}}{lines[0]}")
        out += [" " * (label + 2) + line for line in lines[1:]]
    return "\n".join(out)


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = (), *, upper: bool = True) -> str:
    """An aligned table, two spaces between columns. A header cell may hold several lines
    ("E2E tok/s\nper req"); the last column holds free text and wraps under itself."""
    return "\n".join(line for group in _groups(header, rows, right, upper) for line in group)


def _groups(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int], upper: bool) -> list[list[str]]:
    """columns() as lists of lines: the header's first, then each row's (its last cell wrapped)."""
    heads = [cell.split("\n") for cell in header]
    depth = max(len(h) for h in heads)
    head_rows = [[h[i] if i < len(h) else "" for h in heads] for i in range(depth)]
    cells = head_rows + [list(r) for r in rows]
    sizes = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    start = sum(sizes) + 2 * len(sizes)
    groups: list[list[str]] = [[]]
    for n, row in enumerate(cells):
        fixed = "  ".join(
            cell.rjust(size) if i in right else cell.ljust(size) for i, (cell, size) in enumerate(zip(row, sizes, strict=False))
        )
        last = wrap(row[-1], width() - start) if row[-1] else [""]
        heading = n < depth and upper
        line = (fixed + "  " + last[0]).rstrip()
        group = [line.upper() if heading else line] + [" " * start + (extra.upper() if heading else extra) for extra in last[1:]]
        if n < depth:
            groups[0] += group
        else:
            groups.append(group)
    return groups


def _fits(header: Sequence[str], rows: Sequence[Sequence[str]]) -> bool:
    """Whether the columns before the last, and room for the last's longest word (10 at least, as
    wrap() keeps), fit the terminal."""
    fixed = [
        max(len(part) for cell in [header[i], *(row[i] for row in rows)] for part in cell.split("\n"))
        for i in range(len(header) - 1)
    ]
    word = max((len(w) for cell in [header[-1], *(row[-1] for row in rows)] for w in cell.split()), default=0)
    return sum(fixed) + 2 * len(fixed) + max(10, word) <= width()


def records(header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str | None] = ()) -> str:
    """Each row as its first cell on a line, then 'name  value' lines under it (a table too wide for
    the terminal), each followed by its note."""
    labels = [" ".join(cell.split("\n")) for cell in header[1:]]
    out = []
    for n, row in enumerate(rows):
        out.append(row[0])
        out.append(details(list(zip(labels, row[1:], strict=True))))
        text = notes[n] if n < len(notes) else None
        if text:
            out.append(note(text, prefix="  "))
    return "\n".join(out)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """columns() when they fit the terminal, records() (one row per record) when they do not."""
    return columns_with_notes(header, rows, [None] * len(rows), right)


def columns_with_notes(
    header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str | None], right: Sequence[int] = ()
) -> str:
    """columns() of short cells, each row followed by its note (free text such as an error, wrapped
    to the terminal and indented) when it has one; records() when the columns do not fit."""
    if not _fits(header, rows):
        return records(header, rows, notes)
    groups = _groups(header, rows, right, upper=True)
    out = groups[0]
    for group, text in zip(groups[1:], notes, strict=True):
        out += group
        if text:
            out.append(note(text, prefix="  "))
    return "\n".join(out)


def note(text: str, prefix: str = "", columns: int | None = None) -> str:
    """A paragraph wrapped to the terminal, continuation lines indented under the prefix."""
    lines = wrap(text, columns or width(), len(prefix))
    return "\n".join([prefix + lines[0], *(" " * len(prefix) + line for line in lines[1:])])
