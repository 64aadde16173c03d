"""The one renderer for what people read: markdown tables and inline text, terminal and log lines.

Much of what reports show was written by others: file names, parser messages, golden questions,
production queries. Rendered as markdown (report files, Dagster metadata) such text could break a
table row, open an HTML tag, or become a link. Every piece of untrusted text therefore goes
through `inline` (markdown), `printable` (plain text: terminals, logs) or `safe_json` (code
blocks), and every table through `table`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence

# Longest cell, in characters of the original text, before it is cut with an ellipsis.
MAX_CELL_CHARS = 200
MAX_TABLE_ROWS = 50

_CONTROL_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0/C1 controls, DEL, and the bidirectional overrides that can make text read differently from
# what it is ("Trojan source").
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
# Characters that start markdown structure anywhere in a line: code spans, emphasis, links and
# images (`[`), table cells, strikethrough, and the escape character itself. (`_` is left alone:
# it is common in ids and cannot emphasise inside a word.)
_MARKDOWN_INLINE = re.compile(r"([\\`*\[\]|~])")
# Characters that start a block only at the beginning of a line (headings, quotes, lists).
_MARKDOWN_LINE_START = re.compile(r"^([#>+\-=]|\d+[.)])")
# URL schemes that a renderer could turn into a link or run; neutralised by encoding the colon.
_SCHEME = re.compile(r"(?i)(javascript|vbscript|data|file|https?|ftp|mailto)\s*:")
_WWW = re.compile(r"(?i)\bwww\.")
# Event-handler attributes (onerror=, onload=...): inert once `<` is encoded, and encoded anyway.
_EVENT_HANDLER = re.compile(r"(?i)\b(on[a-z]+)\s*=")


class Markdown(str):
    """Text that is already safe markdown (built by our code from trusted parts): passed through as is."""


def printable(value: object) -> str:
    """Text for a terminal or a log line: newlines, tabs and control characters shown escaped."""
    text = str(value)
    return _UNPRINTABLE.sub(lambda m: _CONTROL_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def printable_lines(value: object) -> str:
    """`printable` line by line: a summary of several lines prints as lines, each made safe."""
    return "\n".join(printable(line) for line in str(value).split("\n"))


def plain_text(value: object) -> str:
    """Text a person reads in the UI (descriptions, text metadata, table cells): its lines and tabs
    kept as they are, every other control character escaped (a carriage return included: a
    Windows line end becomes a plain one)."""
    text = str(value).replace("\r\n", "\n")
    return _UNPRINTABLE.sub(
        lambda m: m.group() if m.group() in "\n\t" else _CONTROL_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def one_line(value: object) -> str:
    """Text for a single line (a run tag): its lines joined with " / ", control characters escaped."""
    return printable(" / ".join(line.strip() for line in str(value).replace("\r\n", "\n").split("\n") if line.strip()))


def cut(text: str, max_chars: int | None) -> str:
    """`text` shortened to `max_chars` characters, the cut marked with an ellipsis."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max(max_chars - 1, 0)] + "…"


def inline(value: object, max_chars: int | None = None, line_start: bool = True) -> str:
    """Untrusted text as inert inline markdown: one line, no HTML, no link, no table break.

    Control characters are escaped (`\\n`), HTML special characters become entities, markdown
    punctuation is backslash-escaped, and URL schemes and event-handler attributes are broken up
    so that no renderer makes them live. A long text is cut before escaping. `line_start`: the
    text may begin a line, so a leading `#`, `-`, `>`... is escaped too (not needed in a cell).
    """
    if isinstance(value, Markdown):
        return value
    text = cut(printable(value), max_chars)
    text = "".join(_HTML.get(ch, ch) for ch in text)
    text = _MARKDOWN_INLINE.sub(r"\\\1", text)
    if line_start:
        text = _MARKDOWN_LINE_START.sub(r"\\\1", text)
    text = _SCHEME.sub(lambda m: m.group(1) + "&#58;", text)
    text = _WWW.sub(lambda m: m.group()[:3] + "&#46;", text)
    return _EVENT_HANDLER.sub(lambda m: m.group(1) + "&#61;", text)


