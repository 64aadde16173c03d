"""SIGKILL a real ingestion at every stage boundary and inside the switch, on a real corpus change.

httpx docs 0.23.0 are indexed; the folder then holds 0.28.1 (11 pages added, 11 changed, 1
deleted, 1 unchanged) and a run is killed at one point. The index must then serve exactly one of
the two releases (never a mix), the ledger must not call a served page deleted, and the next
normal run must converge with no manual step: 23 pages queryable, every check passing, the counts
true, and the killed Dagster run closed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.faults import KILL_AT_ENV, KILL_POINTS
from rag_pipeline.core.ingestion.discovery import SUPPORTED_TYPES, is_html_template
from rag_pipeline_tests.conftest import HTTPX_V023, HTTPX_V028, require
from rag_pipeline_tests.e2e.cli import run_cli

pytestmark = pytest.mark.slow


def _release_hashes(folder: Path) -> dict[str, str]:
    """doc id -> sha256 of every document of a release (supported types; the mkdocs template is not one)."""
    return {
        f"httpx:{p.relative_to(folder).as_posix()}": hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix in SUPPORTED_TYPES and not is_html_template(p.read_bytes())
    }


def _served(db: Path) -> dict[str, str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return dict(con.execute("SELECT doc_id, content_hash FROM documents").fetchall())


def _deleted_in_ledger(db: Path) -> set[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {d for (d,) in con.execute("SELECT doc_id FROM ledger WHERE stage = 'deleted'").fetchall()}


def _write_config(folder: Path, embedding: dict) -> Path:
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "httpx", "path": str(folder / "docs")}],
        "embedding": embedding,
        "storage": {"path": str(folder / "store" / "index.duckdb")},
    }))
    return path


@pytest.fixture(scope="module")
def releases():
    return _release_hashes(require(HTTPX_V023)), _release_hashes(require(HTTPX_V028))


@pytest.fixture(scope="module")
def indexed_v023(tmp_path_factory):
    """One ingestion of 0.23.0 per embedder, copied for every kill point."""
    built = {}

    def build(kind: str) -> Path:
        if kind not in built:
            base = tmp_path_factory.mktemp(f"base_{kind}")
            shutil.copytree(HTTPX_V023, base / "docs")
            embedding = {"kind": "hashing"} if kind == "hashing" else {}
            config = _write_config(base, embedding)
            # The instance settings `make demo` and `make ui` use: pool `store` at 1, as in production.
            # Without them a killed switch's pool slot binds nothing and the test would miss that it stays claimed.
            (base / "dagster_home").mkdir()
            shutil.copy(PROJECT_ROOT / "dagster.yaml", base / "dagster_home" / "dagster.yaml")
            out = run_cli("ingest", "--config", str(config), env={"DAGSTER_HOME": str(base / "dagster_home")})
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
            built[kind] = base
        return built[kind]

    return build


CASES = [(point, "hashing") for point in KILL_POINTS] + [("switch:replaced", "model")]


@pytest.mark.parametrize(("point", "embedder"), CASES, ids=[f"{p}-{e}" for p, e in CASES])
def test_a_kill_leaves_one_release_and_the_next_run_converges(point, embedder, indexed_v023, releases, tmp_path):
    v023, v028 = releases
    shutil.copytree(indexed_v023(embedder), tmp_path, dirs_exist_ok=True)
    shutil.rmtree(tmp_path / "docs")
    shutil.copytree(HTTPX_V028, tmp_path / "docs")
    config = _write_config(tmp_path, {"kind": "hashing"} if embedder == "hashing" else {})
    db = tmp_path / "store" / "index.duckdb"
    env = {"DAGSTER_HOME": str(tmp_path / "dagster_home")}

    killed = run_cli("ingest", "--config", str(config), env={**env, KILL_AT_ENV: point})
    assert killed.returncode == -9, f"the run did not reach {point}: {killed.stdout[-2000:]}{killed.stderr[-2000:]}"

    served = _served(db)
    assert served in (v023, v028), f"after a kill at {point} the index serves a mix of the two releases"
    assert not (_deleted_in_ledger(db) & set(served)), "the ledger calls a served page deleted"

    # A run of the killed process left open would hold its partition and the store pool: a bound
    # turns a hang into a failure.
    again = run_cli("ingest", "--config", str(config), "--json", env=env, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    report = json.loads(again.stdout)["sources"]["httpx"]
    # Killed after its commit, the run left nothing to do: the next one finds the committed inputs
    # and evaluates the checks that depend on the store without running.
    expected_checks = {"coverage": True, "no_failed_documents": True} if report["not_run"] else \
        {"coverage": True, "deletions_propagated": True, "sources_fresh": True, "no_failed_documents": True,
         "served_as_configured": True}
    assert report["checks"] == expected_checks
    assert (report["not_run"] is not None) == (point == "switch:committed"), report["not_run"]
    assert (report["discovered"], report["queryable"], report["failed"]) == (23, 23, 0)
    # The counts are measured against what was served when the run started, so they are true.
    expected = (11, 11, 1, 1) if served == v023 else (0, 0, 0, 23)
    assert (report["added"], report["changed"], report["deleted"], report["unchanged"]) == expected
    assert _served(db) == v028
    # The page that left, and the two skipped scripts that left with it: every name gone is recorded.
    assert _deleted_in_ledger(db) == {"httpx:advanced.md", "httpx:js/chat.js", "httpx:js/sidecar-1.5.0.js"}

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        statuses = [r.status for r in instance.get_runs()]
    assert dg.DagsterRunStatus.STARTED not in statuses, "the killed run was left STARTED"
    assert statuses.count(dg.DagsterRunStatus.FAILURE) == 1  # the killed run, closed with its reason


def test_a_kill_inside_the_switch_on_postgresql_leaves_one_release_and_converges(releases, tmp_path, request):
    """The same on PostgreSQL: the server rolls back the transaction of a client that died."""
    import psycopg2

    from rag_pipeline_tests.conftest import new_pg_schema

    v023, v028 = releases
    dsn, schema = request.getfixturevalue("pg_dsn"), new_pg_schema()
    shutil.copytree(HTTPX_V023, tmp_path / "docs")
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "httpx", "path": str(tmp_path / "docs")}], "embedding": {"kind": "hashing"},
        "storage": {"backend": "postgres", "pg_schema": schema, "path": str(tmp_path / "store" / "index.duckdb")},
    }))
    (tmp_path / "dagster_home").mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", tmp_path / "dagster_home" / "dagster.yaml")
    env = {"DAGSTER_HOME": str(tmp_path / "dagster_home"), "RAG_PIPELINE_PG_DSN": dsn}

    def served() -> dict[str, str]:
        with psycopg2.connect(dsn) as con, con.cursor() as cursor:
            cursor.execute(f"SELECT doc_id, content_hash FROM {schema}.documents")
            return dict(cursor.fetchall())

    first = run_cli("ingest", "--config", str(config), env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert served() == v023
    shutil.rmtree(tmp_path / "docs")
    shutil.copytree(HTTPX_V028, tmp_path / "docs")
    killed = run_cli("ingest", "--config", str(config), env={**env, KILL_AT_ENV: "switch:replaced"})
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert served() == v023, "a kill inside the switch changed what PostgreSQL serves"
    again = run_cli("ingest", "--config", str(config), "--json", env=env, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    report = json.loads(again.stdout)["sources"]["httpx"]
    assert (report["discovered"], report["queryable"], report["failed"]) == (23, 23, 0)
    assert (report["added"], report["changed"], report["deleted"], report["unchanged"]) == (11, 11, 1, 1)
    assert served() == v028
