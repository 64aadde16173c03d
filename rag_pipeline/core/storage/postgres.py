"""PostgreSQL with pgvector: the store for many writers and many machines.

Every table lives in one schema (`storage.pg_schema`), so deployments (and tests) can share a
server. Vectors are pgvector `vector`s; dense search asks the server for its nearest neighbours
(an exact scan by default, the HNSW index when `storage.vector_index: hnsw`), which the caller
rescores the way every backend scores, so a metric never depends on the engine. Two runs of one
source are kept apart by a session advisory lock, which the server releases if the client dies.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from io import BytesIO

import numpy as np

from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage.database import BATCH_KINDS, BATCH_ROWS, Database, StoreConfigError
from rag_pipeline.core.storage.locks import SourceBusyError
from rag_pipeline.core.storage.schema import column_types
from rag_pipeline.core.vectors import FLOAT32_SCORE_TOLERANCE

_PLACEHOLDER = re.compile(r"\?")
_EPOCH_2000 = datetime(2000, 1, 1)
# HNSW candidates per query beyond k, before the common rescoring.
CANDIDATE_MARGIN = 16
HNSW_INDEX = "vectors_hnsw_idx"


class PostgresDatabase(Database):
    dialect = "postgres"
    vector_type = "vector"

    def __init__(self, dsn: str, schema: str = "rag_pipeline", vector_index: str = "exact",
                 hnsw_m: int = 16, hnsw_ef_construction: int = 64, hnsw_ef_search: int = 100,
                 read_only: bool = False, create: bool = True) -> None:
        super().__init__(read_only, create)
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
            raise StoreConfigError(f"storage.pg_schema {schema!r}: use lower-case letters, digits and _")
        self.dsn = dsn
        self.schema = schema
        self.vector_index = vector_index
        self.hnsw = {"m": hnsw_m, "ef_construction": hnsw_ef_construction, "ef_search": hnsw_ef_search}
        self.approximate = vector_index == "hnsw"
        self._connection = None

    # ---- connections -----------------------------------------------------------------------

    def _open(self):
        import psycopg2

        connection = psycopg2.connect(self.dsn)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f"SET search_path TO {self.schema}, public")
            if self.read_only:
                # The server refuses every write of this session: a reader cannot change the index.
                cursor.execute("SET default_transaction_read_only = on")
        return connection

    def _connect(self):
        # One connection per store, kept: a connect costs a round trip and a backend process.
        if self._connection is None or self._connection.closed:
            self._connection = self._open()
        return self._connection

    def _release(self, connection) -> None:
        pass

    def close(self) -> None:
        if self._connection is not None and not self._connection.closed:
            self._connection.close()

    def _begin(self, connection) -> None:
        self._run(connection, "BEGIN", ())

    def _commit(self, connection) -> None:
        self._run(connection, "COMMIT", ())

    def _rollback(self, connection) -> None:
        if not connection.closed:
            self._run(connection, "ROLLBACK", ())

    def _run(self, connection, sql: str, params: Sequence):
        cursor = connection.cursor()
        # psycopg2 formats with %: literal percent signs double, `?` placeholders become %s.
        cursor.execute(_PLACEHOLDER.sub("%s", sql.replace("%", "%%")), tuple(params))
        return cursor

    # ---- inserts ---------------------------------------------------------------------------

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence],
               vectors: np.ndarray | None = None, into: str | None = None) -> None:
        self._refuse_if_read_only()
        if not rows:
            return
        types = column_types(table, self.vector_type)
        with self.connection() as connection:
            if vectors is not None:
                # COPY in binary: a million 384-dimension vectors are not formatted as text.
                payload = _binary_copy(rows, [types[c] for c in columns[:-1]], vectors)
                with connection.cursor() as cursor:
                    cursor.copy_expert(f"COPY {into or table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT binary)", payload)
                return
            from psycopg2.extras import execute_values

            template = "(" + ", ".join(f"%s::{types[c]}" for c in columns) + ")"
            with connection.cursor() as cursor:
                execute_values(cursor, f"INSERT INTO {into or table} ({', '.join(columns)}) VALUES %s", [tuple(r) for r in rows],
                               template=template, page_size=1000)

    def _on_conflict(self, key: Sequence[str]) -> str:
        # Concurrent writers: the unique index on the key (schema.UNIQUE_KEYS) decides.
        return f" ON CONFLICT ({', '.join(key)}) DO NOTHING"

    # ---- vectors ---------------------------------------------------------------------------

    def vector_expression(self, column: str) -> str:
        return column  # read as pgvector's own binary form by `read_vectors`

    def read_vectors(self, sql: str, params: Sequence = (), most_rows: int | None = None) -> tuple[list, np.ndarray]:
        """(keys, float32 matrix) of `sql` selecting (text key, vector), through a binary COPY: each
        vector arrives as pgvector's binary form (its floats as stored, big-endian) and becomes a
        row of the matrix without a text form or a Python float per value."""
        with self.connection() as connection, connection.cursor() as cursor:
            statement = cursor.mogrify(_PLACEHOLDER.sub("%s", sql.replace("%", "%%")), tuple(params)).decode()
            out = BytesIO()
            cursor.copy_expert(f"COPY ({statement}) TO STDOUT WITH (FORMAT binary)", out)
        return _parse_binary_vectors(out.getbuffer())

    def row_batches(self, sql: str, params: Sequence = (), size: int = BATCH_ROWS) -> Iterator[list[tuple]]:
        # A server-side cursor: the server holds the result, the client one batch of it.
        with self.transaction() as connection:
            self._run(connection, f"DECLARE {_BATCH_CURSOR} NO SCROLL CURSOR FOR {sql}", params)
            try:
                while rows := self._fetch(self._run(connection, f"FETCH {int(size)} FROM {_BATCH_CURSOR}", ())):
                    yield [tuple(row) for row in rows]
            finally:
                self._run(connection, f"CLOSE {_BATCH_CURSOR}", ())

    def each_batch(self, sql: str, kinds: Sequence[str], consume: Callable[[list[np.ndarray]], None],
                   params: Sequence = (), size: int = BATCH_ROWS) -> None:
        # A binary COPY: numbers and vectors arrive in their binary forms, parsed `size` rows at a time.
        with self.connection() as connection, connection.cursor() as cursor:
            statement = cursor.mogrify(_PLACEHOLDER.sub("%s", sql.replace("%", "%%")), tuple(params)).decode()
            rows = FixedWidthRows(kinds, consume, size)
            cursor.copy_expert(f"COPY ({statement}) TO STDOUT WITH (FORMAT binary)", rows)
            rows.finish()

    def dense_candidates(self, query: np.ndarray, depth: int, where: str, params: Sequence,
                         filters: SearchFilters) -> list[str]:
        literal = "[" + ",".join(repr(float(x)) for x in query) + "]"
        # A zero vector has no cosine distance (pgvector gives NaN, which coalesce keeps): it scores 0, as in the rescoring.
        distance = "coalesce(nullif(v.vector <=> ?::vector, 'NaN'), 1.0)"
        if self.vector_index == "hnsw":
            # The index's order, k plus a margin; with filters, the scan goes on until enough rows
            # pass them (pgvector 0.8's iterative scan).
            typed = f"vector({len(query)})"
            sql = (f"SELECT c.chunk_id FROM chunks c JOIN vectors v USING (chunk_id) WHERE {where} "
                   f"ORDER BY v.vector::{typed} <=> ?::{typed} LIMIT ?")
            arguments = [*params, literal, depth + CANDIDATE_MARGIN]
            settings = {"hnsw.ef_search": str(max(int(self.hnsw["ef_search"]), depth + CANDIDATE_MARGIN)),
                        "hnsw.iterative_scan": "relaxed_order"}
        else:
            # Exact: one scan of the filtered vectors (never an approximate index), and every chunk
            # as close as the depth-th, so ties at the edge are decided by the rescoring.
            sql = f"""
                WITH scored AS MATERIALIZED (
                    SELECT c.chunk_id, {distance} AS distance FROM chunks c JOIN vectors v USING (chunk_id) WHERE {where}
                ),
                edge AS (SELECT distance FROM scored ORDER BY distance LIMIT 1 OFFSET ?)
                SELECT chunk_id FROM scored
                WHERE distance <= coalesce((SELECT distance FROM edge), 'Infinity') + ?
            """
            arguments = [literal, *params, depth - 1, FLOAT32_SCORE_TOLERANCE]
            settings = {"enable_indexscan": "off"}
        with self.connection() as connection:
            for name, value in settings.items():
                self._run(connection, f"SET {name} = {value}", ())
            try:
                rows = self._fetch(self._run(connection, sql, arguments))
            finally:
                for name in settings:
                    self._run(connection, f"RESET {name}", ())
        return [r[0] for r in rows]

    def _schema_present(self, connection) -> bool:
        return bool(self._fetch(self._run(connection, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?",
                                          [self.schema]))[0][0])

    def _lock_schema(self, connection) -> None:
        # Held until the preparing transaction ends; the extension and the schema are made under it.
        self._run(connection, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", [f"rag_pipeline:schema:{self.schema}"])
        self._run(connection, "CREATE EXTENSION IF NOT EXISTS vector", ())
        self._run(connection, f"CREATE SCHEMA IF NOT EXISTS {self.schema}", ())

    def ensure_vector_index(self) -> None:
        """The HNSW index, when configured and missing, built once vectors exist (their dimension
        is the index's): under an advisory lock, so two switches never build it twice."""
        if self.vector_index != "hnsw" or self._has_hnsw_index():
            return
        with self.transaction():
            self.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", [f"rag_pipeline:hnsw:{self.schema}"])
            dimension = self.value("SELECT vector_dims(vector) FROM vectors LIMIT 1")
            if dimension is None or self._has_hnsw_index():
                return
            # An expression index: the column has no fixed dimension (the embedder decides it).
            self.execute(
                f"CREATE INDEX IF NOT EXISTS {HNSW_INDEX} ON vectors USING hnsw "
                f"((vector::vector({int(dimension)})) vector_cosine_ops) "
                f"WITH (m = {int(self.hnsw['m'])}, ef_construction = {int(self.hnsw['ef_construction'])})"
            )

    def _has_hnsw_index(self) -> bool:
        return bool(self.value("SELECT 1 FROM pg_indexes WHERE schemaname = ? AND indexname = ?", [self.schema, HNSW_INDEX]))

    # ---- concurrency -----------------------------------------------------------------------

    @contextmanager
    def source_lock(self, source_id: str, timeout_s: float = 1800.0) -> Iterator[None]:
        key = f"rag_pipeline:{self.schema}:{source_id}"
        connection = self._open()  # its own session: the lock lives as long as it does
        try:
            deadline = time.monotonic() + timeout_s
            while not self._fetch(self._run(connection, "SELECT pg_try_advisory_lock(hashtextextended(?, 0))", [key]))[0][0]:
                if time.monotonic() >= deadline:
                    raise SourceBusyError(
                        f"source {source_id!r} is being ingested by another process (advisory lock on {self.describe()}); "
                        f"waited {timeout_s:.0f} s. Wait for that run to finish, or stop it."
                    )
                time.sleep(0.5)
            yield
        finally:
            connection.close()  # closing the session releases its advisory locks

    def describe(self) -> str:
        from psycopg2.extensions import parse_dsn

        parts = parse_dsn(self.dsn)
        where = parts.get("host", "localhost") + (f":{parts['port']}" if parts.get("port") else "")
        return f"postgresql://{parts.get('user', '')}@{where}/{parts.get('dbname', '')} (schema {self.schema})"


def _binary_copy(rows: Sequence[Sequence], types: Sequence[str], vectors: np.ndarray) -> BytesIO:
    """PostgreSQL's binary COPY stream for rows of text / timestamp / integer columns plus one vector."""
    matrix = np.ascontiguousarray(vectors, dtype=">f4")
    dimension = matrix.shape[1]
    vector_header = struct.pack(">ihh", 4 + 4 * dimension, dimension, 0)
    out = BytesIO()
    out.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
    field_count = struct.pack(">h", len(types) + 1)
    for row, vector in zip(rows, matrix):
        out.write(field_count)
        for value, kind in zip(row, types):
            if value is None:
                out.write(b"\xff\xff\xff\xff")
            elif kind == "TIMESTAMP":
                stamp = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
                micros = (stamp - _EPOCH_2000) // _MICROSECOND
                out.write(struct.pack(">iq", 8, micros))
            elif kind in ("INTEGER",):
                out.write(struct.pack(">ii", 4, value))
            elif kind == "BIGINT":
                out.write(struct.pack(">iq", 8, value))
            else:
                data = str(value).encode("utf-8")
                out.write(struct.pack(">i", len(data)) + data)
        out.write(vector_header + vector.tobytes())
    out.write(b"\xff\xff")
    out.seek(0)
    return out


_MICROSECOND = datetime(2000, 1, 1, 0, 0, 0, 1) - _EPOCH_2000
_BATCH_CURSOR = "rag_pipeline_batches"
# Big-endian binary forms of each_batch's kinds of column ("vector": pgvector's, sized per stream).
_BINARY_TYPES = {"int32": ">i4", "int64": ">i8", "float64": ">f8"}
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


class FixedWidthRows:
    """The target of a binary COPY (psycopg2 writes it a row at a time) whose rows all have the
    same width: numbers and vectors of one dimension, no NULL. About `batch_rows` rows at a time go
    to `consume` as numpy columns (BATCH_KINDS), so the result is never held whole."""

    def __init__(self, kinds: Sequence[str], consume: Callable[[list[np.ndarray]], None],
                 batch_rows: int = BATCH_ROWS) -> None:
        self.kinds, self.consume = list(kinds), consume
        self.batch_bytes = batch_rows * 26  # until the row's width is known: three int32 columns
        self.buffer = bytearray()
        self.row: np.dtype | None = None  # known once the header and the first row have arrived

    def write(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= self.batch_bytes:
            self._flush()

    def finish(self) -> None:
        """After the COPY: the last rows, and the stream's end checked."""
        self._flush()
        if bytes(self.buffer) != b"\xff\xff":
            raise ValueError("a binary COPY stream that does not end after its last row")

    def _flush(self) -> None:
        if self.row is None and not self._start():
            return
        count = len(self.buffer) // self.row.itemsize
        if count:
            self.consume(self._columns(count))
            del self.buffer[: count * self.row.itemsize]

    def _start(self) -> bool:
        """Read the header and the row layout from the first row (a vector's dimension); False at
        the end of an empty result."""
        if bytes(self.buffer[:11]) != _COPY_SIGNATURE:
            raise ValueError("not a PostgreSQL binary COPY stream")
        extension = struct.unpack_from(">i", self.buffer, 15)[0]
        del self.buffer[: 19 + extension]
        if bytes(self.buffer[:2]) == b"\xff\xff":
            return False
        fields, offset = [("fields", ">i2")], 2
        for i, kind in enumerate(self.kinds):
            if kind == "vector":
                (dimension,) = struct.unpack_from(">h", self.buffer, offset + 4)
                fields += [(f"size{i}", ">i4"), (f"dimension{i}", ">i2"), (f"unused{i}", ">i2"),
                           (f"value{i}", ">f4", (dimension,))]
            else:
                fields += [(f"size{i}", ">i4"), (f"value{i}", _BINARY_TYPES[kind])]
            offset = np.dtype(fields).itemsize  # where the next column's field starts
        self.row = np.dtype(fields)
        self.batch_bytes = self.batch_bytes // 26 * self.row.itemsize
        return True

    def _columns(self, count: int) -> list[np.ndarray]:
        rows = np.frombuffer(bytes(self.buffer[: count * self.row.itemsize]), dtype=self.row)
        if np.any(rows["fields"] != len(self.kinds)):
            raise ValueError("a binary COPY row with another number of columns")
        columns = []
        for i, kind in enumerate(self.kinds):
            values = rows[f"value{i}"]
            width = values.dtype.itemsize if kind != "vector" else 4 + values.shape[1] * 4
            if np.any(rows[f"size{i}"] != width):
                raise ValueError(f"column {i} of a binary COPY holds a NULL or a vector of another dimension")
            columns.append(values.astype(BATCH_KINDS[kind]))
        return columns


def _parse_binary_vectors(data: memoryview) -> tuple[list, np.ndarray]:
    """Keys and vectors from PostgreSQL's binary COPY of (text, vector) rows (pgvector's binary
    form of a vector: dimension int16, an unused int16, then the floats as big-endian float32)."""
    if bytes(data[:11]) != _COPY_SIGNATURE:
        raise ValueError("not a PostgreSQL binary COPY stream")
    extension = struct.unpack_from(">i", data, 15)[0]
    position = 19 + extension
    keys, rows = [], []
    while True:
        (fields,) = struct.unpack_from(">h", data, position)
        position += 2
        if fields == -1:
            break
        (size,) = struct.unpack_from(">i", data, position)
        keys.append(bytes(data[position + 4 : position + 4 + size]).decode("utf-8"))
        position += 4 + size
        (size,) = struct.unpack_from(">i", data, position)
        if size < 0:
            raise ValueError(f"vector of {keys[-1]!r} is null")
        (dimension,) = struct.unpack_from(">h", data, position + 4)
        rows.append(np.frombuffer(data, dtype=">f4", count=dimension, offset=position + 8))
        position += 4 + size
    if not rows:
        return [], np.zeros((0, 0), dtype=np.float32)
    return keys, np.vstack(rows).astype(np.float32)
