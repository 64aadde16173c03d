"""HTTP for the site source: one polite client (a timeout on every request, retries with
exponential backoff on a 5xx, a 429 or a transport failure, a minimum spacing between requests
to one host, bounded bodies) that counts what it requested and downloaded."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from rag_pipeline.config.source_kinds import HttpSourceConfig
from rag_pipeline.core.ingestion.sources.base import SourceUnavailableError

RETRIED_STATUS = {429, 500, 502, 503, 504}
MAX_REDIRECTS = 5
# A Retry-After longer than this is not waited for: the run fails and a later one tries again.
MAX_RETRY_AFTER_S = 60.0


class BodyTooLarge(Exception):
    """The response's body is over the limit: not read past it."""


@dataclass
class Response:
    url: str  # after redirects
    status: int
    headers: httpx.Headers
    body: bytes | None  # None for a 304 and for a body refused as too large
    too_large: bool = False


@dataclass
class Traffic:
    """What a crawl cost: requests made and body bytes downloaded (pages, sitemaps, robots.txt)."""

    requests: int = 0
    body_bytes: int = 0
    page_bodies: int = 0
    by_status: dict[int, int] = field(default_factory=dict)


class PoliteClient:
    def __init__(self, config: HttpSourceConfig, max_body_bytes: int, source_id: str) -> None:
        self.config = config
        self.max_body_bytes = max_body_bytes
        self.source_id = source_id
        self.traffic = Traffic()
        self._last_request: dict[str, float] = {}
        self._client = httpx.Client(timeout=config.timeout_seconds, follow_redirects=True, max_redirects=MAX_REDIRECTS,
                                    headers={"User-Agent": config.user_agent}, trust_env=False)

    def close(self) -> None:
        self._client.close()

    def _wait_turn(self, url: str) -> None:
        host = urlsplit(url).netloc
        gap = 1.0 / self.config.requests_per_second
        last = self._last_request.get(host)
        if last is not None and (wait := last + gap - time.monotonic()) > 0:
            time.sleep(wait)
        self._last_request[host] = time.monotonic()

    def get(self, url: str, headers: dict[str, str] | None = None, page: bool = True) -> Response:
        """GET `url`, retried as configured; SourceUnavailableError once the retries are spent."""
        attempts = self.config.retries + 1
        reason = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(self._backoff(attempt, reason))
            self._wait_turn(url)
            self.traffic.requests += 1
            try:
                response = self._read(url, headers or {}, page)
            except httpx.TooManyRedirects:
                return Response(url, 310, httpx.Headers(), None)  # a page of its own that fails alone
            except httpx.TimeoutException:
                reason = f"no answer within {self.config.timeout_seconds:g} s"
                continue
            except httpx.TransportError as exc:
                reason = f"{type(exc).__name__}: {exc or 'connection failed'}"
                continue
            self.traffic.by_status[response.status] = self.traffic.by_status.get(response.status, 0) + 1
            if response.status in RETRIED_STATUS:
                reason = f"HTTP {response.status}"
                self._retry_after = response.headers.get("Retry-After")
                continue
            return response
        raise SourceUnavailableError(
            f"source {self.source_id!r}: {url} failed: {reason} (after {attempts} attempt{'s' * (attempts > 1)}); "
            "the site is down or failing: nothing was deleted, the pages indexed before stay served")

    _retry_after: str | None = None

    def _backoff(self, attempt: int, reason: str) -> float:
        wait = self.config.backoff_seconds * 2 ** (attempt - 1)
        if self._retry_after and self._retry_after.isdigit():
            wait = max(wait, min(float(self._retry_after), MAX_RETRY_AFTER_S))
        self._retry_after = None
        return wait

    def _read(self, url: str, headers: dict[str, str], page: bool) -> Response:
        with self._client.stream("GET", url, headers=headers) as streamed:
            final = str(streamed.url)
            if streamed.status_code != 200:
                return Response(final, streamed.status_code, streamed.headers, None)
            declared = streamed.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > self.max_body_bytes:
                return Response(final, 200, streamed.headers, None, too_large=True)
            body = bytearray()
            for chunk in streamed.iter_bytes():
                body += chunk
                if len(body) > self.max_body_bytes:
                    # An endless or huge body is cut here, never held whole.
                    return Response(final, 200, streamed.headers, None, too_large=True)
            self.traffic.body_bytes += len(body)
            self.traffic.page_bodies += int(page)
            return Response(final, 200, streamed.headers, bytes(body))
