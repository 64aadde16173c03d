"""One database behind the store: DuckDB in a file, or PostgreSQL with pgvector.

The store's SQL is written once, with `?` placeholders and constructs both engines share (window
functions, `unnest` of array parameters, `= ANY(...)`, `&&` on arrays). A backend supplies what
differs: connections and transactions, bulk inserts, how vectors are stored and read, dense
search, and the lock that keeps two runs of one source apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage.faults import named_fault
from rag_pipeline.core.storage.schema import MIGRATIONS, SCHEMA_VERSION, TABLES, SchemaError, create_statements

if TYPE_CHECKING:  # imported where vectors are read: a command that reads rows only does not pay for numpy
    import numpy as np

# Rows per batch when a large result is read a batch at a time (`row_batches`, `each_batch`): a
# batch of postings is about 1 MB, of 384-float vectors about 100 MB.
BATCH_ROWS = 65_536
# The kinds of column `each_batch` reads: name -> numpy type (by name) of the batch's array.
BATCH_KINDS = {"int32": "int32", "int64": "int64", "float64": "float64", "vector": "float32"}


class StoreConfigError(InputError):
    """The storage config cannot be used as it is (a missing DSN, say)."""


class NoIndexError(InputError):
    """A command that only reads (or must not create one) found no index where the config points."""


class Database(ABC):
    """A connection factory with one open transaction at a time, and the engine-specific parts.

    `read_only`: the connection cannot write (DuckDB opens the file read-only, PostgreSQL's
    transactions are read-only), nothing is created (no folder, file or schema), and a missing or
    older index is a `NoIndexError` that says to ingest first. `create=False`: a writer that must
    not create an index where there is none."""

    dialect: str
    # The SQL type of a vector column.
    vector_type: str
    # Dense candidates from an approximate index (HNSW): the engine answers, not the in-memory copy.
    approximate: bool = False
    scan_once_queries: int = 32  # from this many questions, an exact search reads the vectors once (search.py)

    def __init__(self, read_only: bool = False, create: bool = True) -> None:
        self.read_only = read_only
        self.create = create and not read_only
        self._active = None
        self._held = None
        self._in_session = False
        self._prepared = False

    # ---- connections and transactions -----------------------------------------------------

    @abstractmethod
    def _connect(self):
        """A new connection (DuckDB waits for another process's file lock)."""

    @abstractmethod
    def _release(self, connection) -> None:
        """Give back a connection obtained from `_connect` outside a transaction."""

    @contextmanager
    def connection(self) -> Iterator:
        """The open transaction's connection, the session's, or a connection for one call."""
        if self._active is not None:
            yield self._active
            return
        if self._held is not None:
            yield self._held
            return
        with self._naming_faults():
            connection = self._connect()
        try:
            with self._naming_faults():
                self._ensure_schema(connection)
        except BaseException:
            self._release(connection)
            raise
        if self._in_session:
            self._held = connection  # the session's first call: later ones share it, its end releases it
            with self._naming_faults():
                yield connection
            return
        try:
            with self._naming_faults():
                yield connection
        finally:
            self._release(connection)

    @contextmanager
    def _naming_faults(self) -> Iterator[None]:
        """A full disk or a damaged index file raised inside becomes its sentence (NoSpaceError,
        DamagedIndexError, naming this database); any other error passes as it is."""
        try:
            yield
        except Exception as error:
            named = named_fault(error, self.describe(), file_based=self.dialect == "duckdb")
            if named is None:
                raise
            raise named from error

    def _rollback_after(self, connection, error: BaseException) -> None:
        """Roll back after `error`, which stays the error raised: an engine that aborted the
        transaction itself (DuckDB after a failed write or commit) refuses the rollback ("cannot
        rollback - no transaction is active"), and that must not hide why the transaction failed."""
        try:
            self._rollback(connection)
        except Exception as rollback_error:  # noqa: BLE001 - the first error is the one to report
            error.add_note(f"(the rollback after it failed too: {rollback_error})")

    @contextmanager
    def session(self) -> Iterator[None]:
        """Calls inside the block share one connection, each still in its own transaction (or in
        the block's transactions): for a run of reads and writes with no long work between them,
        since a DuckDB connect costs 15 to 30 ms. The connection opens at the first call (a block
        with nothing to write opens none). Keep parsing and encoding outside: on DuckDB an open
        connection holds the file's lock, which other processes wait for."""
        if self._active is not None or self._in_session:
            yield
            return
        self._in_session = True
        try:
            yield
        finally:
            self._in_session = False
            held, self._held = self._held, None
            if held is not None:
                self._release(held)

    @contextmanager
    def transaction(self) -> Iterator:
        """Every call inside the block shares one transaction: committed together at its end, rolled
        back together by an exception (or by the death of the process). A nested call joins it."""
        if self._active is not None:
            yield self._active
            return
        with self.connection() as connection:
            self._begin(connection)
            self._active = connection
            try:
                yield connection
                self._commit(connection)
            except BaseException as error:
                self._rollback_after(connection, error)
                raise
            finally:
                self._active = None

    @contextmanager
    def scratch(self) -> Iterator:
        """A transaction that is always rolled back: what the index would answer if it were changed
        (a past state, a counterfactual), read and then forgotten. Not inside another transaction."""
        if self._active is not None:
            raise RuntimeError("a scratch transaction cannot be opened inside another transaction")
        with self.connection() as connection:
            self._begin(connection)
            self._active = connection
            try:
                yield connection
            finally:
                self._active = None
                self._rollback(connection)

    def _ensure_schema(self, connection) -> None:
        if not self._prepared:
            if self.read_only or not self.create:
                self._check_readable(connection)
            if not self.read_only:
                self._prepare_schema(connection)
            self._prepared = True

    # ---- the schema: created, brought forward, or checked before a reader goes on ---------------

    def _prepare_schema(self, connection) -> None:
        """Create missing tables and bring an older database forward, in one transaction.

        A database already at this version with every table is left alone: no DDL at all, since even
        `CREATE ... IF NOT EXISTS` takes table locks that would deadlock with other processes'
        switches. One at this version but missing a table (made by a build from between two layout
        changes) gets the missing tables."""
        self._begin(connection)
        try:
            if self._schema_present(connection) and self._complete_schema(*self._schema_state(connection)):
                self._commit(connection)
                return
            self._lock_schema(connection)
            version, tables = self._schema_state(connection)
            if self._complete_schema(version, tables):  # another process prepared it while we waited for the lock
                self._commit(connection)
                return
            if version is not None and version > SCHEMA_VERSION:
                raise SchemaError(
                    f"{self.describe()} has schema version {version}, newer than this rag_pipeline's {SCHEMA_VERSION}: "
                    "upgrade rag_pipeline"
                )
            # Missing tables first, in the newest layout (a migration may fill one from an old table).
            for statement in create_statements(self.vector_type, self.dialect) + self.schema_statements():
                self._run(connection, statement, ())
            if version is not None and version < SCHEMA_VERSION:
                for from_version in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[from_version]:
                        self._run(connection, statement, ())
            self._run(connection, "DELETE FROM schema_version", ())
            self._run(connection, "INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            self._commit(connection)
        except BaseException as error:
            self._rollback_after(connection, error)
            raise

    def _check_readable(self, connection) -> None:
        """Before a reader (or a writer that must not create an index) goes on: the index exists, and a
        reader finds it at this schema version (it writes nothing, so an older index is brought forward
        by an ingestion first). NoIndexError for a missing, empty or older index; SchemaError for a
        newer one."""
        if not self._schema_present(connection):
            raise self.missing()
        version, _ = self._schema_state(connection)
        if version is None:
            raise self.missing()
        if version > SCHEMA_VERSION:
            raise SchemaError(f"{self.describe()} has schema version {version}, newer than this rag_pipeline's {SCHEMA_VERSION}: "
                              "upgrade rag_pipeline")
        if version < SCHEMA_VERSION and self.read_only:
            raise NoIndexError(f"the index at {self.describe()} was written by an older rag_pipeline (schema version {version}): "
                               "run `rag-pipeline ingest` once to bring it forward, then this command")

    def _schema_state(self, connection) -> tuple[int | None, set[str]]:
        """(schema version, table names): version 1 for a DuckDB file from before the version table,
        None when empty."""
        tables = {r[0] for r in self._fetch(self._run(
            connection, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()", ()))}
        if "schema_version" in tables:
            rows = self._fetch(self._run(connection, "SELECT version FROM schema_version", ()))
            if rows:
                return int(rows[0][0]), tables
        return (1 if "manifest" in tables else None), tables

    @staticmethod
    def _complete_schema(version: int | None, tables: set[str]) -> bool:
        return version == SCHEMA_VERSION and set(TABLES) <= tables

    def missing(self) -> NoIndexError:
        """The error of a reading command that finds no index."""
        return NoIndexError(f"no index at {self.describe()}: run `rag-pipeline ingest` first")

    @abstractmethod
    def _begin(self, connection) -> None: ...

    @abstractmethod
    def _commit(self, connection) -> None: ...

    @abstractmethod
    def _rollback(self, connection) -> None: ...

    # ---- statements ------------------------------------------------------------------------

    @abstractmethod
    def _run(self, connection, sql: str, params: Sequence):
        """Execute one statement on `connection`; return a cursor (or None for no rows)."""

    def execute(self, sql: str, params: Sequence = ()) -> None:
        """Run a statement that changes something (reads go through rows, dicts and value)."""
        self._refuse_if_read_only()
        with self.connection() as connection:
            self._run(connection, sql, params)

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise PermissionError(f"{self.describe()} is open read-only: a reading command writes nothing")

    def rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with self.connection() as connection:
            return [tuple(row) for row in self._fetch(self._run(connection, sql, params))]

    def dicts(self, sql: str, params: Sequence = ()) -> list[dict]:
        with self.connection() as connection:
            cursor = self._run(connection, sql, params)
            columns = [d[0] for d in cursor.description]
            return [dict(zip(columns, row)) for row in self._fetch(cursor)]

    def value(self, sql: str, params: Sequence = ()):
        rows = self.rows(sql, params)
        return rows[0][0] if rows else None

    def _fetch(self, cursor) -> list:
        return cursor.fetchall()

    @abstractmethod
    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence],
               vectors: np.ndarray | None = None, into: str | None = None) -> None:
        """Bulk insert rows (values in `columns` order, typed as in `table`) into `into` or `table`.
        With `vectors`, the last of `columns` is a vector column and row i gets `vectors[i]`."""

    def insert_missing(self, table: str, columns: Sequence[str], rows: Sequence[Sequence], key: Sequence[str],
                       vectors: np.ndarray | None = None) -> None:
        """Like `insert`, but a row whose `key` is already in the table (or earlier in `rows`) is
        skipped: two sources' runs caching the same text never make two rows."""
        if not rows:
            return
        incoming, names = f"incoming_{table}", ", ".join(columns)
        match = " AND ".join(f"t.{k} = i.{k}" for k in key)
        with self.transaction():
            self.execute(f"DROP TABLE IF EXISTS {incoming}")
            self.execute(f"CREATE TEMP TABLE {incoming} AS SELECT {names} FROM {table} LIMIT 0")
            self.insert(table, columns, rows, vectors, into=incoming)
            self.execute(
                f"INSERT INTO {table} ({names}) SELECT {names} FROM "
                f"(SELECT *, row_number() OVER (PARTITION BY {', '.join(key)}) AS copy FROM {incoming}) i "
                f"WHERE copy = 1 AND NOT EXISTS (SELECT 1 FROM {table} t WHERE {match}){self._on_conflict(key)}"
            )
            self.execute(f"DROP TABLE {incoming}")

    def _on_conflict(self, key: Sequence[str]) -> str:
        """The clause that makes `insert_missing` safe against a concurrent writer ('' when the
        engine admits one writer at a time)."""
        return ""

    def arrow(self, sql: str):
        """A query's result as a pyarrow Table (DuckDB: without a Python object per row)."""
        import pyarrow as pa

        rows = self.dicts(sql)
        if not rows:
            return None
        return pa.table({name: [r[name] for r in rows] for name in rows[0]})

    def row_batches(self, sql: str, params: Sequence = (), size: int = BATCH_ROWS) -> Iterator[list[tuple]]:
        """`sql`'s rows, `size` at a time, for results too large to hold as Python rows at once
        (here: read whole, then sliced; the engines fetch a batch at a time). Run no other
        statement of this store until the iteration ends."""
        rows = self.rows(sql, params)
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    @contextmanager
    def passing_reads(self) -> Iterator[None]:
        """Reads inside the block pass through once (the in-memory copy's load): the engine need not
        keep what it read in its own cache (DuckDB: its buffer pool would hold a second copy)."""
        yield

    def each_batch(self, sql: str, kinds: Sequence[str], consume: Callable[[list[np.ndarray]], None],
                   params: Sequence = (), size: int = BATCH_ROWS) -> None:
        """Call `consume` with each batch of `sql`'s rows as numpy columns, one per `kinds` entry
        (BATCH_KINDS; "vector" is a float32 matrix, a row per result row; no NULLs). Tens of
        millions of rows pass without a Python object per row (the engines), and without the whole
        result in memory. The arrays may be views of the batch: `consume` copies what it keeps."""
        import numpy as np

        for rows in self.row_batches(sql, params, size):
            consume([np.asarray([row[i] for row in rows], dtype=BATCH_KINDS[kind]) for i, kind in enumerate(kinds)])

    def change_stamp(self):
        """Something that changes whenever the database may have changed, read without a query
        (DuckDB: its files' sizes and times), or None when only a query can tell."""
        return None

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction of this store is open (what it reads may yet be rolled back)."""
        return self._active is not None

    def copy_cache_key(self) -> str | None:
        """What names this database in the cache of search copies (memory_cache.py), or None: its
        copies are read into memory each time (an engine whose served versions could be shared by
        databases that differ)."""
        return None

    # ---- vectors ---------------------------------------------------------------------------

    @abstractmethod
    def vector_expression(self, column: str) -> str:
        """SQL that reads a vector column as an array of floats."""

    def read_vectors(self, sql: str, params: Sequence = (), most_rows: int | None = None) -> tuple[list, np.ndarray]:
        """(first column of each row, float32 matrix of the second): `sql` selects (key, vector);
        `most_rows` is how many rows it can return at most, when the caller knows."""
        import numpy as np

        rows = self.rows(sql, params)
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [r[0] for r in rows], np.asarray([r[1] for r in rows], dtype=np.float32)

    def vector_batches(self, sql: str, params: Sequence = ()) -> Iterator[tuple[list, np.ndarray]]:
        """`read_vectors` a batch of rows at a time, for a scan of every vector (here: one batch)."""
        keys, matrix = self.read_vectors(sql, params)
        if keys:
            yield keys, matrix

    @abstractmethod
    def dense_candidates(self, query: np.ndarray, depth: int, where: str, params: Sequence,
                         filters: SearchFilters) -> list[str] | None:
        """Chunk ids of the engine's own nearest neighbours of one query under a filter, or None
        when the engine has no index search of its own (the caller then scores every vector)."""

    def schema_statements(self) -> list[str]:
        """Statements of the engine's own run once the tables exist."""
        return []

    def ensure_vector_index(self) -> None:
        """Build the engine's vector index if one is configured and missing (after a switch)."""

    def _schema_present(self, connection) -> bool:
        """Whether the namespace of the tables exists (a DuckDB file always has its own)."""
        return True

    def _lock_schema(self, connection) -> None:
        """Keep two processes from preparing the schema at once (their CREATEs would collide)."""

    # ---- concurrency -----------------------------------------------------------------------

    @abstractmethod
    def source_lock(self, source_id: str, timeout_s: float = 1800.0) -> AbstractContextManager:
        """Held for a whole ingestion of one source: two runs of a source would overwrite each
        other's staging."""

    def run_left_open(self, source_id: str) -> bool | None:
        """Whether an ingestion holds `source_id`'s lock now or died holding it (None: the backend
        keeps no trace of a dead holder)."""
        return None

    def close(self) -> None:
        """Release what the database holds open between calls (PostgreSQL: its connection;
        DuckDB: a released connection still waiting for the next call)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the data lives, for messages (a file path, or a database and schema; no secret)."""
