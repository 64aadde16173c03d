"""A real HTTP server on 127.0.0.1 serving a generated site from a dict, with ETag and
Last-Modified, conditional answers, a sitemap, robots.txt, redirects, chosen failures (a status
for ever or for the next requests, a request never answered, a sitemap of one's own), and a count
of the requests and body bytes it served."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Page:
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    location: str | None = None  # a redirect's target
    modified: float = 1_700_000_000.0


@dataclass
class Site:
    pages: dict[str, Page] = field(default_factory=dict)
    in_sitemap: set[str] = field(default_factory=set)
    robots: str = "User-agent: *\nDisallow: /private/\n"
    failing: dict[str, int] = field(default_factory=dict)  # path -> status answered instead
    failing_next: dict[str, list[int]] = field(default_factory=dict)  # path -> statuses of its next requests, then normal
    hanging: set[str] = field(default_factory=set)  # paths whose requests are read and never answered
    sitemap_body: bytes | None = None  # served as /sitemap.xml instead of the generated one
    stop_after: int | None = None  # requests answered before the server goes away
    requests: list[tuple[str, int]] = field(default_factory=list)
    page_bodies_sent: int = 0
    body_bytes_sent: int = 0

    def html(self, path: str, title: str, text: str, in_sitemap: bool = True, links: tuple[str, ...] = ()) -> None:
        nav = "".join(f'<a href="{link}">{link}</a> ' for link in links)
        body = (f"<html><head><title>{title}</title></head><body><header>Site header banner</header>"
                f"<nav>menu {nav}navigationword</nav><main><h1>{title}</h1><p>{text}</p></main>"
                f"<footer>copyright footerword</footer></body></html>")
        self.pages[path] = Page(body.encode())
        if in_sitemap:
            self.in_sitemap.add(path)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client closing its connection first is not the test's business


class SiteServer:
    def __init__(self, site: Site) -> None:
        self.site = site
        handler = _handler(site, self)
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.stopped = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.httpd.shutdown()
            self.httpd.server_close()


def _handler(site: Site, server: SiteServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, page: bool = False) -> None:
            site.requests.append((self.path, status))
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            site.body_bytes_sent += len(body)
            site.page_bodies_sent += int(page and bool(body))

        def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
            if site.stop_after is not None and len(site.requests) >= site.stop_after:
                site.requests.append((self.path, 0))
                threading.Thread(target=server.stop, daemon=True).start()
                self.close_connection = True
                return  # no answer: the connection closes, the server goes away
            path = self.path
            if path in site.hanging:
                site.requests.append((path, 0))
                while not server.stopped:  # the client's timeout ends the request, or the server's stop
                    threading.Event().wait(0.05)
                return
            if site.failing_next.get(path):
                self._send(site.failing_next[path].pop(0), b"failing for now")
                return
            if path in site.failing:
                self._send(site.failing[path], b"failing")
                return
            if path == "/robots.txt":
                self._send(200, site.robots.encode(), {"Content-Type": "text/plain"})
                return
            if path == "/sitemap.xml" and site.sitemap_body is not None:
                self._send(200, site.sitemap_body, {"Content-Type": "application/xml"})
                return
            if path == "/sitemap.xml":
                urls = "".join(f"<url><loc>{server.url}{p}</loc></url>" for p in sorted(site.in_sitemap))
                body = f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
                self._send(200, body.encode(), {"Content-Type": "application/xml"})
                return
            page = site.pages.get(path)
            if page is None:
                self._send(404, b"not found", {"Content-Type": "text/plain"})
                return
            if page.location:
                self._send(page.status, b"", {"Location": page.location})
                return
            if page.status != 200:
                self._send(page.status, b"gone", {"Content-Type": "text/plain"})
                return
            etag = '"' + hashlib.sha256(page.body).hexdigest()[:16] + '"'
            modified = formatdate(page.modified, usegmt=True)
            headers = {"ETag": etag, "Last-Modified": modified, "Content-Type": page.content_type}
            if self.headers.get("If-None-Match") == etag:
                self._send(304, b"", {"ETag": etag})
                return
            self._send(200, page.body, headers, page=True)

    return Handler
