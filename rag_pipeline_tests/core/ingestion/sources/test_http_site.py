"""A site source against a real HTTP server on 127.0.0.1 serving a generated site: conditional
requests, robots.txt, a redirect, main content only, a page removed, a 500, a 503 retried, a server
stopped mid-crawl or never answering, a sitemap that is not one."""

from __future__ import annotations

import re

import pytest

from rag_pipeline.config import DocumentLimits, SourceConfig
from rag_pipeline.config.source_kinds import HttpSourceConfig
from rag_pipeline.core.ingestion.sources.base import SourceUnavailableError
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.core.ingestion.sources.helpers import found, ingest, served
from rag_pipeline_tests.core.ingestion.sources.site_server import Page, Site, SiteServer

WORDS = ("albatross", "barracuda", "cormorant", "dolphin", "egret", "flamingo")


@pytest.fixture
def site():
    site = Site()
    for word in WORDS:
        site.html(f"/docs/{word}.html", f"About {word}", f"The {word} is described on this page at length.")
    site.html("/private/secret.html", "Secret", "A kiwi page robots.txt forbids.")
    site.pages["/old-dolphin.html"] = Page(b"", status=301, location="/docs/dolphin.html")
    site.in_sitemap.add("/old-dolphin.html")
    server = SiteServer(site)
    yield site, server
    server.stop()


def source_for(server: SiteServer, **http) -> SourceConfig:
    settings = {"sitemap": f"{server.url}/sitemap.xml", "backoff_seconds": 0.01, "retries": 1,
                "requests_per_second": 1000, "timeout_seconds": 5, **http}
    return SourceConfig(name="site", http=HttpSourceConfig(**settings))


def pages(site: Site) -> list[str]:
    return [path for path, status in site.requests if path.startswith("/docs/")]


def test_a_sitemap_crawl_serves_main_content_and_a_no_change_crawl_downloads_no_page_body(site, tmp_path):
    site, server = site
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = source_for(server)
    reports = ingest(source, store, "r1")
    assert reports["indexed"].switched
    assert served(store, "site") == {f"site:docs/{w}.html" for w in WORDS}  # the redirect served once, under its target
    assert found(store, "barracuda") == {"site:docs/barracuda.html"}
    # Navigation, header and footer are not content; robots.txt kept the private page out.
    assert found(store, "navigationword") == found(store, "footerword") == found(store, "banner") == set()
    assert found(store, "kiwi") == set() and not any(p.startswith("/private/") for p, _ in site.requests)

    site.requests.clear()
    site.page_bodies_sent = 0
    reports = ingest(source, store, "r2")
    assert site.page_bodies_sent == 0
    assert {status for path, status in site.requests if path.startswith("/docs/")} == {304}
    assert reports["discovered"].counts["unchanged"] == len(WORDS)

    site.html("/docs/egret.html", "About egret", "The egret now wades in the estuary.")
    site.requests.clear()
    site.page_bodies_sent = 0
    reports = ingest(source, store, "r3")
    assert site.page_bodies_sent == 1  # the changed page only, downloaded once for discovery and parsing
    assert reports["discovered"].counts["changed"] == 1
    assert found(store, "estuary") == {"site:docs/egret.html"}


def test_a_page_removed_from_the_sitemap_and_answering_404_is_deleted_and_proven_gone(site, tmp_path):
    site, server = site
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = source_for(server)
    ingest(source, store, "r1")
    del site.pages["/docs/flamingo.html"]
    site.in_sitemap.discard("/docs/flamingo.html")
    reports = ingest(source, store, "r2")
    assert reports["discovered"].counts["deleted"] == 1
    assert reports["indexed"].deletions.passed
    assert found(store, "flamingo") == set()
    assert "site:docs/flamingo.html" not in served(store, "site")


def test_a_page_the_sitemap_still_lists_that_answers_404_fails_alone_and_stays_served(site, tmp_path):
    site, server = site
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = source_for(server)
    ingest(source, store, "r1")
    site.pages["/docs/flamingo.html"] = Page(b"", status=404)
    reports = ingest(source, store, "r2")
    [failure] = reports["discovered"].failures
    assert failure.doc_id == "site:docs/flamingo.html" and "answers HTTP 404 while the sitemap still lists it" in failure.reason
    assert found(store, "flamingo") == {"site:docs/flamingo.html"}


