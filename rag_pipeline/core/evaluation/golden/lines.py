"""A golden file's lines, as every reader of one reads them: streamed, bounded, comments and a
byte-order mark skipped, each line a JSON object or an error of that line."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.core import bounded
from rag_pipeline.core.evaluation.golden.cases import GoldenSetError

# Bounds of what a golden file may hold: a file or case count over them is refused as a whole, a
# line over its bound is an error of that line. Generous for hand-written and imported sets (the
# largest BEIR test sets hold about 10,000 queries).
MAX_GOLDEN_FILE_BYTES = 64 * 1024 * 1024
MAX_GOLDEN_LINE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class GoldenLine:
    """One line of a golden JSONL file, as `read_golden_lines` gives it."""

    number: int
    text: str  # as written, with its line ending (a leading byte-order mark removed)
    record: dict | None  # the JSON object; None for a blank line, a comment or an invalid line
    error: str | None = None  # why the line is not a JSON object

    @property
    def skipped(self) -> bool:
        """A blank line or a `#` comment: no case, no error."""
        return self.record is None and self.error is None


def check_file_size(path: Path | str, limit: int | None = None, what: str = "golden file") -> int:
    """`bounded.check_file_size` with the golden file's bound (MAX_GOLDEN_FILE_BYTES) by default."""
    return bounded.check_file_size(path, MAX_GOLDEN_FILE_BYTES if limit is None else limit, what)


def bounded_lines(path: Path | str, max_line_bytes: int | None = None, max_file_bytes: int | None = None,
                  what: str = "golden file") -> Iterator[tuple[int, str | None, str | None]]:
    """`bounded.text_lines` with the golden file's bounds by default (MAX_GOLDEN_LINE_BYTES,
    MAX_GOLDEN_FILE_BYTES, read when called)."""
    return bounded.text_lines(path, MAX_GOLDEN_LINE_BYTES if max_line_bytes is None else max_line_bytes,
                              MAX_GOLDEN_FILE_BYTES if max_file_bytes is None else max_file_bytes, what)


def read_golden_lines(path: Path | str) -> Iterator[GoldenLine]:
    """Every line of a golden JSONL file, blank and `#` lines marked `skipped`, a UTF-8 BOM ignored;
    streamed and bounded (`bounded_lines`)."""
    for number, text, error in bounded_lines(path):
        yield GoldenLine(number, "", None, error) if text is None else _golden_line(number, text)


def golden_lines(text: str) -> Iterator[GoldenLine]:
    """`read_golden_lines` of a golden file's text (a kept snapshot, say).

    Lines end at "\n" only: a question may hold U+2028 and the like, which `str.splitlines` would
    break a JSON line at."""
    text = text.removeprefix("\ufeff")
    for number, line in enumerate(io.StringIO(text, newline="\n"), start=1):
        yield _golden_line(number, line)


def _golden_line(number: int, line: str) -> GoldenLine:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return GoldenLine(number, line, None)
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        return GoldenLine(number, line, None, f"invalid JSON ({exc.msg} at column {exc.colno}); one object a line, "
                                              "comments start with #")
    except RecursionError:
        return GoldenLine(number, line, None, "invalid JSON (nested too deeply)")
    if not isinstance(raw, dict):
        return GoldenLine(number, line, None, f"expected a JSON object, got {type(raw).__name__}")
    return GoldenLine(number, line, raw)


def golden_records(path: Path | str, error: type[Exception] = GoldenSetError) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each object line of a JSONL file, read by the golden-file rule
    (comments, BOM); `error`, naming the file and line, at the first line that is not an object."""
    for line in read_golden_lines(path):
        if line.error is not None:
            raise error(f"{path} line {line.number}: {line.error}")
        if line.record is not None:
            yield line.number, line.record
