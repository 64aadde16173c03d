"""A docs team's first runs, through the real command line: a source of files the pipeline does not
read fails loudly (exit 1, the types and what to do) and keeps what it served; excluded files do
not count; every long stage's progress reaches the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import yaml

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli


def _config(tmp_path: Path, root: Path, **source) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"name": "docs", "path": str(root), **source}],
                                    "embedding": {"kind": "hashing"},
                                    "storage": {"path": str(tmp_path / "index.duckdb")}}))
    return path


def _served(tmp_path: Path) -> set[str]:
    with duckdb.connect(str(tmp_path / "index.duckdb"), read_only=True) as con:
        return {row[0] for row in con.execute("SELECT doc_id FROM documents").fetchall()}


def test_a_source_of_types_it_does_not_read_fails_loudly_and_keeps_what_it_served(tmp_path):
    root = write_tree(tmp_path / "docs", {"requirements.txt": "click>=8\nsphinx>=7\n",
                                          "dev-requirements.txt": "pytest>=8\n"})
    config = _config(tmp_path, root)
    first = run_cli("ingest", "--config", str(config))
    assert first.returncode == 0, first.stderr[-2000:]
    assert _served(tmp_path) == {"docs:requirements.txt", "docs:dev-requirements.txt"}
    # The team's pages arrive in a format the pipeline does not read, with a Makefile.
    write_tree(root, {f"guide/page{n}.foo": f"Page {n}\n======\n\nHow to do thing {n}.\n" for n in range(12)})
    write_tree(root, {"Makefile": "html:\n\tsphinx-build . _build\n"})
    sentence = ("13 of 15 files are of types this pipeline does not read: .foo 12, (no extension) 1; exclude them in "
                "the source's config (exclude: ['*.foo', 'Makefile']) or convert them")
    out = run_cli("ingest", "--config", str(config))
    assert out.returncode == 1
    assert f"RUN FAILED docs: source_documents: source 'docs': {sentence}" in out.stdout
    report = json.loads(run_cli("ingest", "--config", str(config), "--json").stdout)["sources"]["docs"]
    assert report["success"] is False and sentence in report["error"]
    assert report["skipped_files"] == [] and report["skipped_by_reason"] == {}  # nothing of this run was staged
    assert _served(tmp_path) == {"docs:requirements.txt", "docs:dev-requirements.txt"}

    # Excluded as the sentence says: those files are not counted, and two images alone do not fail it.
    write_tree(root, {"img/a.png": b"\x89PNG", "img/b.png": b"\x89PNG"})
    excluded = _config(tmp_path, root, exclude=["*.foo", "Makefile"])
    out = run_cli("ingest", "--config", str(excluded), "--json")
    assert out.returncode == 0, out.stdout[-2000:]
    report = json.loads(out.stdout)["sources"]["docs"]
    assert report["skipped"] == 2 and report["skipped_by_reason"] == {"unsupported file type '.png'": 2}
    assert {item["doc_id"] for item in report["skipped_files"]} == {"docs:img/a.png", "docs:img/b.png"}


def test_every_long_stage_reports_its_progress_on_the_terminal(tmp_path):
    pages = {f"page{n:02}.md": f"# Page {n}\n\nThis page explains topic {n} of the product in some detail.\n"
             for n in range(25)}
    config = _config(tmp_path, write_tree(tmp_path / "docs", pages))
    out = run_cli("ingest", "--config", str(config))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    for stage in ("discovery", "parsing", "chunking", "probing"):
        assert any(line.startswith(f"docs: {stage}: 25/25 (100%), ") and line.endswith("/s, done") for line in lines), \
            (stage, out.stderr[-3000:])
    assert any(line.startswith("docs: embedding: ") and line.endswith(", done") for line in lines), out.stderr[-3000:]
    # --json keeps the terminal for the report: no progress line is printed.
    again = run_cli("ingest", "--config", str(config), "--json", "--force")
    assert again.returncode == 0 and "(100%)" not in again.stderr
