"""A new DuckDB index file appears whole: processes that open it for the first time at once never
meet an empty or half-made file, which DuckDB calls "not a valid DuckDB database file".

DuckDB decides "new file or existing one" before it locks the file. CI saw two first ingests into one
new index end with "the index file ... is damaged"; six processes creating one file at once left an
empty file that refused every later open once in 40 tries (the gap is microseconds wide, so these
tests stage the race instead of waiting for it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb

from rag_pipeline.core.storage import duckdb as duckdb_backend
from rag_pipeline.core.storage.duckdb import DuckDBDatabase


def test_the_file_appears_with_its_header_and_no_spare_is_left(tmp_path, monkeypatch):
    path = tmp_path / "index.duckdb"
    seen_while_made = []
    real_connect = duckdb.connect

    def watching_connect(database, *args, **kwargs):
        if Path(database) != path:
            seen_while_made.append(path.exists())  # the file in place while the new one is made
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(duckdb_backend.duckdb, "connect", watching_connect)
    store = DuckDBDatabase(path)
    store.execute("CREATE TABLE t (x INTEGER)")
    store.close()
    assert seen_while_made == [False]
    assert [p.name for p in tmp_path.iterdir()] == ["index.duckdb"]


def test_the_process_that_loses_the_race_opens_the_winners_file(tmp_path, monkeypatch):
    """Another process creates the file between this one's look and its link: this one's empty
    database is dropped, and what the other wrote is what it opens."""
    path = tmp_path / "index.duckdb"
    real_connect = duckdb.connect

    def racing_connect(database, *args, **kwargs):
        if Path(database) != path and not path.exists():
            with real_connect(str(path)) as winner:
                winner.execute("CREATE TABLE written_by_the_winner AS SELECT 42 AS answer")
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(duckdb_backend.duckdb, "connect", racing_connect)
    store = DuckDBDatabase(path)
    assert store.rows("SELECT answer FROM written_by_the_winner") == [(42,)]
    store.close()
    assert [p.name for p in tmp_path.iterdir()] == ["index.duckdb"]


def test_a_spare_left_by_a_killed_process_is_removed_when_the_file_is_made(tmp_path):
    """A process killed -9 while it made the new file leaves its spare; the next creation removes it."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    path = tmp_path / "index.duckdb"
    left = tmp_path / f".index.duckdb.{int(dead.stdout)}.tmp"
    duckdb.connect(str(left)).close()
    store = DuckDBDatabase(path)
    store.execute("CREATE TABLE t (x INTEGER)")
    store.close()
    assert [p.name for p in tmp_path.iterdir()] == ["index.duckdb"]
