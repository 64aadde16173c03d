"""DuckDB in one file: the embedded default, nothing to start.

DuckDB lets one process open a file for writing at a time, so connections are short-lived and a
connect waits while another process holds the file. A released connection stays open for
`LINGER_SECONDS`, for this process's next call (a connect with its close costs 20 to 35 ms, and
a one-page edit's stages made 19 in 1.7 s), then closes. Two runs of one source are kept apart by
a `flock` beside the file, which the OS releases if the process dies. A new file appears whole
(`_create_whole`): DuckDB's own creation races with another process's first open.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from rag_pipeline.core.files import remove_stale_temporaries, temporary_beside
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage.database import BATCH_KINDS, BATCH_ROWS, Database
from rag_pipeline.core.storage.locks import exclusive_source, left_open
from rag_pipeline.core.storage.schema import column_types

if TYPE_CHECKING:  # imported where vectors go in or out: a no-change ingest reads rows only
    import numpy as np

_LOCK_WAIT_SECONDS = 120.0
# The longest sleep between two tries at another process's lock: it is held for a call and at
# most LINGER_SECONDS after it, so a waiter should not sleep through several such turns.
_LOCK_RETRY_MAX_SECONDS = 0.25
# How long a released connection waits for this process's next call before it closes, and so
# the most another process waiting for the file waits beyond this process's last call.
LINGER_SECONDS = 0.5
# Up to this many rows, vectors go in and out as Python lists: importing pyarrow costs about 2 s,
# more than a few rows' vectors as Python floats (a one-page edit writes one to a few).
SMALL_VECTOR_ROWS = 256
# DuckDB's memory limit while the in-memory copy loads (`passing_reads`).
PASSING_READS_MEMORY = "128MB"
_CREATING = threading.Lock()


class DuckDBDatabase(Database):
    dialect = "duckdb"
    vector_type = "FLOAT[]"
    # One statement scores every vector in the engine (`dense_candidates`); from three questions, one
    # read of the vectors for all of them costs less (100k chunks: 0.3 s a statement, 1 s a read).
    scan_once_queries = 3

    def __init__(self, path: Path | str, read_only: bool = False, create: bool = True) -> None:
        super().__init__(read_only, create)
        self.path = Path(path)
        # The released connection waiting for the next call: (connection, its closing timer, pid).
        self._idle: tuple[duckdb.DuckDBPyConnection, threading.Timer, int] | None = None
        # Held while the waiting connection is taken, and while it is closed: `shutdown` waits for
        # a close in progress.
        self._idle_lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        _LINGERING.add(self)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        with self._idle_lock:
            idle = self._idle
            if idle is not None and idle[2] != os.getpid():
                # Forked while a connection waited: the parent's DuckDB (its open file, its cache
                # of open databases) was copied into this process; a connect here would use that
                # copy, and closing it would checkpoint the parent's file. A process that opens
                # the store must start on its own.
                raise RuntimeError(f"{self.path}: this process was forked from one that had the file open; "
                                   "open the store in a process started on its own, not forked")
            self._idle = None
        if idle is not None:
            idle[1].cancel()
            return idle[0]
        if not self.create and not self.path.is_file():
            raise self.missing()  # a reader creates neither the file nor its folder
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.read_only and not self.path.exists():
            self._create_whole()
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        delay = 0.05
        while True:
            try:
                return self._open_file()
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, _LOCK_RETRY_MAX_SECONDS)

    def _create_whole(self) -> None:
        """Make the database file appear with its header written, never empty or half made.

        DuckDB decides "new file or existing one" before it locks the file: a second process's first
        connect in that gap reads an empty file ("exists, but it is not a valid DuckDB database
        file"), or truncates the header the first one just wrote, which then refuses every open. So a
        new file is made under a name of its own and linked into place: a link never replaces a
        file, and the one that loses the race opens the winner's."""
        with _CREATING:  # one name per process for the new file: its threads make it one at a time
            remove_stale_temporaries(self.path)  # left by a process killed while it made one
            spare = temporary_beside(self.path)
            spare.unlink(missing_ok=True)
            try:
                try:
                    duckdb.connect(str(spare)).close()
                except duckdb.Error:
                    return  # a folder not writable, a full disk: the connect to the file itself says so, naming it
                try:
                    os.link(spare, self.path)
                except FileExistsError:
                    pass  # another process or thread made it first
                except OSError:
                    pass  # a file system without hard links: DuckDB creates the file as before
            finally:
                spare.unlink(missing_ok=True)
                spare.with_name(spare.name + ".wal").unlink(missing_ok=True)

    def _open_file(self) -> duckdb.DuckDBPyConnection:
        """A connection to the file; read-only for a reader: no write lock, no write-ahead log, and it
        works on a file and folder nobody may write. One process opens a file one way at a time:
        released connections of other stores of the file waiting in this process are closed to make
        way; if this process is writing it, a reader reads through a connection like the writer's
        (it still writes nothing: `execute` and `insert` refuse on a read-only store)."""
        try:
            return duckdb.connect(str(self.path), read_only=self.read_only)
        except duckdb.ConnectionException as exc:
            if "different configuration" not in str(exc):
                raise
        for other in list(_LINGERING):
            if other is not self and other.path == self.path:
                other.close()
        try:
            return duckdb.connect(str(self.path), read_only=self.read_only)
        except duckdb.ConnectionException as exc:
            if not self.read_only or "different configuration" not in str(exc):
                raise
        return duckdb.connect(str(self.path))

    def _release(self, connection) -> None:
        with self._idle_lock:
            if self._idle is None:
                timer = threading.Timer(LINGER_SECONDS, self._close_idle, args=(connection,))
                timer.daemon = True
                self._idle = (connection, timer, os.getpid())
                self._timers = [t for t in self._timers if t.is_alive()] + [timer]
                timer.start()
                return
        connection.close()  # one connection waits at a time; a second (another thread's) closes

    def _close_idle(self, connection=None) -> None:
        """Close the waiting connection (only if it is still `connection`, when given)."""
        with self._idle_lock:
            idle = self._idle
            if idle is None or (connection is not None and idle[0] is not connection) or idle[2] != os.getpid():
                return
            self._idle = None
            idle[1].cancel()
            idle[0].close()

    def close(self) -> None:
        """Close the connection waiting for a next call now: the file is free for other processes."""
        self._close_idle()

    def shutdown(self) -> None:
        """`close`, and wait until no closing timer runs (at exit).

        A timer thread still inside DuckDB's native close when the interpreter finalizes is ended
        by CPython as it takes the GIL back (pthread_exit); the forced unwinding meets a C++ frame
        of DuckDB that swallows it, and the process aborts ("FATAL: exception not rethrown",
        SIGABRT) after its work was done."""
        self._close_idle()
        for timer in self._timers:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()
        self._timers = []

    def _begin(self, connection) -> None:
        connection.execute("BEGIN")

    def _commit(self, connection) -> None:
        connection.execute("COMMIT")

    def _rollback(self, connection) -> None:
        connection.execute("ROLLBACK")

    def _run(self, connection, sql: str, params: Sequence):
        return connection.execute(sql, list(params))

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence],
               vectors: np.ndarray | None = None, into: str | None = None) -> None:
        import numpy as np

        self._refuse_if_read_only()
        if not rows:
            return
        types = column_types(table, self.vector_type)
        if vectors is None or len(rows) <= SMALL_VECTOR_ROWS:
            # One statement, a list parameter per column: no per-row round trip, no DataFrame.
            selects = ", ".join(f"unnest(?::{types[c]}[])" for c in columns)
            scalar_columns = len(columns) if vectors is None else len(columns) - 1  # the vector column comes last
            values = [[row[i] for row in rows] for i in range(scalar_columns)]
            if vectors is not None:
                # float32 -> Python float -> FLOAT is exact both ways.
                values.append(np.asarray(vectors, dtype=np.float32).tolist())
            self.execute(f"INSERT INTO {into or table} ({', '.join(columns)}) SELECT {selects}", values)
            return
        import pyarrow as pa

        # Vectors go through Arrow: built from the matrix's buffer, not as Python lists of floats.
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        data = {name: [row[i] for row in rows] for i, name in enumerate(columns[:-1])}
        data[columns[-1]] = pa.ListArray.from_arrays(
            pa.array(np.arange(0, matrix.size + 1, matrix.shape[1], dtype=np.int32)), pa.array(matrix.ravel())
        )
        incoming = pa.table(data)
        with self.connection() as connection:
            connection.register("incoming_rows", incoming)
            try:
                connection.execute(f"INSERT INTO {into or table} ({', '.join(columns)}) SELECT * FROM incoming_rows")
            finally:
                connection.unregister("incoming_rows")

    def vector_expression(self, column: str) -> str:
        return column

    def arrow(self, sql: str):
        with self.connection() as connection:
            table = connection.sql(sql).to_arrow_table()
        return table if table.num_rows else None

    def row_batches(self, sql: str, params: Sequence = (), size: int = BATCH_ROWS) -> Iterator[list[tuple]]:
        with self.connection() as connection:
            cursor = connection.execute(sql, list(params))
            while rows := cursor.fetchmany(size):
                yield rows

    @contextmanager
    def passing_reads(self) -> Iterator[None]:
        # DuckDB keeps every block it read in its buffer pool up to its memory limit (80% of RAM by
        # default): a copy's load would leave the vectors' table cached beside the copy. The limit
        # is the database's, lowered for the block (joins and sorts past it spill to disk).
        with self.connection() as connection:
            limit = connection.execute("SELECT current_setting('memory_limit')").fetchone()[0]
            connection.execute(f"SET memory_limit = '{PASSING_READS_MEMORY}'")
            try:
                yield
            finally:
                connection.execute(f"SET memory_limit = '{limit}'")

    def each_batch(self, sql: str, kinds: Sequence[str], consume: Callable[[list[np.ndarray]], None],
                   params: Sequence = (), size: int = BATCH_ROWS) -> None:
        # A streaming Arrow reader: DuckDB produces the result a batch at a time as it is read.
        with self.connection() as connection:
            for batch in connection.sql(sql, params=list(params)).to_arrow_reader(size):
                if batch.num_rows:
                    consume([_batch_column(batch.column(i), kind) for i, kind in enumerate(kinds)])

    def change_stamp(self):
        # Every write touches the file or its write-ahead log: same sizes and times, same data.
        # A file written in the last second is not trusted: file times tick coarsely, and a
        # second write within one tick could keep both.
        stamps = []
        recent = time.time_ns() - 1_000_000_000
        for path in (self.path, self.path.with_name(self.path.name + ".wal")):
            try:
                stat = path.stat()
            except FileNotFoundError:
                stamps.append(None)
                continue
            if stat.st_mtime_ns > recent:
                return None
            stamps.append((stat.st_size, stat.st_mtime_ns))
        return tuple(stamps)

    def copy_cache_key(self) -> str:
        return f"duckdb:{self.path.resolve()}"

    def read_vectors(self, sql: str, params: Sequence = (), most_rows: int | None = None) -> tuple[list, np.ndarray]:
        if most_rows is not None and most_rows <= SMALL_VECTOR_ROWS:
            return super().read_vectors(sql, params)  # a few rows: not worth importing pyarrow
        import numpy as np

        # Through Arrow: one float32 buffer, not a Python list of floats per vector (25x faster).
        with self.connection() as connection:
            table = connection.sql(sql, params=list(params)).to_arrow_table()
        if table.num_rows == 0:
            return [], np.zeros((0, 0), dtype=np.float32)
        keys = table.column(0).to_pylist()
        matrix = arrow_to_numpy(table.column(1).combine_chunks().flatten()).astype(np.float32, copy=False)
        return keys, matrix.reshape(table.num_rows, -1)

    def vector_batches(self, sql: str, params: Sequence = ()) -> Iterator[tuple[list, np.ndarray]]:
        with self.connection() as connection:
            for batch in connection.sql(sql, params=list(params)).to_arrow_reader(BATCH_ROWS):
                if batch.num_rows:
                    yield batch.column(0).to_pylist(), _batch_column(batch.column(1), "vector")

    def dense_candidates(self, query: np.ndarray, depth: int, where: str, params: Sequence,
                         filters: SearchFilters) -> list[str] | None:
        """Exact, in the engine: every filtered vector scored where it lies (no vector leaves the
        file: a switch's probe of one edited page at 100k chunks, 0.3 s against 2.5 s through
        Arrow and numpy), and every chunk as close as the `depth`-th kept, so that ties and float
        rounding at the edge are decided by the caller's exact rescoring."""
        from rag_pipeline.core.vectors import FLOAT32_SCORE_TOLERANCE  # numpy: not for a run that reads rows only

        # A zero vector's cosine is NaN: it scores 0, as in the common rescoring.
        similarity = "list_cosine_similarity(v.vector, ?::FLOAT[])"
        sql = f"""
            WITH scored AS MATERIALIZED (
                SELECT c.chunk_id, CASE WHEN isnan({similarity}) THEN 1.0 ELSE 1.0 - {similarity} END AS distance
                FROM chunks c JOIN vectors v USING (chunk_id) WHERE {where}
            ),
            edge AS (SELECT distance FROM scored ORDER BY distance LIMIT 1 OFFSET ?)
            SELECT chunk_id FROM scored WHERE distance <= coalesce((SELECT distance FROM edge), 'Infinity') + ?
        """
        vector = [float(x) for x in query]
        return [row[0] for row in self.rows(sql, [vector, vector, *params, depth - 1, FLOAT32_SCORE_TOLERANCE])]

    def source_lock(self, source_id: str, timeout_s: float = 1800.0) -> AbstractContextManager:
        return exclusive_source(self.path, source_id, timeout_s)

    def run_left_open(self, source_id: str) -> bool | None:
        return left_open(self.path, source_id)

    def describe(self) -> str:
        return str(self.path)


