"""Reading files people give us in bounded memory: a size checked before anything is read, then a
line at a time, each line bounded. Golden files, imported datasets and run files are read so: a
file over its bound is refused whole with its name and the bound, a line over its bound is an
error of that line (skipped unread), and the rest of the file goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


class InputTooLargeError(ValueError):
    """A file over its size bound (or holding more than its bound of records): refused whole."""


def check_file_size(path: Path | str, limit: int, what: str) -> int:
    """The file's size in bytes; InputTooLargeError naming the file, its size and the bound when it is over."""
    size = Path(path).stat().st_size
    if size > limit:
        raise InputTooLargeError(f"{path}: {size:,} bytes, over the {limit:,}-byte bound of a {what}; split it into "
                                 "smaller files")
    return size


def bounded_lines(path: Path | str, max_line_bytes: int, max_file_bytes: int,
                  what: str) -> Iterator[tuple[int, str | None, str | None]]:
    """(line number, text with its line ending or None, why not) for every line of a UTF-8 file.

    The file's size is checked first (`check_file_size`); then each line is read with a bound: one
    longer than `max_line_bytes` is skipped to its end in bounded pieces (its error names the
    bound), one that is not UTF-8 is an error of that line. Lines end at "\n" only (a text may hold
    U+2028); a leading byte-order mark is dropped."""
    check_file_size(path, max_file_bytes, what)
    with open(path, "rb") as handle:
        number = 0
        while True:
            data = handle.readline(max_line_bytes + 1)
            if not data:
                return
            number += 1
            if len(data) > max_line_bytes and not data.endswith(b"\n"):
                while data and not data.endswith(b"\n"):
                    data = handle.readline(max_line_bytes)
                yield number, None, f"line longer than {max_line_bytes:,} bytes: refused unread"
                continue
            if number == 1:
                data = data.removeprefix(b"\xef\xbb\xbf")
            try:
                yield number, data.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                yield number, None, f"not UTF-8 text (byte {exc.start + 1} of the line); save the file as UTF-8"
