"""Decide before paying: a source whose inputs did not change since its last switch is not run;
any change of a file, a setting or a refused switch makes the next run a real one."""

import os

import dagster as dg
import pytest

from rag_pipeline.cli.runner import ingest
from rag_pipeline.core.ingestion.source_runs import RUN_COUNTS
from rag_pipeline_tests.conftest import write_tree

PAGES = {f"p{i}.md": f"# Page {i}\n\nPage {i} explains topic number {i} in a few words.\n" for i in range(6)}


@pytest.fixture
def built(tmp_path, write_config):
    root = write_tree(tmp_path / "kb", PAGES)
    config = write_config({"kb": root})
    instance = dg.DagsterInstance.ephemeral()
    [first] = ingest(config, instance)
    assert first.success and first.not_run is None
    return config, instance, root


def _runs(instance) -> int:
    return len(instance.get_runs())


def test_an_unchanged_source_is_not_run(built):
    config, instance, _ = built
    before = _runs(instance)
    [again] = ingest(config, instance)
    assert again.success and again.not_run and "inputs unchanged" in again.not_run
    assert again.counts == {"discovered": 6, "skipped": 0, "unchanged": 6, "queryable": 6}
    assert set(RUN_COUNTS) <= set(again.as_json()), "an outcome without a run has the keys of one with a run"
    assert _runs(instance) == before, "no Dagster run was started"
    [forced] = ingest(config, instance, force=True)
    assert forced.not_run is None and _runs(instance) == before + 1 and forced.counts["unchanged"] == 6


def test_an_unchanged_source_counts_its_documents_as_a_run_does(tmp_path, write_config):
    """A file discovery skips (an image) is `skipped`, not `discovered`, with or without a run."""
    root = write_tree(tmp_path / "kb", {**PAGES, "logo.png": b"\x89PNG\r\n\x1a\n"})
    config = write_config({"kb": root})
    instance = dg.DagsterInstance.ephemeral()
    [first] = ingest(config, instance)
    [again] = ingest(config, instance)
    assert first.not_run is None and again.not_run
    assert (first.counts["discovered"], first.counts["skipped"]) == (6, 1)
    assert (again.counts["discovered"], again.counts["skipped"], again.counts["queryable"]) == (6, 1, 6)


def test_a_touched_file_a_new_file_or_a_setting_makes_it_run(built, write_config):
    config, instance, root = built
    page = root / "p1.md"
    stat = page.stat()
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    [touched] = ingest(config, instance)
    assert touched.not_run is None and touched.counts["unchanged"] == 6
    [settled] = ingest(config, instance)
    assert settled.not_run is not None
    (root / "new.md").write_text("# New\n\nA new page.\n")
    [added] = ingest(config, instance)
    assert added.not_run is None and added.counts["added"] == 1
    rechunked = write_config({"kb": root}, chunking={"strategy": "fixed"})
    [changed] = ingest(rechunked, instance)
    assert changed.not_run is None


def test_a_refused_switch_is_never_skipped(built, monkeypatch):
    config, instance, root = built
    from rag_pipeline.core.storage import open_store

    open_store(config.storage).ledger.record_source_run("kb", str(root), "r-refused", failure="coverage: 1 document(s)")
    [run] = ingest(config, instance)
    assert run.not_run is None and run.success


def test_a_touched_file_is_read_again_but_not_ingested_again(built):
    """Its time changed, its bytes did not: the run that follows hashes it and finds nothing to parse,
    chunk or embed."""
    config, instance, root = built
    page = root / "p2.md"
    stat = page.stat()
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    [touched] = ingest(config, instance)
    assert touched.not_run is None and touched.success
    assert (touched.counts["changed"], touched.counts["unchanged"]) == (0, 6)
    assert (touched.counts["parsed"], touched.counts["chunked"], touched.counts["embedded"]) == (0, 0, 0)


def test_an_edit_that_keeps_the_size_is_seen(built):
    """Same number of bytes, other content: the size cannot tell, the modification time does. The
    time is set one millisecond later explicitly, as a file system with a coarse clock (FAT: 2 s,
    ext3: 1 s) could give the edit the time of the version before; an edit that keeps size and time
    to the nanosecond is not seen (inputs.py, as make and rsync), `--force` runs anyway."""
    config, instance, root = built
    page = root / "p3.md"
    before, stat = page.read_text(), page.stat()
    after = before.replace("topic number 3", "topic number 9")
    assert len(after.encode()) == len(before.encode()) and after != before
    page.write_text(after)
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert page.stat().st_size == stat.st_size
    [edited] = ingest(config, instance)
    assert edited.not_run is None and edited.success
    assert (edited.counts["changed"], edited.counts["parsed"]) == (1, 1)
    [settled] = ingest(config, instance)
    assert settled.not_run is not None
