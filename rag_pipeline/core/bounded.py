"""Reading inputs within limits: no line or file read whole unless it is known to be small.

A line over its limit is never held in memory: it is read past in blocks and reported by its
number and size, so that the reader can refuse it and go on with the next line. A whole file is
read only up to its limit plus one byte, so that a file over it is refused without being read.
Files people give us (golden files, imported datasets, run files, query logs, sidecars) are all
read through here: a file over its bound is refused whole with its name and the bound, a line over
its bound is an error of that line, and the rest of the file goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rag_pipeline.core.errors import InputError


class InputTooLargeError(InputError):
    """A file over its size bound (or holding more than its bound of records): refused whole."""


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


def check_file_size(path: Path | str, limit: int, what: str) -> int:
    """The file's size in bytes; InputTooLargeError naming the file, its size and the bound when it is over."""
    size = Path(path).stat().st_size
    if size > limit:
        raise InputTooLargeError(f"{path}: {size:,} bytes, over the {limit:,}-byte bound of a {what}; split it into "
                                 "smaller files")
    return size


def text_lines(path: Path | str, max_line_bytes: int, max_file_bytes: int,
               what: str) -> Iterator[tuple[int, str | None, str | None]]:
    """(line number, text with its line ending or None, why not) for every line of a UTF-8 file.

    The file's size is checked first (`check_file_size`); then each line is read bounded
    (`bounded_lines`): one longer than `max_line_bytes` is skipped unread, one that is not UTF-8 is
    an error of that line. Lines end at "\n" only (a text may hold U+2028); a leading byte-order
    mark is dropped."""
    check_file_size(path, max_file_bytes, what)
    with open(path, "rb") as handle:
        for line in bounded_lines(handle, max_line_bytes):
            if line.data is None:
                yield line.number, None, f"line longer than {max_line_bytes:,} bytes: refused unread"
                continue
            data = line.data.removeprefix(b"\xef\xbb\xbf") if line.number == 1 else line.data
            try:
                yield line.number, data.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                yield line.number, None, f"not UTF-8 text (byte {exc.start + 1} of the line); save the file as UTF-8"
