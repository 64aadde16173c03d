"""A git source through Dagster, in process: the commit on the run's tags and in the outcome, the
same checks as a folder's, and a ref that cannot be read failing the run with nothing deleted."""

from __future__ import annotations

import dagster as dg
import yaml

from rag_pipeline.cli.runner import ingest
from rag_pipeline.config import load_config
from rag_pipeline.core.storage import open_store
from rag_pipeline.defs.common import REVISION_TAG
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.core.ingestion.sources.test_git_source import commit, git, page


def test_a_git_source_runs_through_dagster_with_its_commit_on_the_run(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {f"docs/{w}.md": page(w) for w in ("ibis", "jackal", "kudu")})
    first = commit(repo, "first")

    def config_for(ref: str):
        path = tmp_path / f"pipeline-{ref}.yaml"  # one file per ref: the resource caches a loaded config by path
        path.write_text(yaml.safe_dump({
            "sources": [{"name": "handbook", "git": {"repo": "repo", "ref": ref, "path": "docs"}}],
            "embedding": {"kind": "hashing"}, "storage": {"path": "store/index.duckdb"}}))
        return load_config(path)

    instance = dg.DagsterInstance.ephemeral()
    [run] = ingest(config_for("main"), instance)
    assert run.success, run.error
    assert run.revision == first and run.as_json()["revision"] == first
    assert run.counts["queryable"] == 3
    assert run.checks == {"coverage": True, "deletions_propagated": True, "sources_fresh": True,
                          "no_failed_documents": True, "served_as_configured": True}
    assert len(instance.get_runs(filters=dg.RunsFilter(tags={REVISION_TAG: first}))) == 1

    git(repo, "rm", "-q", "docs/kudu.md")
    second = commit(repo, "second")
    [run] = ingest(config_for("main"), instance)
    assert run.success and run.revision == second and run.counts["deleted"] == 1

    [run] = ingest(config_for("no-such-ref"), instance)
    assert not run.success and "ref 'no-such-ref' names no commit" in run.error
    store = open_store(config_for("main").storage)
    assert {d["doc_id"] for d in store.served.indexed_documents("handbook")} == {"handbook:ibis.md", "handbook:jackal.md"}
    assert store.ledger.source_record("handbook")["root"].endswith(f"@{second}")
