"""Faults of the machine under the index, said by their name: a full disk and a damaged index file.

DuckDB and PostgreSQL report them in their own words ("Could not write file ...: No space left on
device", "not a valid DuckDB database file", and after a failed commit "cannot rollback - no
transaction is active"); the person on call needs the file and what to do. `named_fault` turns such
an error into one sentence; every other error is left as it is. Both are `UnavailableError`s
(`core/errors.py`): the Dagster layer shows their sentence as the failure, and the command line
exits 1 for them (a failed run, not bad input).
"""

from __future__ import annotations

import errno
from pathlib import Path

from rag_pipeline.core.errors import UnavailableError


class StorageFaultError(UnavailableError):
    """The index could not be used because of the machine (its disk, its file), not the input."""


class NoSpaceError(StorageFaultError):
    """No space left on the device that holds the index: nothing was changed."""


class DamagedIndexError(StorageFaultError):
    """The index file is not a whole database (cut short, overwritten)."""


# How the engines word a full disk: the OS's text (DuckDB), PostgreSQL's "could not extend file".
_NO_SPACE = ("no space left on device", "disk full", "could not extend file", "errno 28")
# How DuckDB words a file that is not a whole database (its header, a block or the WAL unreadable).
_DAMAGED = ("not a valid duckdb database file", "corrupt", "checksum", "could not read enough bytes",
            "failed to read database header", "invalid database header")


def _chain(error: BaseException):
    """The error, its causes and contexts, and the notes of each (innermost last)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _engine_error(error: BaseException) -> bool:
    """An error raised by a database engine's client (its words are read; a message of ours, which
    may quote a user's text, is not)."""
    return type(error).__module__.split(".")[0].lstrip("_") in ("duckdb", "psycopg", "psycopg2")


def is_no_space(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) is the disk running out of space."""
    for item in _chain(error):
        if isinstance(item, NoSpaceError) or (isinstance(item, OSError) and item.errno in (errno.ENOSPC, errno.EDQUOT)):
            return True
        if _engine_error(item) and any(words in str(item).lower() for words in _NO_SPACE):
            return True
    return False


def is_damaged(error: BaseException) -> bool:
    """Whether `error` says the database file cannot be read as a database (DuckDB's words)."""
    return any(words in str(item).lower() for item in _chain(error) for words in _DAMAGED
               if type(item).__module__.split(".")[0].lstrip("_") == "duckdb")


def no_space(where: Path | str) -> NoSpaceError:
    """The sentence for a full disk at `where` (the index file or a folder beside it)."""
    return NoSpaceError(f"no space left on device at {where}: free space on that disk and run again; "
                        "what was served before is still served")


def damaged(path: Path | str) -> DamagedIndexError:
    """The sentence for an index file that is not a whole database; an empty one holds nothing to restore."""
    if _is_empty(path):
        return DamagedIndexError(f"the index file {path} is empty (0 bytes, never written by whatever made it): "
                                 "remove it and run `rag-pipeline ingest` to build it")
    return DamagedIndexError(f"the index file {path} is damaged (cut short or overwritten): restore it from a "
                             "backup, or remove it and run `rag-pipeline ingest` to build it again")


def _is_empty(path: Path | str) -> bool:
    try:
        return Path(path).stat().st_size == 0
    except OSError:
        return False


def named_fault(error: BaseException, path: Path | str, file_based: bool = True) -> StorageFaultError | None:
    """The named error for a full disk or a damaged index file behind `error`, or None.
    `file_based`: the index is a file (DuckDB) that can be damaged; a server's errors are not read so."""
    if isinstance(error, StorageFaultError):
        return None  # named already
    if is_no_space(error):
        return no_space(path)
    if file_based and is_damaged(error):
        return damaged(path)
    return None
