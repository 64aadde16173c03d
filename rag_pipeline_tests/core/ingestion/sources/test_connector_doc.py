"""The example connector of docs/sources.md, run as written there: installed as a distribution
whose entry point is in the group `rag_pipeline.sources`, found by name from the config."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rag_pipeline.config import PROJECT_ROOT, SourceConfig
from rag_pipeline.config.source_kinds import ConnectorConfig
from rag_pipeline.core.ingestion.sources.registry import ENTRY_POINT_GROUP, ConnectorError, connector_names
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.core.ingestion.sources.helpers import found, ingest, served

DOC = PROJECT_ROOT / "docs" / "sources.md"


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL)
    [block] = [b for b in blocks if containing in b]
    return block


@pytest.fixture
def installed(tmp_path: Path, monkeypatch) -> str:
    """The doc's module and a dist-info carrying the doc's entry point, on sys.path."""
    toml = _block("toml", ENTRY_POINT_GROUP)
    name, target = re.search(r'^(\w+) = "([\w.:]+)"', toml, re.MULTILINE).groups()
    module = target.split(":")[0]
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(_block("python", "class NotesSource"))
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {target}\n")
    monkeypatch.syspath_prepend(str(site))
    return name


def _export(path: Path, notes: list[dict]) -> None:
    path.write_text(json.dumps(notes))


def test_the_documented_connector_is_found_by_its_entry_point_and_ingested(installed, tmp_path):
    assert installed in connector_names()
    export = tmp_path / "notes.json"
    notes = [{"id": i, "title": f"Note {word}", "body": f"All about the {word} in several words.", "updated": 1,
              "team": "ops"} for i, word in enumerate(["quokka", "wombat", "dingo", "emu", "koala"])]
    _export(export, notes)
    source = SourceConfig(name="team_notes", connector=ConnectorConfig(name=installed, options={"export": str(export)}))
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    reports = ingest(source, store, "r1")
    assert reports["indexed"].switched
    assert served(store, "team_notes") == {f"team_notes:{i}.md" for i in range(5)}
    assert found(store, "quokka") == {"team_notes:0.md"}
    assert {d["tenant"] for d in store.served.indexed_documents("team_notes")} == {"ops"}

    notes[1] = {**notes[1], "body": "The wombat now digs burrows.", "updated": 2}
    del notes[0]
    _export(export, notes)
    reports = ingest(source, store, "r2")
    counts = reports["discovered"].counts
    assert (counts["changed"], counts["unchanged"], counts["deleted"]) == (1, 3, 1)
    assert reports["indexed"].deletions.passed
    assert found(store, "quokka") == set()
    assert found(store, "burrows") == {"team_notes:1.md"}


def test_a_connector_nobody_installed_fails_with_the_installed_names(installed, tmp_path):
    source = SourceConfig(name="other", connector=ConnectorConfig(name="confluence"))
    with pytest.raises(ConnectorError, match=rf"no connector 'confluence' is installed .*installed: .*{installed}"):
        ingest(source, duckdb_store(tmp_path / "index.duckdb"), "r1")


def test_an_unreadable_export_fails_the_run_and_deletes_nothing(installed, tmp_path):
    export = tmp_path / "notes.json"
    _export(export, [{"id": i, "title": "T", "body": f"word{i} text", "updated": 1, "team": "ops"} for i in range(3)])
    source = SourceConfig(name="team_notes", connector=ConnectorConfig(name=installed, options={"export": str(export)}))
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    ingest(source, store, "r1")
    export.write_text("{not json")
    with pytest.raises(Exception, match="cannot be read") as raised:
        ingest(source, store, "r2")
    assert raised.type.__name__ == "SourceUnavailableError"
    assert len(served(store, "team_notes")) == 3