def _batch_column(column, kind: str) -> np.ndarray:
    """One Arrow column of a batch as numpy (a view where it can be): a list column of floats as a
    matrix of its rows."""
    import numpy as np

    if kind == "vector":
        values = arrow_to_numpy(column.flatten()).astype(np.float32, copy=False)
        if len(values) % len(column):
            raise ValueError("vectors of different lengths in one result")
        return values.reshape(len(column), -1)
    return arrow_to_numpy(column).astype(BATCH_KINDS[kind], copy=False)


# Databases whose released connection may still wait: closed at exit, so that the file is
# checkpointed and its lock released as before, not left to the interpreter's teardown, and no
# timer thread is left in DuckDB's code when it starts (`DuckDBDatabase.shutdown`).
_LINGERING: weakref.WeakSet[DuckDBDatabase] = weakref.WeakSet()


@atexit.register
def _close_lingering() -> None:
    for database in list(_LINGERING):
        database.shutdown()


# Arrow's number types, by the name of the numpy type that reads their buffer as it is.
_ARROW_NUMPY_TYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                      "float": "float32", "double": "float64"}


def arrow_to_numpy(array) -> np.ndarray:
    """A pyarrow array of numbers as numpy, a view of its values' buffer when it has no nulls
    (pyarrow's own `to_numpy` imports pandas on its way: 0.3 s for a command that reads a few rows)."""
    import numpy as np

    name = _ARROW_NUMPY_TYPES.get(str(array.type))
    if name is None or array.null_count:
        return array.to_numpy(zero_copy_only=False)
    dtype = np.dtype(name)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
