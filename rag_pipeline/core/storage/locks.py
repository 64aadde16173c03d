"""One ingestion of a source at a time, across processes on this machine.

A source's staging tables carry its incremental state from one run to the next, so two runs
of the same source interleaving their stages would overwrite each other's staging and fail
coverage (or worse, publish a mix). DuckDB's file lock only serializes single statements'
connections, not a whole run, so the run takes an advisory `flock` on a per-source lock file
next to the database. The OS releases it when the process dies, so a crashed run never
leaves a source locked. Runs launched by the Dagster daemon are serialized by the run tag
limit on `dagster/partition` in dagster.yaml instead (their steps may live in separate processes).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from rag_pipeline.core.errors import UnavailableError
from rag_pipeline.core.storage.faults import named_fault


class SourceBusyError(UnavailableError):
    """Another process kept the source's ingestion lock for longer than we agreed to wait."""


def lock_path(database: Path, source_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in source_id)
    return database.parent / f"{database.name}.locks" / f"{safe}.lock"


@contextmanager
def exclusive_source(database: Path, source_id: str, timeout_s: float = 1800.0, poll_s: float = 0.5) -> Iterator[None]:
    """Hold the ingestion lock of `source_id` in `database`; wait up to `timeout_s` for it."""
    path = lock_path(database, source_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered: a write that finds the disk full fails where it is made, not again at every
        # later seek and at close, each time hiding the first.
        handle = open(path, "a+b", buffering=0)  # noqa: SIM115 - closed below, after the lock is released
    except OSError as error:
        raise (named_fault(error, path.parent) or error) from error
    with handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().decode(errors="replace").strip() or "an unknown process"
                    raise SourceBusyError(
                        f"source {source_id!r} is being ingested by {holder} (lock {path}); waited {timeout_s:.0f} s. "
                        "Wait for that run to finish, or stop it; the lock is released when its process exits."
                    ) from None
                time.sleep(poll_s)
        try:
            handle.truncate(0)
            try:
                handle.write(f"pid {os.getpid()} since {datetime.now(timezone.utc).isoformat(timespec='seconds')}\n".encode())
            except OSError as error:
                raise (named_fault(error, path.parent) or error) from error
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def left_open(database: Path, source_id: str) -> bool:
    """Whether an ingestion of `source_id` holds its lock now, or died holding it: the lock file
    still names a holder (a holder that ends, normally or by an exception, empties it; a kill -9
    leaves it). False when no ingestion ever took it."""
    path = lock_path(database, source_id)
    try:
        handle = open(path)
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # held now
        try:
            return bool(handle.read().strip())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

