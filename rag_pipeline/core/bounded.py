"""Reading inputs within limits: no line or file read whole unless it is known to be small.

A line over its limit is never held in memory: it is read past in blocks and reported by its
number and size, so that the reader can refuse it and go on with the next line. A whole file is
read only up to its limit plus one byte, so that a file over it is refused without being read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# What is read past at a time in an over-long line.
_SKIP_BLOCK = 1024 * 1024


@dataclass(frozen=True)
class Line:
    """One line of a file: its bytes (with the line break), or None when it was over the limit
    (then `size` is how long it was, line break included)."""

    number: int
    data: bytes | None
    size: int


def bounded_lines(handle: BinaryIO, max_bytes: int) -> Iterator[Line]:
    """The lines of a binary stream, numbered from 1; a line longer than `max_bytes` (its line
    break not counted) comes as `Line(number, None, size)` and is skipped, not kept."""
    number = 0
    while True:
        # The line, its break, and one byte more: enough to see that a line is too long.
        chunk = handle.readline(max_bytes + 2)
        if not chunk:
            return
        number += 1
        whole = chunk.endswith(b"\n") or len(chunk) < max_bytes + 2  # else the line goes on
        if whole and len(chunk.rstrip(b"\r\n")) <= max_bytes:
            yield Line(number, chunk, len(chunk))
            continue
        size = len(chunk)
        while not chunk.endswith(b"\n"):
            chunk = handle.readline(_SKIP_BLOCK)
            if not chunk:
                break
            size += len(chunk)
        yield Line(number, None, size)


def read_limited(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of a file of at most `max_bytes`, or None when it is larger (read no further)."""
    with Path(path).open("rb") as handle:
        data = handle.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def size_text(size: int) -> str:
    """A byte count for a message: 1.5 MB, 64 KB, 300 bytes."""
    if size >= 1024 * 1024:
        return f"{size / 1024 / 1024:,.1f} MB"
    if size >= 1024:
        return f"{size / 1024:,.0f} KB"
    return f"{size} bytes"
