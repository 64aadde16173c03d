"""The ingestion assets materialized in process on real data: real model, real unstructured, real DuckDB."""

import re
import shutil

import dagster as dg
import pytest

from rag_pipeline.cli.runner import ingest
from rag_pipeline.core.storage import open_store
from rag_pipeline_tests.conftest import HTTPX_V023, require

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def httpx_run(tmp_path_factory):
    """httpx 0.23 docs ingested once with the real model; tests below change a copy and re-run."""
    import yaml

    from rag_pipeline.config import load_config

    tmp = tmp_path_factory.mktemp("httpx")
    root = tmp / "docs"
    shutil.copytree(require(HTTPX_V023), root)
    (tmp / "pipeline.yaml").write_text(
        yaml.safe_dump({"sources": [{"name": "httpx", "path": str(root)}], "storage": {"path": str(tmp / "index.duckdb")}})
    )
    config = load_config(tmp / "pipeline.yaml")
    instance = dg.DagsterInstance.ephemeral()
    [first] = ingest(config, instance)
    return {"config": config, "instance": instance, "root": root, "first": first, "store": open_store(config.storage)}


def _run(httpx_run, force: bool = False):
    [run] = ingest(httpx_run["config"], httpx_run["instance"], force=force)
    return run


def test_first_run_makes_every_page_queryable_and_reports_skips(httpx_run):
    first = httpx_run["first"]
    assert first.success, first.error
    assert first.checks == {"coverage": True, "deletions_propagated": True, "sources_fresh": True, "no_failed_documents": True,
                            "served_as_configured": True}
    assert first.counts["discovered"] == 13
    assert first.counts["parsed"] == 13 and first.counts["indexed"] == 13 and first.counts["queryable"] == 13
    assert first.counts["embedded"] > 13 and first.failures == []
    manifest = httpx_run["store"].staging.manifest_rows("httpx")
    skipped = {r["rel_path"]: r["skip_reason"] for r in manifest if not r["supported"]}
    assert first.counts["skipped"] == len(skipped) == 13
    assert {p.rsplit(".", 1)[-1] for p in skipped if "." in p} == {"png", "jpg", "gif", "css", "js"}
    assert all(reason.startswith("unsupported file type") for reason in skipped.values())


def test_second_run_without_change_parses_and_embeds_nothing(httpx_run):
    skipped = _run(httpx_run)
    assert skipped.success and skipped.not_run and skipped.counts["unchanged"] == 13
    # Run anyway, every stage finds nothing to do.
    run = _run(httpx_run, force=True)
    assert run.success and run.not_run is None
    assert run.counts["unchanged"] == 13
    assert (run.counts["parsed"], run.counts["chunked"], run.counts["embedded"], run.counts["cache_hits"]) == (0, 0, 0, 0)


def test_editing_one_page_reembeds_only_its_changed_chunks(httpx_run):
    store = httpx_run["store"]
    page = httpx_run["root"] / "exceptions.md"
    with store.db.connection() as con:
        before = dict(con.execute("SELECT chunk_id, text_hash FROM chunks WHERE doc_id = 'httpx:exceptions.md'").fetchall())
    page.write_text(page.read_text() + "\n\n## Retrying\n\nNetwork errors such as ConnectError can be retried with a transport.\n")
    run = _run(httpx_run)
    assert run.success
    assert (run.counts["changed"], run.counts["parsed"], run.counts["chunked"]) == (1, 1, 1)
    with store.db.connection() as con:
        after = dict(con.execute("SELECT chunk_id, text_hash FROM chunks WHERE doc_id = 'httpx:exceptions.md'").fetchall())
    new_texts = set(after.values()) - set(before.values())
    assert run.counts["embedded"] == len(new_texts) >= 1
    assert run.counts["cache_hits"] == len(after) - len(new_texts)
    assert run.counts["indexed"] == 1 and run.counts["probed"] == 1
    assert run.counts["queryable"] == run.counts["discovered"]  # a state: every page stays queryable


