"""JSON Lines files written by people: every record with its line number, errors that name both."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def records(path: Path, error: type[Exception] = ValueError) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; `error` names the file and line of a line
    that is not a JSON object."""
    # utf-8-sig: a byte-order mark (spreadsheet exports write one) is no part of the first record.
    for number, line in enumerate(Path(path).read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path} line {number}: invalid JSON ({exc.msg}); one object per line") from None
        if not isinstance(value, dict):
            raise error(f"{path} line {number}: expected a JSON object, got {type(value).__name__}")
        yield number, value
