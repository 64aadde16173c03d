"""What a run says of a source that is not what it was: a path that never existed (a config
error, exit 2), a folder gone since its last success (an outage of that source alone, exit 1), a
file that cannot be read any more (unreadable, its last good version served), a skipped file
removed (recorded as deleted)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

pytestmark = pytest.mark.slow


def _config(tmp: Path, sources: dict[str, Path]) -> Path:
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"name": n, "path": str(p)} for n, p in sources.items()],
                                    "embedding": {"kind": "hashing"}, "storage": {"path": str(tmp / "store" / "index.duckdb")}}))
    return path


def test_a_source_path_that_never_existed_is_a_config_error(tmp_path):
    write_tree(tmp_path / "kb", {"a.md": "# A\n\ntext\n"})
    config = _config(tmp_path, {"kb": tmp_path / "kb", "typo": tmp_path / "dcos"})
    out = run_cli("ingest", "--config", str(config))
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert f"source 'typo': path {tmp_path / 'dcos'} does not exist, and nothing was ever indexed from it" in out.stderr
    assert f"fix its path in {config}" in out.stderr
    assert not (tmp_path / "store").exists()  # refused before anything was written


@pytest.fixture
def indexed(tmp_path):
    write_tree(tmp_path / "kb", {"a.md": "# Alpha\n\nAlpha explains refunds.\n", "b.md": "# Beta\n\nBeta explains exports.\n",
                                 "logo.png": b"\x89PNG\r\n"})
    write_tree(tmp_path / "other", {"c.md": "# Gamma\n\nGamma explains invoices.\n"})
    config = _config(tmp_path, {"kb": tmp_path / "kb", "other": tmp_path / "other"})
    out = run_cli("ingest", "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return tmp_path, config


def _served(tmp: Path) -> dict[str, str]:
    with duckdb.connect(str(tmp / "store" / "index.duckdb"), read_only=True) as con:
        return dict(con.execute("SELECT doc_id, content_hash FROM documents").fetchall())


def test_a_folder_gone_since_its_last_success_is_an_outage_of_that_source_alone(indexed):
    tmp, config = indexed
    before = _served(tmp)
    shutil.rmtree(tmp / "other")
    (tmp / "kb" / "new.md").write_text("# New\n\nA new page about payroll.\n")
    out = run_cli("ingest", "--config", str(config), "--json")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    sources = json.loads(out.stdout)["sources"]
    assert not sources["other"]["success"] and "does not exist (unmounted or moved?)" in sources["other"]["error"]
    assert sources["kb"]["success"] and sources["kb"]["added"] == 1
    assert _served(tmp)["other:c.md"] == before["other:c.md"]  # nothing of the vanished source was deleted


def test_an_unreadable_unchanged_file_counts_as_unreadable_and_keeps_its_version(indexed):
    tmp, config = indexed
    before = _served(tmp)
    (tmp / "kb" / "b.md").chmod(0)
    try:
        out = run_cli("ingest", "--config", str(config), "--json", unprivileged=True)
    finally:
        (tmp / "kb" / "b.md").chmod(0o644)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(out.stdout)["sources"]["kb"]
    assert (report["unreadable"], report["changed"], report["added"], report["unchanged"]) == (1, 0, 0, 1)
    assert [f["reason"] for f in report["failures"] if f["doc_id"] == "kb:b.md"] == [
        "cannot be read: permission denied (check the file's owner and mode)"]
    assert _served(tmp)["kb:b.md"] == before["kb:b.md"]


def test_a_removed_skipped_file_is_recorded_as_deleted(indexed):
    tmp, config = indexed
    (tmp / "kb" / "logo.png").unlink()
    out = run_cli("ingest", "--config", str(config), "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    with duckdb.connect(str(tmp / "store" / "index.duckdb"), read_only=True) as con:
        rows = dict(con.execute("SELECT stage, reason FROM ledger WHERE doc_id = 'kb:logo.png'").fetchall())
    assert rows["deleted"] == "no longer in the source (it was skipped: unsupported file type '.png')"
