"""What listed sources cost on the source's side: a web site of 1,000 pages over HTTP and a git
ref of 10,000 files, each discovered (listed, changed documents fetched, hashed, staged) as a run's
first stage does it. Parsing, embedding and the switch are those of any source (benchmarks/ingest.py).

    python benchmarks/sources.py [--pages 1000] [--files 10000] [--page]

HTTP: a real server on 127.0.0.1 (the tests' `site_server`) serves generated pages with ETag and
Last-Modified; reported for the full crawl, a no-change crawl and a crawl after one page changed:
requests made, page bodies and bytes downloaded, seconds. git: a repository made here; reported
for the first discovery, a no-change one and one after a one-file commit: blobs read, seconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from rag_pipeline.api import LifecycleConfig, SourceConfig, duckdb_store
from rag_pipeline.config.source_kinds import GitSourceConfig, HttpSourceConfig
from rag_pipeline.core.ingestion.sources.git import GitSource
from rag_pipeline.core.ingestion.stages import discover_source
from rag_pipeline_tests.core.ingestion.sources.site_server import Site, SiteServer


def _discover(source: SourceConfig, store) -> tuple[float, dict]:
    started = time.perf_counter()
    report = discover_source(source, store, LifecycleConfig(), "bench")
    return time.perf_counter() - started, report.counts


def http_figures(pages: int, folder: Path) -> list[dict]:
    site = Site()
    for i in range(pages):
        site.html(f"/docs/page-{i:04d}.html", f"Page {i}", f"Page {i} says something about topic {i}. " * 20)
    server = SiteServer(site)
    try:
        source = SourceConfig(name="site", http=HttpSourceConfig(sitemap=f"{server.url}/sitemap.xml",
                                                                  requests_per_second=1000))
        store = duckdb_store(folder / "http" / "index.duckdb")
        rows = []
        for label in ("full crawl", "no-change crawl", "one page changed"):
            if label == "one page changed":
                site.html("/docs/page-0007.html", "Page 7", "Page 7 was rewritten today. " * 20)
            site.requests.clear()
            site.page_bodies_sent = site.body_bytes_sent = 0
            seconds, _ = _discover(source, store)
            rows.append({"case": label, "requests": len(site.requests), "page_bodies": site.page_bodies_sent,
                         "bytes": site.body_bytes_sent, "seconds": round(seconds, 2)})
        return rows
    finally:
        server.stop()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.org", *args],
                   check=True, capture_output=True)


def git_figures(files: int, folder: Path) -> list[dict]:
    repo = folder / "repo"
    (repo / "docs").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        (repo / "docs" / f"doc-{i:05d}.md").write_text(f"# Document {i}\n\nDocument {i} is about subject {i}.\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    source = SourceConfig(name="repo", git=GitSourceConfig(repo=str(repo), ref="main", path="docs"))
    store = duckdb_store(folder / "git" / "index.duckdb")
    fetched = [0]
    original = GitSource.fetch

    def counting(self, document):
        fetched[0] += 1
        return original(self, document)

    GitSource.fetch = counting
    rows = []
    try:
        for label in ("first discovery", "no change", "one-file commit"):
            if label == "one-file commit":
                (repo / "docs" / "doc-00007.md").write_text("# Document 7\n\nRewritten.\n")
                _git(repo, "commit", "-q", "-am", "one file")
            fetched[0] = 0
            seconds, _ = _discover(source, store)
            rows.append({"case": label, "blobs_read": fetched[0], "seconds": round(seconds, 2)})
    finally:
        GitSource.fetch = original
    return rows


def render(pages: int, http: list[dict], files: int, git: list[dict], load: tuple[tuple, tuple]) -> str:
    """The section of docs/performance.md: the two tables and what they leave out."""
    lines = [
        "Discovery only, as a run's first stage does it (list, fetch what changed, hash, stage): parsing, "
        "embedding and the switch cost what they cost for any source. HTTP against a real server on "
        "127.0.0.1 with a sitemap, ETag and Last-Modified; the requests include robots.txt and the sitemap, "
        "whose bodies are the bytes a no-change crawl still downloads.",
        "", f"| HTTP, {pages:,} pages | requests | page bodies | bytes | seconds |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['requests']:,} | {r['page_bodies']:,} | {r['bytes']:,} | {r['seconds']} |" for r in http]
    lines += ["", f"| git, {files:,} files | blobs read | seconds |", "|---|---:|---:|"]
    lines += [f"| {r['case']} | {r['blobs_read']:,} | {r['seconds']} |" for r in git]
    (start, end) = load
    lines += ["", "Load average of the machine (1, 5, 15 min) at the start: " + ", ".join(f"{x:.1f}" for x in start)
              + "; at the end: " + ", ".join(f"{x:.1f}" for x in end) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--page", action="store_true", help="write the section of docs/performance.md")
    args = parser.parse_args()
    start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        http = http_figures(args.pages, Path(tmp))
        git = git_figures(args.files, Path(tmp))
    body = render(args.pages, http, args.files, git, (start, os.getloadavg()))
    print(body)
    if args.page:
        from performance_page import write_section

        write_section("Sources other than folders: the source's side", body)


if __name__ == "__main__":
    main()
