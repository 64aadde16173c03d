"""What listed sources cost on the source's side: a web site of 1,000 pages over HTTP and a git
ref of 10,000 files, each discovered (listed, changed documents fetched, hashed, staged) as a run's
first stage does it. Parsing, embedding and the switch are those of any source (benchmarks/ingest.py).

    python benchmarks/sources.py [--pages 1000] [--files 10000] [--rounds 3] [--page]

HTTP: a real server on 127.0.0.1 (the tests' `site_server`) serves generated pages with ETag and
Last-Modified; reported for the full crawl, a no-change crawl and a crawl after one page changed:
requests made, page bodies and bytes downloaded, seconds. git: a repository made here; reported
for the first discovery, a no-change one and one after a one-file commit: blobs read, seconds.
Each discovery is timed on the wall and in CPU seconds of this process tree (performance_page.tree_cpu);
the whole runs `--rounds` times (3 unless told), medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rag_pipeline.api import LifecycleConfig, SourceConfig, duckdb_store
from rag_pipeline.config.source_kinds import GitSourceConfig, HttpSourceConfig
from rag_pipeline.core.ingestion.sources.git import GitSource
from rag_pipeline.core.ingestion.stages import discover_source
from rag_pipeline_tests.core.ingestion.sources.site_server import Site, SiteServer


def _discover(source: SourceConfig, store, tree) -> dict:
    """One discovery: wall seconds, and CPU seconds of this process tree (`tree.so_far()` difference)."""
    started, cpu_started = time.perf_counter(), tree.so_far()
    discover_source(source, store, LifecycleConfig(), "bench")
    return {"seconds": round(time.perf_counter() - started, 2), "cpu_s": round(tree.so_far() - cpu_started, 2)}


def http_figures(pages: int, folder: Path, tree) -> list[dict]:
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
            timing = _discover(source, store, tree)
            rows.append({"case": label, "requests": len(site.requests), "page_bodies": site.page_bodies_sent,
                         "bytes": site.body_bytes_sent, **timing})
        return rows
    finally:
        server.stop()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.org", *args],
                   check=True, capture_output=True)


def git_figures(files: int, folder: Path, tree) -> list[dict]:
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
            timing = _discover(source, store, tree)
            rows.append({"case": label, "blobs_read": fetched[0], **timing})
    finally:
        GitSource.fetch = original
    return rows


def combine(rounds: list[list[dict]]) -> list[dict]:
    """Per case: its counts (the first round's; `same` says whether every round had them), the
    medians of seconds and CPU seconds over the rounds, and each round's (seconds, CPU s)."""
    rows = []
    for cases in zip(*rounds):
        counts = {k: v for k, v in cases[0].items() if k not in ("seconds", "cpu_s")}
        rows.append({**counts, "seconds": statistics.median(c["seconds"] for c in cases),
                     "cpu_s": statistics.median(c["cpu_s"] for c in cases),
                     "rounds": [(c["seconds"], c["cpu_s"]) for c in cases],
                     "same": all({k: c[k] for k in counts} == counts for c in cases)})
    return rows


def _each(row: dict) -> str:
    return "; ".join(f"{s:.2f}, {c:.2f}" for s, c in row["rounds"])


def render(pages: int, http: list[dict], files: int, git: list[dict], load: list[tuple], cpu_method: str) -> str:
    """The section of docs/performance.md: the two tables and what they leave out."""
    lines = [
        "Discovery only, as a run's first stage does it (list, fetch what changed, hash, stage): parsing, "
        "embedding and the switch cost what they cost for any source. HTTP against a real server on "
        "127.0.0.1 with a sitemap, ETag and Last-Modified; the requests include robots.txt and the sitemap, "
        "whose bodies are the bytes a no-change crawl still downloads. "
        f"{len(http[0]['rounds'])} rounds, each on a new site, repository and store; medians over the rounds. Seconds "
        "on the wall; CPU s of this process tree (the site's server is a thread of it, git runs as its children), "
        f"measured by {cpu_method}.",
        "", f"| HTTP, {pages:,} pages | requests | page bodies | bytes | seconds | CPU s | each round (s, CPU s) |",
        "|---|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['case']} | {r['requests']:,} | {r['page_bodies']:,} | {r['bytes']:,} | {r['seconds']:.2f} | "
              f"{r['cpu_s']:.2f} | {_each(r)} |" for r in http]
    lines += ["", f"| git, {files:,} files | blobs read | seconds | CPU s | each round (s, CPU s) |", "|---|---:|---:|---:|---|"]
    lines += [f"| {r['case']} | {r['blobs_read']:,} | {r['seconds']:.2f} | {r['cpu_s']:.2f} | {_each(r)} |" for r in git]
    differing = [r["case"] for r in [*http, *git] if not r["same"]]
    lines += ["", "Requests, bodies, bytes and blobs the same in every round: "
              + ("yes." if not differing else "no, for " + ", ".join(differing) + " (the first round's shown).")]
    lines += ["", "Load average of the machine (1, 5, 15 min) at the start of each round, and at the end: "
              + "; ".join(", ".join(f"{x:.1f}" for x in each) for each in load) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    from performance_page import tree_cpu

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each on a new site, repository and store (medians)")
    parser.add_argument("--page", action="store_true", help="write the section of docs/performance.md")
    args = parser.parse_args()
    http_rounds, git_rounds, load = [], [], []
    with tree_cpu("sources") as tree:
        for _ in range(args.rounds):
            load.append(os.getloadavg())
            with tempfile.TemporaryDirectory() as tmp:
                http_rounds.append(http_figures(args.pages, Path(tmp), tree))
                git_rounds.append(git_figures(args.files, Path(tmp), tree))
    load.append(os.getloadavg())
    body = render(args.pages, combine(http_rounds), args.files, combine(git_rounds), load, tree.method)
    print(body)
    if args.page:
        from performance_page import write_section

        write_section("Sources other than folders: the source's side", body)


if __name__ == "__main__":
    main()
