"""A released DuckDB connection waits a moment for the process's next call, then frees the file."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import duckdb
import pytest

from rag_pipeline.core.storage import duckdb as duckdb_backend
from rag_pipeline.core.storage import duckdb_store

# Another process opening the file for writing, as a second run would; exit 0 once it could.
OTHER_PROCESS = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1]).execute("INSERT INTO linger_probe VALUES (2)").close()
except duckdb.IOException as exc:
    print(exc)
    sys.exit(3)
"""


def _other_process_writes(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(path)], capture_output=True, text=True, timeout=120)


@pytest.fixture
def store(tmp_path):
    store = duckdb_store(tmp_path / "index.duckdb")
    store.db.execute("CREATE TABLE linger_probe (n INTEGER)")
    yield store
    store.close()


@pytest.fixture
def connects(monkeypatch) -> list[str]:
    opened: list[str] = []
    connect = duckdb.connect

    def counted(path, *args, **kwargs):
        opened.append(path)
        return connect(path, *args, **kwargs)

    monkeypatch.setattr(duckdb_backend.duckdb, "connect", counted)
    return opened


def test_calls_close_together_share_one_connection(store, connects):
    store.close()  # the fixture's own call left its connection waiting
    store.db.execute("INSERT INTO linger_probe VALUES (1)")
    for _ in range(5):
        assert store.db.value("SELECT count(*) FROM linger_probe") == 1
    with store.db.transaction():
        store.db.execute("INSERT INTO linger_probe VALUES (3)")
    assert store.db.value("SELECT sum(n) FROM linger_probe") == 4
    assert len(connects) == 1


def test_the_file_is_freed_after_the_linger(store, monkeypatch):
    # Long enough for another interpreter to start and try within it, short enough to wait out.
    monkeypatch.setattr(duckdb_backend, "LINGER_SECONDS", 3.0)
    store.close()
    store.db.execute("INSERT INTO linger_probe VALUES (1)")
    # Right after the call the connection still holds the file: another process is refused...
    held = _other_process_writes(store.db.path)
    assert held.returncode == 3 and "lock" in held.stdout.lower()
    # ...until the linger has passed (the timer closes it; polled, the machine may be busy).
    deadline = time.monotonic() + 30
    while (done := _other_process_writes(store.db.path)).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert done.returncode == 0, done.stdout
    assert store.db.value("SELECT sum(n) FROM linger_probe") == 3  # this process reads the other's row


def test_close_frees_the_file_at_once(store, monkeypatch):
    monkeypatch.setattr(duckdb_backend, "LINGER_SECONDS", 600.0)  # only close() can free it in time
    store.close()
    store.db.execute("INSERT INTO linger_probe VALUES (1)")
    store.close()
    assert _other_process_writes(store.db.path).returncode == 0


def test_a_process_that_exits_leaves_the_file_checkpointed(tmp_path):
    """At exit the waiting connection is closed (atexit): DuckDB checkpoints its log into the file."""
    path = tmp_path / "index.duckdb"
    script = ("import sys\nfrom rag_pipeline.core.storage import duckdb_store\n"
              "store = duckdb_store(sys.argv[1])\nstore.db.execute('CREATE TABLE t AS SELECT 42 AS n')\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not path.with_name(path.name + ".wal").exists()
    assert duckdb.connect(str(path)).execute("SELECT n FROM t").fetchall() == [(42,)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_while_a_connection_waits_is_refused_the_file(store, tmp_path):
    """A child forked while a connection waits (as a parser worker is forked from a command) has a
    copy of the parent's open DuckDB: it must not use it, nor close it (that would checkpoint the
    parent's file from the child). Parser workers never open the store; anything else is told."""
    store.db.execute("INSERT INTO linger_probe VALUES (1)")
    assert store.db._idle is not None
    report = tmp_path / "child.txt"
    pid = os.fork()
    if pid == 0:  # the child: try the store, say what happened, leave without the interpreter's teardown
        try:
            store.db.execute("INSERT INTO linger_probe VALUES (10)")
            report.write_text("written")
        except RuntimeError as exc:
            report.write_text(str(exc))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert "forked from one that had the file open" in report.read_text()
    store.db.execute("INSERT INTO linger_probe VALUES (2)")
    assert store.db.value("SELECT sum(n) FROM linger_probe") == 3


def test_a_one_page_edit_runs_every_stage_on_one_connection(tmp_path, connects, monkeypatch):
    """With a linger longer than the gaps between its calls, a whole one-page edit (discovery,
    parse, chunks, vectors, the switch with its probes) opens the file once; by default the
    linger is LINGER_SECONDS, and a gap longer than that (a long parse) costs one connect."""
    from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
    from rag_pipeline.core.embedding.hashing import HashingEmbedder
    from rag_pipeline.core.ingestion.stages import ingest_source
    from rag_pipeline_tests.conftest import write_tree

    root = write_tree(tmp_path / "docs", {"a.md": "# A\n\nThe refund window is fourteen days.\n",
                                          "b.md": "# B\n\nSingle sign-on needs an entity id.\n"})
    store = duckdb_store(tmp_path / "index.duckdb")
    source, embedder = SourceConfig(name="kb", path=root), HashingEmbedder(EmbeddingConfig(kind="hashing"))
    ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "r1")
    store.close()
    monkeypatch.setattr(duckdb_backend, "LINGER_SECONDS", 600.0)
    (root / "a.md").write_text("# A\n\nThe refund window is thirty days.\n")
    connects.clear()
    reports = ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "r2")
    assert reports["parsed"].counts["parsed"] == 1 and reports["indexed"].switched
    assert len(connects) == 1
    store.close()


# A process that exits while its waiting connection's timer closes it: the race behind the SIGABRT
# ("FATAL: exception not rethrown") seen after ingests that had finished their work.
EXIT_DURING_CLOSE = """
import sys, time
from rag_pipeline.core.storage import duckdb as backend, duckdb_store
backend.LINGER_SECONDS = 0.02
store = duckdb_store(sys.argv[1])
store.db.value("SELECT 1")
time.sleep(float(sys.argv[2]))  # exit about when the timer fires
"""


@pytest.mark.slow
def test_a_process_that_exits_while_its_connection_closes_exits_cleanly(tmp_path):
    path = tmp_path / "exit.duckdb"
    codes = [subprocess.run([sys.executable, "-c", EXIT_DURING_CLOSE, str(path), str(delay)], capture_output=True,
                            text=True, timeout=120) for delay in (0.0, 0.01, 0.02, 0.03) * 10]
    assert [c.returncode for c in codes] == [0] * len(codes), next(c.stderr for c in codes if c.returncode)