@pytest.mark.parametrize("fault", ["a 500", "the server stopped mid-crawl"])
def test_a_failing_or_vanished_server_fails_the_run_and_deletes_nothing(site, tmp_path, fault):
    site, server = site
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = source_for(server)
    ingest(source, store, "r1")
    before = served(store, "site")
    if fault == "a 500":
        site.failing["/docs/cormorant.html"] = 500
        says = "cormorant.html failed: HTTP 500 (after 2 attempts)"
    else:
        site.stop_after = len(site.requests) + 4  # robots.txt, the sitemap, two pages, then nothing
        says = "failed: "
    with pytest.raises(SourceUnavailableError, match=re.escape(says)) as raised:
        ingest(source, store, "r2")
    assert "nothing was deleted" in str(raised.value)
    assert served(store, "site") == before
    assert found(store, "albatross") == {"site:docs/albatross.html"}


def test_a_crawl_from_a_start_page_follows_links_within_scope_up_to_max_pages(site, tmp_path):
    site, server = site
    site.html("/index.html", "Home", "Welcome home page.", links=tuple(f"/docs/{w}.html" for w in WORDS) + (
        "http://elsewhere.invalid/x.html", "/docs/excluded-heron.html"))
    site.html("/docs/excluded-heron.html", "Heron", "A heron page the exclude pattern keeps out.")
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = source_for(server, sitemap=None, start_url=f"{server.url}/index.html", exclude=["heron"])
    ingest(source, store, "r1")
    assert served(store, "site") == {"site:index.html", *(f"site:docs/{w}.html" for w in WORDS)}
    assert found(store, "heron") == set()
    # A page limit leaves the listing incomplete: what the crawl did not reach stays served.
    limited = source_for(server, sitemap=None, start_url=f"{server.url}/index.html", exclude=["heron"], max_pages=3)
    reports = ingest(limited, store, "r2")
    assert reports["discovered"].counts["deleted"] == 0
    assert "http.max_pages: 3" in reports["discovered"].details["listing_incomplete"][0]
    assert len(served(store, "site")) == 1 + len(WORDS)


def test_a_body_over_the_size_limit_is_refused_alone(site, tmp_path):
    site, server = site
    site.html("/docs/huge.html", "Huge", "whale " * 200_000)
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    source = source_for(server).model_copy(update={"limits": DocumentLimits(max_file_mb=0.5)})
    reports = ingest(source, store, "r1")
    [failure] = reports["discovered"].failures
    assert failure.doc_id == "site:docs/huge.html" and "over the 0.5 MB limit" in failure.reason
    assert found(store, "albatross") == {"site:docs/albatross.html"}


def test_a_page_answering_503_once_is_fetched_again_after_a_backoff(site, tmp_path):
    site, server = site
    site.failing_next["/docs/egret.html"] = [503]
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    ingest(source_for(server), store, "r1")
    assert served(store, "site") == {f"site:docs/{w}.html" for w in WORDS}
    assert found(store, "egret") == {"site:docs/egret.html"}
    assert [status for path, status in site.requests if path == "/docs/egret.html"] == [503, 200]


def test_a_server_that_never_answers_fails_the_run_after_its_timeout_and_deletes_nothing(site, tmp_path):
    site, server = site
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    ingest(source_for(server, timeout_seconds=0.5), store, "r1")
    before = served(store, "site")
    site.hanging.add("/docs/barracuda.html")
    site.pages["/docs/barracuda.html"].body += b"<p>changed, so that it is fetched again</p>"
    with pytest.raises(SourceUnavailableError, match=re.escape("barracuda.html failed: no answer within 0.5 s (after 2 attempts)")):
        ingest(source_for(server, timeout_seconds=0.5), store, "r2")
    assert served(store, "site") == before and found(store, "barracuda") == {"site:docs/barracuda.html"}


@pytest.mark.parametrize(("body", "says"), [
    (b"<html><body>Please log in</body></html>", "is not a sitemap (its root element is <html>"),
    (b"this is not XML at all <", "is not XML"),
])
def test_a_sitemap_that_is_not_one_fails_the_run_naming_it_and_deletes_nothing(site, tmp_path, body, says):
    site, server = site
    store = duckdb_store(tmp_path / "store" / "index.duckdb")
    ingest(source_for(server), store, "r1")
    before = served(store, "site")
    site.sitemap_body = body
    with pytest.raises(SourceUnavailableError, match=re.escape(f"sitemap {server.url}/sitemap.xml {says}")) as raised:
        ingest(source_for(server), store, "r2")
    assert "nothing was deleted" in str(raised.value)
    assert served(store, "site") == before
