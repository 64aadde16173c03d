"""What a store serves, without run ids and times: two builds of the same sources compare equal.

Used to prove that a build on many workers (PostgreSQL, Celery) serves exactly what a serial
build on DuckDB serves: the manifest, the served tables, the vectors, the embedding cache and
the ledger, compared by content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rag_pipeline.core.storage.schema import columns

if TYPE_CHECKING:
    from rag_pipeline.core.storage.store import Store

# Columns that name a run or a moment: they differ between two builds of the same content.
_PER_BUILD = {"run_id", "discovered_at", "indexed_at", "updated_at", "created_at"}
# Tables compared row by row (without their vector column and the per-build columns).
_TABLES = ("manifest", "documents", "chunks", "postings", "ledger", "vectors", "embedding_cache")
# Tables with a vector column, and the text key each vector is read under.
_VECTOR_KEYS = {"vectors": "chunk_id", "embedding_cache": "identity || ':' || text_hash"}


def served_contents(store: Store) -> dict[str, object]:
    """Every compared table's rows (sorted, lists made tuples) and each vector table's
    `key -> float32 vector` matrix, keyed by table name (`<table>.vector` for the matrices)."""
    contents: dict[str, object] = {}
    for table in _TABLES:
        kept = [name for name in columns(table) if name not in _PER_BUILD and name != "vector"]
        rows = store.db.rows(f"SELECT {', '.join(kept)} FROM {table}")
        contents[table] = sorted((tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in rows), key=repr)
    for table, key in _VECTOR_KEYS.items():
        keys, matrix = store.db.read_vectors(f"SELECT {key}, {store.db.vector_expression('vector')} FROM {table}")
        # Sorted here, not in SQL: the two engines' collations order text differently.
        order = sorted(range(len(keys)), key=keys.__getitem__)
        contents[f"{table}.vector"] = ([keys[i] for i in order], matrix[order] if len(keys) else matrix)
    return contents


def content_differences(left: Store, right: Store) -> list[str]:
    """One line per compared table whose content differs between the two stores (empty: equal)."""
    return compare_contents(served_contents(left), served_contents(right))


def compare_contents(a: dict[str, object], b: dict[str, object], skip: tuple[str, ...] = ()) -> list[str]:
    """One line per table of two `served_contents` that differs, leaving out the tables in `skip`."""
    differences = []
    for name in a:
        if name.split(".")[0] in skip:
            continue
        if name.endswith(".vector"):
            (keys_a, matrix_a), (keys_b, matrix_b) = a[name], b[name]
            if keys_a != keys_b:
                differences.append(f"{name}: {len(keys_a)} against {len(keys_b)} keys, {len(set(keys_a) ^ set(keys_b))} not in both")
            elif not np.array_equal(matrix_a, matrix_b):
                differences.append(f"{name}: same keys, different vectors")
        elif a[name] != b[name]:
            only_a, only_b = set(a[name]) - set(b[name]), set(b[name]) - set(a[name])
            example = sorted(only_a or only_b, key=repr)[:1]
            differences.append(f"{name}: {len(a[name])} against {len(b[name])} rows, {len(only_a)} only in the first, "
                               f"{len(only_b)} only in the second (e.g. {example!r:.300})")
    return differences
