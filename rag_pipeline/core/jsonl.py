"""JSON Lines files written by people: every record with its line number, errors that name both."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path

from rag_pipeline.core.bounded import bounded_lines, size_text

# One record is a case, a verdict or a report: a line past this is refused, not read.
MAX_RECORD_BYTES = 1024 * 1024


def records(path: Path, error: type[Exception] = ValueError) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line, read a line at a time; `error` names the
    file and line of a line that is not a JSON object, or that is over `MAX_RECORD_BYTES`."""
    with Path(path).open("rb") as handle:
        for line in bounded_lines(handle, MAX_RECORD_BYTES):
            if line.data is None:
                raise error(f"{path} line {line.number}: {size_text(line.size)}, over the {size_text(MAX_RECORD_BYTES)} "
                            "limit for one record; is this the right file?")
            data = line.data
            if line.number == 1 and data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8):]  # spreadsheet exports write one: no part of the first record
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(f"{path} line {line.number}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise error(f"{path} line {line.number}: invalid JSON ({exc.msg}); one object per line") from None
            if not isinstance(value, dict):
                raise error(f"{path} line {line.number}: expected a JSON object, got {type(value).__name__}")
            yield line.number, value