def test_broken_files_fail_alone_with_reasons(httpx_run):
    root = httpx_run["root"]
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage\n%%EOF")
    (root / "binary.md").write_bytes(bytes(range(256)) * 4)
    (root / "empty.md").write_bytes(b"")
    (root / "latin1.md").write_bytes("# R\xe9sum\xe9\n\nCaf\xe9 cr\xe8me\n".encode("latin-1"))
    run = _run(httpx_run)
    reasons = {f["doc_id"]: f["reason"] for f in run.failures}
    assert set(reasons) == {"httpx:corrupt.pdf", "httpx:binary.md", "httpx:empty.md", "httpx:latin1.md"}
    assert re.search("pdf parser failed|no text could be extracted", reasons["httpx:corrupt.pdf"])
    assert "binary content" in reasons["httpx:binary.md"]
    assert "empty file" in reasons["httpx:empty.md"]
    assert "not valid UTF-8" in reasons["httpx:latin1.md"] and "line 1" in reasons["httpx:latin1.md"]
    # The healthy pages are untouched and the coverage check passes: every failure has a reason.
    assert run.success and run.checks["coverage"] and run.checks["deletions_propagated"]
    served = {d["doc_id"] for d in httpx_run["store"].served.indexed_documents("httpx")}
    assert len(served) == 13 and not served & set(reasons)
    # A failed document is not retried while its bytes are unchanged.
    again = _run(httpx_run, force=True)
    assert again.counts["parsed"] == 0 and len(again.failures) == 4


def test_only_an_unexpected_error_shows_its_stack(tmp_path, write_config, monkeypatch, capsys):
    import yaml

    from rag_pipeline.config import load_config
    from rag_pipeline.core.ingestion import stages
    from rag_pipeline_tests.conftest import write_tree

    instance = dg.DagsterInstance.ephemeral()
    # An outage of the source: its reason is the whole story, the outcome line carries it.
    (tmp_path / "outage").mkdir()
    (tmp_path / "outage" / "pipeline.yaml").write_text(yaml.safe_dump({
        "sources": [{"name": "gone", "path": str(tmp_path / "nowhere")}], "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp_path / "outage" / "index.duckdb")}}))
    [run] = ingest(load_config(tmp_path / "outage" / "pipeline.yaml"), instance)
    assert not run.success and "does not exist" in run.error
    assert "stack" not in capsys.readouterr().err
    config = write_config({"kb": write_tree(tmp_path / "kb", {"a.md": "# A\n\nSome text about refunds.\n"})})

    # A bug is a bug whatever its class: a ValueError or a KeyError in the code is not a data fault.
    for bug in (RuntimeError("a bug in the parse stage"), ValueError("a bug's bad value"), KeyError("a bug's missing key")):
        def broken(*args, error=bug, **kwargs):
            raise error

        monkeypatch.setattr(stages, "parse_source", broken)
        [run] = ingest(config, instance, force=True)
        err = capsys.readouterr().err
        assert not run.success and str(bug.args[0]) in run.error
        assert "step parsed_documents failed with an unexpected error" in err and type(bug).__name__ in err
        assert 'File "' in err and "in broken" in err


def test_each_stages_progress_and_the_skipped_files_by_reason_are_in_the_run(tmp_path, write_config):
    """The lines a person reads in the UI's run log: each stage's last line, with done/total and rate;
    and discovery's skipped files counted by reason in its metadata."""
    from rag_pipeline_tests.conftest import write_tree

    pages = {f"page{n:02}.md": f"# Page {n}\n\nThis page explains topic {n} of the product.\n" for n in range(25)}
    pages |= {"logo.png": b"\x89PNG", "icon.png": b"\x89PNG", ".DS_Store": b"\x00"}
    config = write_config({"docs": write_tree(tmp_path / "docs", pages)})
    instance = dg.DagsterInstance.ephemeral()
    [run] = ingest(config, instance)
    assert run.success, run.error
    messages = [entry.user_message for record in instance.get_runs() for entry in instance.all_logs(record.run_id)
                if entry.dagster_event is None]
    for stage in ("discovery", "parsing", "chunking", "embedding", "probing"):
        assert any(re.match(rf"docs: {stage}: \d+/\d+ \(100%\), [\d.]+/s, done$", m) for m in messages), (stage, messages)
    # Discovery's metadata counts what it skipped by reason, beside the total.
    event = instance.get_latest_materialization_event(dg.AssetKey("source_documents"))
    metadata = event.asset_materialization.metadata
    assert metadata["skipped"].value == 3
    assert [(r.data["reason"], r.data["files"]) for r in metadata["skipped_by_reason"].value.records] == [
        ("unsupported file type '.png'", 2), ("hidden file", 1)]
