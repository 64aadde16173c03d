"""SIGKILL a real ingestion of a git source and of a web site, at stage boundaries and inside the
switch, on a real change of their documents (test_kill_anywhere.py does it for a folder).

git: a repository whose second commit renames, deletes, changes and adds pages, the source
following `main`; the branch moves to the second commit and a run is killed. The site: a
real HTTP server on 127.0.0.1 whose sitemap drops a page (now answering 404) while another page
changes. Either way the store must then serve exactly the old state or the new one, never a mix,
and the next normal run must serve what an uninterrupted run of the new state serves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rag_pipeline.core.faults import KILL_AT_ENV
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline.core.storage.contents import compare_contents, served_contents
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.core.ingestion.sources.site_server import Site, SiteServer
from rag_pipeline_tests.core.ingestion.sources.test_git_source import FILLER, commit, git, page
from rag_pipeline_tests.e2e.cli import run_cli

pytestmark = pytest.mark.slow
# Where a listed source can go wrong beyond a folder's: its listing state (ETags, the commit) kept
# before the switch, inside the switch, and after the commit (test_kill_anywhere.py has every point).
POINTS = ("discovered", "switch:replaced", "switch:committed")
# What a run's history adds beside what is served: compared apart from the served rows.
HISTORY = ("ledger", "embedding_cache")


def _config(folder: Path, source: dict) -> Path:
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"sources": [{"name": "docs", **source}], "embedding": {"kind": "hashing"},
                                    "storage": {"path": str(folder / "index.duckdb")}}))
    return path


def _ingest(config: Path, **env: str):
    return run_cli("ingest", "--config", str(config), "--json", env=env, timeout=300)


def _contents(folder: Path) -> dict:
    store = duckdb_store(folder / "index.duckdb")
    try:
        return served_contents(store)
    finally:
        store.close()


def _same(a: dict, b: dict) -> bool:
    return compare_contents(a, b, skip=HISTORY) == []


def _killed_then_converges(config: Path, point: str, states: dict[str, dict], folder: Path) -> dict:
    """Kill a run at `point`: one of the two `states` served, never a mix; then a normal run serves
    the new state. Returns that run's report of the source."""
    killed = _ingest(config, **{KILL_AT_ENV: point})
    assert killed.returncode == -9, f"the run did not reach {point}: {killed.stdout[-2000:]}{killed.stderr[-2000:]}"
    served = _contents(folder)
    assert _same(served, states["old"]) or _same(served, states["new"]), f"a mix after a kill at {point}"
    again = _ingest(config)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert compare_contents(_contents(folder), states["new"], skip=HISTORY) == []
    return json.loads(again.stdout)["sources"]["docs"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> tuple[Path, str, str]:
    """A repository whose second commit renames, deletes, changes and adds pages under docs/; its two commits."""
    repo = tmp_path_factory.mktemp("history") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {"docs/alpha.md": page("aardvark"), "docs/beta.md": page("bison"), "docs/gamma.md": page("caracal"),
                      **{f"docs/{name}": page(name[:-3]) for name in FILLER}})
    old = commit(repo, "first")
    git(repo, "mv", "docs/alpha.md", "docs/renamed-alpha.md")
    git(repo, "rm", "-q", "docs/beta.md")
    write_tree(repo, {"docs/gamma.md": page("caracal", "It changed in the second commit."),
                      "docs/delta.md": page("dugong")})
    new = commit(repo, "second")
    return repo, old, new


@pytest.fixture(scope="module")
def git_states(repository, tmp_path_factory) -> dict[str, dict]:
    """What an uninterrupted run serves at each commit."""
    repo, old, new = repository
    states = {}
    for name, ref in (("old", old), ("new", new)):
        folder = tmp_path_factory.mktemp(f"git_{name}")
        done = _ingest(_config(folder, {"git": {"repo": str(repo), "ref": ref, "path": "docs"}}))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        states[name] = _contents(folder)
    assert not _same(states["old"], states["new"])
    return states


@pytest.mark.parametrize("point", POINTS)
def test_a_killed_git_run_serves_one_commit_and_the_next_converges(point, repository, git_states, tmp_path):
    history, old, new = repository
    repo = tmp_path / "repo"
    shutil.copytree(history, repo)
    git(repo, "update-ref", "refs/heads/main", old)
    config = _config(tmp_path, {"git": {"repo": str(repo), "ref": "main", "path": "docs"}})
    assert _ingest(config).returncode == 0
    git(repo, "update-ref", "refs/heads/main", new)  # the branch moves to the second commit

    report = _killed_then_converges(config, point, git_states, tmp_path)
    assert report["failed"] == 0 and report["queryable"] == report["discovered"]


WORDS = ("albatross", "barracuda", "cormorant", "dolphin", "egret", "flamingo")


def _site(changed: bool) -> Site:
    """The site before (all six pages in the sitemap) or after the change (cormorant rewritten,
    egret gone from the sitemap and answering 404)."""
    site = Site()
    for word in WORDS:
        if changed and word == "egret":
            continue
        text = f"The {word} is described on this page at length."
        if changed and word == "cormorant":
            text = "The cormorant page was rewritten: it now says where cormorants nest."
        site.html(f"/docs/{word}.html", f"About {word}", text)
    return site


def _site_config(folder: Path, server: SiteServer) -> Path:
    return _config(folder, {"http": {"sitemap": f"{server.url}/sitemap.xml", "requests_per_second": 1000,
                                     "backoff_seconds": 0.01}})


@pytest.fixture(scope="module")
def site_states(tmp_path_factory) -> dict[str, dict]:
    states = {}
    for name, changed in (("old", False), ("new", True)):
        server = SiteServer(_site(changed))
        try:
            folder = tmp_path_factory.mktemp(f"site_{name}")
            done = _ingest(_site_config(folder, server))
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            states[name] = _contents(folder)
        finally:
            server.stop()
    assert not _same(states["old"], states["new"])
    return states


@pytest.mark.parametrize("point", POINTS)
def test_a_killed_site_run_serves_one_crawl_and_the_next_converges(point, site_states, tmp_path):
    before, after = _site(False), _site(True)
    server = SiteServer(before)
    try:
        config = _site_config(tmp_path, server)
        assert _ingest(config).returncode == 0
        server.site.pages, server.site.in_sitemap = after.pages, after.in_sitemap

        _killed_then_converges(config, point, site_states, tmp_path)
    finally:
        server.stop()
