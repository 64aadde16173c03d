"""A web site as a `DocumentSource`: the pages its sitemap lists, or those reached from a start
page by links within its host.

Each page is fetched with a conditional request (its ETag, its Last-Modified): a page that did not
change answers 304 and its body is not downloaded again. What a page said last (its validators,
the hash of its main content, its links) is kept in the source's cache folder with the main
content itself, so that parsing reads it from there and a crawl through unchanged pages still
knows their links. A page's version is the hash of its main content: a change of the site's menu
alone changes no page.

A 404 or 410 of a page the sitemap does not list (or of a crawled link) leaves it out of the
listing: it is deleted. A page the sitemap lists that answers 404, 401 or 403 fails alone, its
last version served. A server that is down, answers 5xx or times out (after the retries) fails
the run: nothing is deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from urllib.parse import urlsplit
from urllib.robotparser import RobotFileParser

from lxml import etree

from rag_pipeline.config.source_kinds import HttpSourceConfig
from rag_pipeline.core.ingestion.sources import html_main
from rag_pipeline.core.ingestion.sources.base import (
    DocumentReadError,
    DocumentSource,
    FetchedDocument,
    ListedDocument,
    Listing,
    SourceContext,
    SourceUnavailableError,
)
from rag_pipeline.core.ingestion.sources.http_client import PoliteClient

# Content types the pipeline parses, and the file type each becomes.
CONTENT_TYPES = {"text/html": "html", "application/xhtml+xml": "html", "text/markdown": "md", "text/plain": "txt",
                 "application/pdf": "pdf",
                 "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx"}
GONE = {404, 410}
MAX_SITEMAPS = 50


def rel_path_of(url: str) -> str:
    """A page's identity within the site: its path (and query), `index.html` for a folder."""
    parts = urlsplit(url)
    path = parts.path.lstrip("/")
    if not path or path.endswith("/"):
        path += "index.html"
    return f"{path}?{parts.query}" if parts.query else path


