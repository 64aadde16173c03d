"""A git source against a real repository made here: several commits, a rename, a deletion, a
force-push that moves the branch back, a mirror of a URL, and the failures that delete nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rag_pipeline.config import SourceConfig
from rag_pipeline.config.source_kinds import GitSourceConfig
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.ingestion.inputs import revision_of
from rag_pipeline.core.ingestion.sources.base import SourceUnavailableError
from rag_pipeline.core.ingestion.sources.git import GitSource
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.core.ingestion.sources.helpers import found, ingest, served


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
                          ).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


# Pages no commit changes: enough of them that a commit deleting two pages is under the mass-delete limit.
FILLER = ("kestrel.md", "lemur.md", "marmot.md", "narwhal.md")
KEPT = {f"handbook:{name}" for name in FILLER}


def page(word: str, body: str = "") -> str:
    return f"# About {word}\n\nThis page explains {word} in enough words to be indexed. {body}\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {"docs/alpha.md": page("aardvark"), "docs/beta.md": page("bison"),
                      "docs/guide/gamma.md": page("caracal"), "README.md": page("outsider"),
                      **{f"docs/{name}": page(name[:-3]) for name in FILLER}})
    commit(repo, "first")
    return repo


def git_source(repo: str | Path, ref: str = "main", folder: str = "docs") -> SourceConfig:
    return SourceConfig(name="handbook", git=GitSourceConfig(repo=str(repo), ref=ref, path=folder))


def test_commits_rename_deletion_and_force_push_back_are_served_as_the_ref_says(repo, tmp_path):
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = git_source(repo)
    first = git(repo, "rev-parse", "HEAD")
    reports = ingest(source, store, "r1")
    assert reports["indexed"].switched
    assert served(store, "handbook") - KEPT == {"handbook:alpha.md", "handbook:beta.md", "handbook:guide/gamma.md"}
    assert found(store, "aardvark") == {"handbook:alpha.md"}
    assert found(store, "outsider") == set()  # outside git.path
    # The commit is the source's revision: in the discovery's report, the inputs, the ledger, the state.
    assert reports["discovered"].revision == first
    assert revision_of(store.staging.committed_inputs("handbook")) == first
    assert store.ledger.source_record("handbook")["root"] == f"git {repo} main:docs@{first}"
    assert store.states.latest("handbook").revision == first

    # Second commit: beta edited, gamma renamed to delta, alpha deleted.
    write_tree(repo, {"docs/beta.md": page("bison", "Now with buffalo.")})
    git(repo, "mv", "docs/guide/gamma.md", "docs/delta.md")
    git(repo, "rm", "-q", "docs/alpha.md")
    second = commit(repo, "second")
    fetched: list[str] = []
    original = GitSource.fetch

    def counting(self, document):
        fetched.append(document.rel_path)
        return original(self, document)

    GitSource.fetch = counting
    try:
        reports = ingest(source, store, "r2")
    finally:
        GitSource.fetch = original
    counts = reports["discovered"].counts
    assert (counts["added"], counts["changed"], counts["unchanged"], counts["deleted"]) == (1, 1, len(FILLER), 2)
    # Only the blobs that differ were read: beta for discovery and parsing, delta (the renamed blob) likewise.
    assert sorted(set(fetched)) == ["beta.md", "delta.md"]
    assert reports["indexed"].switched and reports["indexed"].deletions.passed
    assert served(store, "handbook") - KEPT == {"handbook:beta.md", "handbook:delta.md"}
    assert found(store, "aardvark") == set()  # the deleted page is gone from search
    assert found(store, "buffalo") == {"handbook:beta.md"}
    assert found(store, "caracal") == {"handbook:delta.md"}
    assert store.ledger.source_record("handbook")["root"].endswith(f"@{second}")

    # A force-push moves main back to the first commit: just another commit to serve.
    git(repo, "update-ref", "refs/heads/main", first)
    reports = ingest(source, store, "r3")
    assert reports["discovered"].revision == first
    assert served(store, "handbook") - KEPT == {"handbook:alpha.md", "handbook:beta.md", "handbook:guide/gamma.md"}
    assert found(store, "buffalo") == set() and found(store, "aardvark") == {"handbook:alpha.md"}
    assert found(store, "caracal") == {"handbook:guide/gamma.md"}


def test_the_working_copy_and_its_branch_are_never_touched(repo, tmp_path):
    git(repo, "checkout", "-q", "-b", "work")
    write_tree(repo, {"docs/beta.md": page("bison", "An uncommitted edit."), "docs/new.md": page("untracked")})
    status, head = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    ingest(git_source(repo), store, "r1")
    assert found(store, "uncommitted") == set() and found(store, "untracked") == set()
    assert git(repo, "status", "--porcelain") == status and git(repo, "rev-parse", "--abbrev-ref", "HEAD") == head
    assert (repo / "docs" / "beta.md").read_text().endswith("An uncommitted edit.\n")


def test_a_url_is_mirrored_into_the_source_cache_and_fetched_again_each_run(repo, tmp_path):
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = git_source(f"file://{repo}")
    ingest(source, store, "r1")
    assert (tmp_path / "store" / "source_cache" / "handbook" / "mirror.git" / "HEAD").exists()
    write_tree(repo, {"docs/epsilon.md": page("echidna")})
    head = commit(repo, "third")
    reports = ingest(source, store, "r2")
    assert reports["discovered"].revision == head
    assert found(store, "echidna") == {"handbook:epsilon.md"}


@pytest.mark.parametrize(("change", "error", "says"), [
    ("unknown ref", InputError, "ref 'no-such-branch' names no commit"),
    ("missing repository", SourceUnavailableError, "does not exist (moved, unmounted?); nothing was deleted"),
    ("missing folder", SourceUnavailableError, "folder 'gone' does not exist at main"),
    ("not a repository", SourceUnavailableError, "is not a git repository"),
])
def test_a_repository_that_cannot_be_read_fails_the_run_and_deletes_nothing(repo, tmp_path, change, error, says):
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    ingest(git_source(repo), store, "r1")
    before = served(store, "handbook")
    broken = {"unknown ref": git_source(repo, ref="no-such-branch"),
              "missing repository": git_source(tmp_path / "nowhere"),
              "missing folder": git_source(repo, folder="gone"),
              "not a repository": git_source(tmp_path / "store")}[change]
    with pytest.raises(error, match=re.escape(says)):
        ingest(broken, store, "r2")
    assert served(store, "handbook") == before == KEPT | {"handbook:alpha.md", "handbook:beta.md", "handbook:guide/gamma.md"}
    assert found(store, "aardvark") == {"handbook:alpha.md"}


def test_front_matter_and_sidecar_access_fields_work_and_fail_closed_as_in_folders(repo, tmp_path):
    write_tree(repo, {
        "docs/secret.md": "---\nvisibility: internal\nroles: [staff]\n---\n" + page("sealion"),
        "docs/bad.md": "---\nvisibility: secret\n---\n" + page("badger"),
        "docs/sided.txt": page("sidecar"), "docs/sided.txt.meta.yaml": "tenant: acme\n",
    })
    commit(repo, "access")
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    reports = ingest(git_source(repo), store, "r1")
    documents = {d["doc_id"]: d for d in store.served.indexed_documents("handbook")}
    assert documents["handbook:sided.txt"]["tenant"] == "acme"
    assert documents["handbook:secret.md"]["visibility"] == "internal"
    assert "handbook:bad.md" not in documents
    [failure] = [f for f in reports["discovered"].failures if f.doc_id == "handbook:bad.md"]
    assert "visibility" in failure.reason
