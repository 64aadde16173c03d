"""Corpus lifecycle on a real corpus change: httpx docs 0.23.0 -> 0.28.1 in one source."""

import shutil

import dagster as dg
import pytest

from rag_pipeline.cli.runner import ingest
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.ingestion.lifecycle import deletion_report, freshness_report
from rag_pipeline.core.storage import open_store
from rag_pipeline_tests.conftest import HTTPX_V023, HTTPX_V028, require

pytestmark = pytest.mark.slow


def _swap(root, release):
    shutil.rmtree(root)
    shutil.copytree(require(release), root)


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory):
    """Ingest 0.23.0, replace the folder's contents with 0.28.1, ingest again (real model)."""
    import yaml

    from rag_pipeline.config import load_config

    tmp = tmp_path_factory.mktemp("httpx_change")
    root = tmp / "httpx"
    shutil.copytree(require(HTTPX_V023), root)
    (tmp / "pipeline.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": "httpx", "path": str(root)}], "storage": {"path": str(tmp / "index.duckdb")},
    }))
    config = load_config(tmp / "pipeline.yaml")
    instance = dg.DagsterInstance.ephemeral()
    store = open_store(config.storage)
    [first] = ingest(config, instance)
    with store.db.connection() as con:
        unchanged_before = dict(con.execute("SELECT chunk_id, text_hash FROM chunks WHERE doc_id = 'httpx:code_of_conduct.md'").fetchall())
    _swap(root, HTTPX_V028)
    [second] = ingest(config, instance)
    return {"config": config, "store": store, "first": first, "second": second, "root": root,
            "unchanged_before": unchanged_before, "instance": instance}


def test_discovery_reports_the_real_diff(upgraded):
    counts = upgraded["second"].counts
    assert (counts["added"], counts["changed"], counts["deleted"], counts["unchanged"]) == (11, 11, 1, 1)
    assert counts["discovered"] == 23 and counts["skipped"] > 0


def test_all_checks_pass_after_the_change(upgraded):
    run = upgraded["second"]
    assert run.success, run.error
    assert run.checks == {"coverage": True, "deletions_propagated": True, "sources_fresh": True, "no_failed_documents": True,
                            "served_as_configured": True}
    assert run.counts["probed"] == 22  # 11 added + 11 changed, each proven by a search
    assert run.counts["queryable"] == 23  # every page of 0.28.1


def test_the_deleted_page_is_gone_from_every_table_and_unretrievable(upgraded):
    store = upgraded["store"]
    assert store.served.remnants(["httpx:advanced.md"]) == {}
    with store.db.connection() as con:
        ledger = dict(con.execute("SELECT stage, status FROM ledger WHERE doc_id = 'httpx:advanced.md'").fetchall())
        deleted_at = con.execute("SELECT updated_at FROM ledger WHERE doc_id = 'httpx:advanced.md' AND stage = 'deleted'").fetchall()
    assert ledger["deleted"] == "deleted" and deleted_at[0][0] is not None
    report = deletion_report(store, "httpx", make_embedder(upgraded["config"].embedding))
    assert report.checked == ["httpx:advanced.md"] and report.passed, report.problems()


def test_the_unchanged_page_was_not_reembedded(upgraded):
    store = upgraded["store"]
    with store.db.connection() as con:
        after = dict(con.execute("SELECT chunk_id, text_hash FROM chunks WHERE doc_id = 'httpx:code_of_conduct.md'").fetchall())
        runs = dict(con.execute(
            "SELECT stage, run_id FROM ledger WHERE doc_id = 'httpx:code_of_conduct.md'"
        ).fetchall())
    assert after == upgraded["unchanged_before"]
    # Discovery touches it every run; its embedded stage still carries the first run's id.
    assert runs["embedded"] != runs["discovered"]


def test_planted_orphan_chunk_fails_deletions_propagated(upgraded):
    store = upgraded["store"]
    with store.db.connection() as con:
        con.execute(
            "INSERT INTO chunks (chunk_id, doc_id, source_id, ordinal, title, text) "
            "VALUES ('ghost:old-page.md#0', 'ghost:old-page.md', 'ghost', 0, 'Old page', 'orphan text')"
        )
    try:
        report = deletion_report(store, "httpx", make_embedder(upgraded["config"].embedding))
        assert not report.passed
        assert report.orphans == {"ghost:old-page.md": ["chunks"]}
        assert any("ghost:old-page.md" in p["doc_id"] for p in report.problems())
    finally:
        with store.db.connection() as con:
            con.execute("DELETE FROM chunks WHERE source_id = 'ghost'")


def test_a_file_changed_but_not_reingested_fails_sources_fresh(upgraded):
    import os
    import time

    config, store, root = upgraded["config"], upgraded["store"], upgraded["root"]
    page = root / "quickstart.md"
    page.write_text(page.read_text() + "\nA late edit.\n")
    two_days_ago = time.time() - 48 * 3600
    os.utime(page, (two_days_ago, two_days_ago))
    try:
        report = freshness_report(store, config.source("httpx"), max_staleness_hours=24)
        assert not report.passed
        assert [s["doc_id"] for s in report.stale] == ["httpx:quickstart.md"]
        assert report.stale[0]["reason"] == "changed since it was indexed" and report.stale[0]["age_hours"] >= 47
        assert report.index_age_hours is not None and report.index_age_hours < 1
    finally:
        shutil.copy(HTTPX_V028 / "quickstart.md", page)
    assert freshness_report(store, config.source("httpx"), max_staleness_hours=24).passed


def test_emptied_or_unmounted_root_fails_the_run_and_deletes_nothing(upgraded, tmp_path):
    config, store, root = upgraded["config"], upgraded["store"], upgraded["root"]
    before = store.served.table_counts("httpx")
    saved = tmp_path / "saved"
    shutil.move(str(root), saved)
    try:
        [unmounted] = ingest(config, upgraded["instance"])
        assert not unmounted.success and "does not exist" in unmounted.error
        root.mkdir()
        [emptied] = ingest(config, upgraded["instance"])
        assert not emptied.success and "suddenly empty" in emptied.error and "httpx:advanced/authentication.md" in emptied.error
        assert store.served.table_counts("httpx") == before
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.move(str(saved), root)
