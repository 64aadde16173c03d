"""Parsing with several workers at once gives what one worker gives, in the same order.

The sample corpus (md, html, txt, pdf, docx, a broken file among them) is ingested with one
parser worker and with three; every element, chunk and ledger verdict must be equal, and a
document that fails must fail alone with the same reason.
"""

from __future__ import annotations

import shutil

import duckdb
import pytest

from rag_pipeline.config import PROJECT_ROOT, ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.inputs import current_fingerprint
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.storage import duckdb_store

pytestmark = pytest.mark.slow

HELPCENTER = PROJECT_ROOT / "data" / "corpus" / "helpcenter"


def _ingest(tmp_path, workers: int) -> dict[str, list]:
    root = tmp_path / f"docs_{workers}"
    shutil.copytree(HELPCENTER, root)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    db_path = tmp_path / f"index_{workers}.duckdb"
    store = duckdb_store(db_path)
    source = SourceConfig(name="help", path=root, parse_workers=workers)
    reports = ingest_source(source, store, HashingEmbedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(),
                            LifecycleConfig(), "t")
    assert reports["parsed"].counts["parsed"] > 10
    store.close()
    with duckdb.connect(str(db_path), read_only=True) as con:
        return {
            "elements": con.execute("SELECT doc_id, ordinal, category, text FROM elements ORDER BY doc_id, ordinal").fetchall(),
            "chunks": con.execute("SELECT chunk_id, doc_id, text FROM chunks ORDER BY chunk_id").fetchall(),
            "ledger": con.execute("SELECT doc_id, stage, status, reason FROM ledger ORDER BY doc_id, stage").fetchall(),
        }


def test_three_workers_parse_what_one_parses(tmp_path):
    one, three = _ingest(tmp_path, 1), _ingest(tmp_path, 3)
    assert one == three
    failed = [row for row in one["ledger"] if row[0] == "help:broken.pdf" and row[2] == "failed"]
    assert len(failed) == 1 and failed[0][1] == "parsed" and failed[0][3]


def test_the_worker_count_is_no_reason_to_run_again(tmp_path):
    root = tmp_path / "docs"
    shutil.copytree(HELPCENTER, root)
    prints = {current_fingerprint(SourceConfig(name="help", path=root, parse_workers=n), "settings") for n in (0, 1, 4)}
    assert len(prints) == 1


def test_an_interrupt_stops_every_worker_and_the_next_parse_gets_its_own_documents(tmp_path):
    """Ctrl-C while three workers parse: the stage ends without waiting for their documents, and
    the next stage's documents get their own elements (no reply of the interrupted ones)."""
    import signal

    from rag_pipeline.core.ingestion.parse_worker import shared_parsers
    from rag_pipeline.core.ingestion.stages import discover_source, parse_source
    from rag_pipeline_tests.conftest import write_tree

    slow = "# Long\n\n" + "\n\n".join(f"Paragraph {i} holds a sentence for the parser." for i in range(30000))
    slow_root = write_tree(tmp_path / "slow", {f"slow{i}.md": slow for i in range(6)})
    quick_root = write_tree(tmp_path / "quick", {f"page{i}.md": f"# Page {i}\n\nIts own text.\n" for i in range(6)})

    def parse(root, name):
        store = duckdb_store(tmp_path / f"{name}.duckdb")
        source = SourceConfig(name=name, path=root, parse_workers=3)
        discover_source(source, store, LifecycleConfig(), "t")
        try:
            parse_source(source, store, "t")
            with store.db.session():
                return {d.doc_id: d.title for d in store.staging.load_parsed(sorted(store.staging.parsed_versions(name)))}
        finally:
            store.close()

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            parse(slow_root, "slow")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # The workers were killed, not waited for (one such page takes over 30 s to parse).
    assert not any(worker.running() for worker in shared_parsers(3)), "a worker outlived the interrupt"
    assert parse(quick_root, "quick") == {f"quick:page{i}.md": f"Page {i}" for i in range(6)}
