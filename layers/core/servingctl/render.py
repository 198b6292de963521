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
    heads = [cell.split("\n") for cell in header]
    depth = max(len(h) for h in heads)
    head_rows = [[h[i] if i < len(h) else "" for h in heads] for i in range(depth)]
    cells = head_rows + [list(r) for r in rows]
    sizes = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    start = sum(sizes) + 2 * len(sizes)
    out = []
    for n, row in enumerate(cells):
        fixed = "  ".join(
            cell.rjust(size) if i in right else cell.ljust(size) for i, (cell, size) in enumerate(zip(row, sizes, strict=False))
        )
        last = wrap(row[-1], width() - start) if row[-1] else [""]
        heading = n < depth and upper
        line = (fixed + "  " + last[0]).rstrip()
        out.append(line.upper() if heading else line)
        out += [" " * start + (extra.upper() if heading else extra) for extra in last[1:]]
    return "\n".join(out)


def columns_with_notes(
    header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str | None], right: Sequence[int] = ()
) -> str:
    """columns() of one-line header and short cells, each row followed by its note (free text such
    as an error, wrapped to the terminal and indented) when it has one."""
    lines = columns(header, rows, right).split("\n")
    out = lines[:1]
    for line, text in zip(lines[1:], notes, strict=True):
        out.append(line)
        if text:
            out.append(note(text, prefix="  "))
    return "\n".join(out)


def note(text: str, prefix: str = "", columns: int | None = None) -> str:
    """A paragraph wrapped to the terminal, continuation lines indented under the prefix."""
    lines = wrap(text, columns or width(), len(prefix))
    return "\n".join([prefix + lines[0], *(" " * len(prefix) + line for line in lines[1:])])
