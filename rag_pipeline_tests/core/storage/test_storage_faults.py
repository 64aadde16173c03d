"""A full disk and a damaged index file said by their names, on a real DuckDB file; the error that
ended a transaction is the one raised, not the engine's refusal to roll it back."""

from __future__ import annotations

import pytest

from rag_pipeline.core.storage import duckdb_store
from rag_pipeline.core.storage.faults import DamagedIndexError, NoSpaceError
from rag_pipeline.core.storage.locks import exclusive_source
from rag_pipeline_tests.full_disk import fill, small_disk


def test_the_error_that_ended_a_transaction_is_the_one_raised(tmp_path):
    store = duckdb_store(tmp_path / "index.duckdb")
    db = store.db
    with pytest.raises(ValueError) as raised:
        with db.transaction() as connection:
            connection.execute("COMMIT")  # as DuckDB does itself after a failed write: no transaction left
            raise ValueError("the first error")
    assert str(raised.value) == "the first error"
    assert any("no transaction is active" in note for note in raised.value.__notes__)
    db.close()


def test_a_full_disk_is_named_with_the_index_file_and_nothing_served_is_lost(tmp_path):
    with small_disk(tmp_path / "disk", 24) as disk:
        path = disk / "index.duckdb"
        store = duckdb_store(path)
        db = store.db
        with db.transaction():
            db.execute("CREATE TABLE kept (n INTEGER)")
            db.execute("INSERT INTO kept SELECT range FROM range(1000)")
        db.close()
        fill(disk, 64 * 1024)
        with pytest.raises(NoSpaceError) as raised:
            with db.transaction():
                db.execute("INSERT INTO kept SELECT range FROM range(3000000)")
        assert str(raised.value) == (f"no space left on device at {path}: free space on that disk and run again; "
                                     "what was served before is still served")
        db.close()
        fill(disk, 0)
        with pytest.raises(NoSpaceError, match=f"^no space left on device at {disk / 'index.duckdb.locks'}: "):
            with exclusive_source(path, "docs"):
                pass
        (disk / "filler").unlink()
        assert db.rows("SELECT count(*) FROM kept") == [(1000,)]
        db.close()


@pytest.mark.parametrize("keep_bytes", [1, 100, 4096, 20_000])
def test_an_index_file_cut_short_is_named_damaged(tmp_path, keep_bytes):
    path = tmp_path / "index.duckdb"
    store = duckdb_store(path)
    with store.db.transaction():
        store.db.execute("CREATE TABLE kept AS SELECT range AS n, repeat('x', 200) AS t FROM range(20000)")
    store.db.shutdown()
    with open(path, "r+b") as handle:
        handle.truncate(keep_bytes)
    cut = duckdb_store(path)
    with pytest.raises(DamagedIndexError) as raised:
        cut.db.rows("SELECT count(*) FROM kept")
    assert str(raised.value) == (f"the index file {path} is damaged (cut short or overwritten): restore it from a "
                                 "backup, or remove it and run `rag-pipeline ingest` to build it again")
    assert path.stat().st_size == keep_bytes  # left as it was found, for whoever restores it


def test_an_empty_index_file_is_named_empty_not_damaged(tmp_path):
    path = tmp_path / "index.duckdb"
    path.touch()  # as an older version killed while it created the file, or another tool, left it
    with pytest.raises(DamagedIndexError) as raised:
        duckdb_store(path).db.rows("SELECT 1")
    assert str(raised.value) == (f"the index file {path} is empty (0 bytes, never written by whatever made it): "
                                 "remove it and run `rag-pipeline ingest` to build it")
    assert path.stat().st_size == 0