def number(value: float | int | None, digits: int = 3) -> str:
    """A number for reading: integers as they are, floats rounded; missing values as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def cell(value: object, max_chars: int | None = MAX_CELL_CHARS) -> str:
    """One table cell: numbers formatted, `Markdown` as it is, everything else escaped as untrusted text."""
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return number(value)
    if isinstance(value, (list, tuple, set)):
        value = ", ".join(str(v) for v in value)
    return inline(value, max_chars, line_start=False)


def table(
    rows: Sequence[Mapping | Sequence],
    columns: Sequence[str],
    *,
    headers: Sequence[str] | None = None,
    limit: int | None = MAX_TABLE_ROWS,
    max_cell_chars: int | None = MAX_CELL_CHARS,
    formats: Mapping[str, Callable[[object], str]] | None = None,
    empty: str = "_none_",
) -> str:
    """A markdown table of `rows` (mappings by column name, or sequences in column order).

    Every cell is escaped (see `cell`), so a row always has exactly its columns; `formats` maps a
    column to a function of the value (its result is escaped too, unless it is `Markdown`). Rows
    beyond `limit` are counted in a line under the table.
    """
    if not rows:
        return empty
    formats = formats or {}
    titles = headers or columns
    lines = ["| " + " | ".join(cell(t) for t in titles) + " |", "|" + "---|" * len(columns)]
    shown = rows if limit is None else rows[:limit]
    for row in shown:
        values = [row.get(c) for c in columns] if isinstance(row, Mapping) else list(row)
        values += [None] * (len(columns) - len(values))
        cells = [cell(formats[c](v) if c in formats else v, max_cell_chars) for c, v in zip(columns, values)]
        lines.append("| " + " | ".join(cells) + " |")
    if limit is not None and len(rows) > limit:
        lines.append(f"\n… and {len(rows) - limit} more")
    return "\n".join(lines)


def bullets(items: Sequence[object], limit: int | None = MAX_TABLE_ROWS, max_chars: int | None = MAX_CELL_CHARS) -> str:
    """A markdown list of untrusted items."""
    if not items:
        return "_none_"
    shown = items if limit is None else items[:limit]
    lines = [f"- {inline(item, max_chars)}" for item in shown]
    if limit is not None and len(items) > limit:
        lines.append(f"- … and {len(items) - limit} more")
    return "\n".join(lines)


def safe_json(value: object, indent: int | None = 1) -> str:
    """JSON for a fenced code block: `<`, `>`, `&` and backticks as \\u escapes (still valid JSON),
    so that neither a renderer nor a reader of the raw file meets live markup."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    for ch in "<>&`":
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    return _EVENT_HANDLER.sub(lambda m: m.group(1) + "\\u003d", _SCHEME.sub(lambda m: m.group(1) + "\\u003a", text))


def text_table(rows: Sequence[Mapping | Sequence], columns: Sequence[str], *, headers: Sequence[str] | None = None,
               max_cell_chars: int | None = 60) -> str:
    """A plain-text table for a terminal or a CI log: columns aligned, numbers on the right.

    Cells are `printable` text (control characters escaped), never markdown: no backslash
    escapes and no HTML entities, which a terminal would show as they are (`-&gt;`)."""

    def plain(value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, (int, float)) and not isinstance(value, Markdown):
            return number(value)
        if isinstance(value, (list, tuple, set)):
            value = ", ".join(str(v) for v in value)
        return cut(printable(value), max_cell_chars)

    titles = [plain(t) for t in (headers or columns)]
    body = []
    numeric = [True] * len(columns)
    for row in rows:
        values = [row.get(c) for c in columns] if isinstance(row, Mapping) else list(row)
        values += [None] * (len(columns) - len(values))
        for i, v in enumerate(values[: len(columns)]):
            if v is not None and not (isinstance(v, (int, float)) or str(v) in ("", "–")):
                numeric[i] = False
        body.append([plain(v) for v in values[: len(columns)]])
    widths = [max([len(t)] + [len(r[i]) for r in body]) for i, t in enumerate(titles)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(titles), "  ".join("-" * w for w in widths), *(line(r) for r in body)])