class HttpSite(DocumentSource):
    def __init__(self, config: HttpSourceConfig, context: SourceContext) -> None:
        self.config = config
        self.context = context
        self.entry = config.sitemap or config.start_url or ""
        self.location = self.entry
        self.host = urlsplit(self.entry).netloc
        self.client = PoliteClient(config, context.max_document_bytes, context.source_id)
        self.state_file = context.cache_dir / "pages.json"
        self.bodies = context.cache_dir / "bodies"
        self._robots: RobotFileParser | None = None
        self._include = [re.compile(p) for p in config.include]
        self._exclude = [re.compile(p) for p in config.exclude]

    # ---- cache ----------------------------------------------------------------------------------

    def _load_state(self) -> dict[str, dict]:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict[str, dict]) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.state_file.with_suffix(".partial")
        partial.write_text(json.dumps(state, sort_keys=True))
        os.replace(partial, self.state_file)
        kept = {page["sha256"] for page in state.values() if page.get("sha256")}
        for body in self.bodies.glob("*") if self.bodies.exists() else ():
            if body.name not in kept:
                body.unlink(missing_ok=True)

    def _keep_body(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.bodies.mkdir(parents=True, exist_ok=True)
        target = self.bodies / digest
        if not target.exists():
            partial = target.with_suffix(".partial")
            partial.write_bytes(data)
            os.replace(partial, target)
        return digest

    # ---- robots.txt and the site's bounds ------------------------------------------------------

    def _allowed(self, url: str) -> bool:
        if not self.config.respect_robots_txt:
            return True
        if self._robots is None:
            parts = urlsplit(self.entry)
            robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
            response = self.client.get(robots_url, page=False)
            self._robots = RobotFileParser(robots_url)
            if response.status == 200 and response.body is not None:
                self._robots.parse(response.body.decode("utf-8", errors="replace").splitlines())
            elif response.status in (401, 403):
                self._robots.disallow_all = True
            else:
                self._robots.allow_all = True  # no robots.txt: everything may be fetched
        return self._robots.can_fetch(self.config.user_agent, url)

    def _in_scope(self, url: str) -> bool:
        if urlsplit(url).netloc != self.host:
            return False
        if self._include and not any(p.search(url) for p in self._include):
            return False
        return not any(p.search(url) for p in self._exclude)

    # ---- listing ---------------------------------------------------------------------------------

    def _sitemap_urls(self) -> list[str]:
        todo, seen, urls = deque([self.config.sitemap]), set(), []
        while todo and len(seen) < MAX_SITEMAPS:
            sitemap = todo.popleft()
            seen.add(sitemap)
            response = self.client.get(sitemap, page=False)
            if response.status != 200 or response.body is None:
                raise SourceUnavailableError(
                    f"source {self.context.source_id!r}: sitemap {sitemap} answered HTTP {response.status}"
                    + (" (over the size limit)" if response.too_large else "") + "; nothing was deleted")
            try:
                root = etree.fromstring(response.body, etree.XMLParser(resolve_entities=False, no_network=True))
            except etree.XMLSyntaxError as exc:
                raise SourceUnavailableError(f"source {self.context.source_id!r}: sitemap {sitemap} is not XML "
                                             f"({exc}); nothing was deleted") from None
            # Anything else (a login page served in its place, a feed) would list no page: the whole
            # site deleted. Only the protocol's two roots list pages or sitemaps.
            if etree.QName(root).localname not in ("urlset", "sitemapindex"):
                raise SourceUnavailableError(
                    f"source {self.context.source_id!r}: sitemap {sitemap} is not a sitemap (its root element is "
                    f"<{etree.QName(root).localname}>, not <urlset> or <sitemapindex>); nothing was deleted")
            for loc in root.iter("{*}loc"):
                url = (loc.text or "").strip()
                if root.tag.endswith("sitemapindex"):
                    if url not in seen:
                        todo.append(url)
                elif url and urlsplit(url).netloc == self.host:
                    urls.append(url)
        return list(dict.fromkeys(urls))

    def list(self) -> Listing:
        previous = self._load_state()
        state: dict[str, dict] = {}
        documents: dict[str, ListedDocument] = {}
        listed = self.config.sitemap is not None
        queue = deque(self._sitemap_urls() if listed else [self.config.start_url])
        seen = set(queue)
        incomplete = None
        while queue:
            url = queue.popleft()
            if len(documents) >= self.config.max_pages:
                incomplete = f"the page limit (http.max_pages: {self.config.max_pages}) was reached"
                break
            if not self._allowed(url) or (not listed and url != self.config.start_url and not self._in_scope(url)):
                continue
            page, document = self._visit(url, previous.get(url, {}), listed)
            if page is not None:
                state[url] = page
            if document is not None and document.rel_path not in documents:
                documents[document.rel_path] = document
            if not listed and page is not None:
                for link in page.get("links", ()):
                    if link not in seen and self._in_scope(link):
                        seen.add(link)
                        queue.append(link)
        self._save({**previous, **state} if incomplete else state)
        return Listing(tuple(documents.values()), complete=incomplete is None, incomplete_reason=incomplete)

    def _visit(self, url: str, before: dict, listed: bool) -> tuple[dict | None, ListedDocument | None]:
        """The page's cache entry and listed document after a conditional request (None: not a document)."""
        headers = {}
        if before.get("sha256") and (self.bodies / before["sha256"]).exists():
            if before.get("etag"):
                headers["If-None-Match"] = before["etag"]
            if before.get("last_modified"):
                headers["If-Modified-Since"] = before["last_modified"]
        response = self.client.get(url, headers)
        if response.status == 304 and headers:
            return before, ListedDocument(rel_path_of(before["final_url"]), before["sha256"], before.get("size"),
                                          before.get("file_type"))
        rel_path = rel_path_of(response.url)
        if response.status in GONE and not listed:
            return None, None
        if urlsplit(response.url).netloc != self.host:
            return None, ListedDocument(rel_path_of(url), f"redirect:{response.url}",
                                        error=f"{url} redirects off the site, to {response.url}: not read")
        if response.status != 200:
            why = (f"{url} answers HTTP {response.status}"
                   + (" while the sitemap still lists it" if response.status in GONE else "")
                   + ": its last indexed version stays served")
            return before or None, ListedDocument(rel_path, f"http:{response.status}", error=why)
        if response.too_large:
            return before or None, ListedDocument(rel_path, "too-large", error=(
                f"{url}: body over the {self.context.max_document_bytes / 2**20:.1f} MB limit (limits.max_file_mb): not read"))
        media = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        file_type = CONTENT_TYPES.get(media)
        if file_type is None:
            return None, ListedDocument(rel_path, f"type:{media}", file_type=media or "none") if listed else None
        body = response.body or b""
        links = html_main.links(body, response.url) if file_type == "html" else []
        if file_type == "html" and self.config.keep_main_content:
            body = html_main.main_content(body)
        digest = self._keep_body(body)
        page = {"etag": response.headers.get("ETag"), "last_modified": response.headers.get("Last-Modified"),
                "sha256": digest, "size": len(body), "file_type": file_type, "final_url": response.url, "links": links}
        return page, ListedDocument(rel_path, digest, len(body), file_type)

    def fetch(self, document: ListedDocument) -> FetchedDocument:
        """The page's main content as the listing kept it (nothing downloaded)."""
        try:
            data = (self.bodies / document.version).read_bytes()
        except (OSError, ValueError):
            raise DocumentReadError(f"page {document.rel_path}: its content is no longer in the source's cache; "
                                    "the next run fetches it again") from None
        if hashlib.sha256(data).hexdigest() != document.version:
            raise DocumentReadError(f"page {document.rel_path}: its cached content is damaged; the next run fetches it again")
        return FetchedDocument(data)

    def close(self) -> None:
        self.client.close()

