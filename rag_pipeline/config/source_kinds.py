"""The settings of the sources that are not a local folder: a git ref, a web site, and a
connector of a third party found through the `rag_pipeline.sources` entry point group."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# A URL the HTTP source may start from: http or https only (file:, ftp: and the like are refused).
_HTTP_URL = re.compile(r"^https?://[^\s/]+", re.IGNORECASE)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GitSourceConfig(_Strict):
    """Documents of one ref of a git repository, read from the repository's objects (never from,
    nor into, its working copy). `repo`: a local repository (relative to the config file) or a URL
    that `git clone` understands (mirrored into a cache of the source's own)."""

    repo: str = Field(min_length=1)
    ref: str = Field(default="HEAD", min_length=1, description="a branch, a tag or a commit")
    path: str = Field(default="", description="the folder of the repository that holds the documents")

    @field_validator("path")
    @classmethod
    def _relative_folder(cls, value: str) -> str:
        folder = value.strip().strip("/")
        if folder.startswith("..") or "/../" in f"/{folder}/":
            raise ValueError(f"path {value!r} must be a folder inside the repository")
        return folder

    @field_validator("ref")
    @classmethod
    def _not_an_option(cls, value: str) -> str:
        if value.startswith("-"):
            raise ValueError(f"ref {value!r} is not a branch, tag or commit")
        return value


class HttpSourceConfig(_Strict):
    """Pages of a web site: those its sitemap lists (`sitemap`), or those reached by following
    links from `start_url` (within its host, matching `include` and none of `exclude`, at most
    `max_pages`)."""

    sitemap: str | None = None
    start_url: str | None = None
    include: tuple[str, ...] = Field(default=(), description="regular expressions a crawled URL must match (one of)")
    exclude: tuple[str, ...] = Field(default=(), description="regular expressions no crawled URL may match")
    max_pages: int = Field(default=1000, ge=1, le=1_000_000)
    timeout_seconds: float = Field(default=20.0, gt=0, le=600)
    retries: int = Field(default=3, ge=0, le=10, description="attempts after the first on a 5xx, 429 or timeout")
    backoff_seconds: float = Field(default=0.5, ge=0, le=60, description="the first retry's wait, doubled each time")
    requests_per_second: float = Field(default=5.0, gt=0, le=1000, description="per host")
    user_agent: str = "rag-pipeline"
    respect_robots_txt: bool = True
    keep_main_content: bool = Field(default=True, description="drop a page's navigation, header, footer and asides")

    @field_validator("sitemap", "start_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not _HTTP_URL.match(value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("include", "exclude")
    @classmethod
    def _patterns_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_entry(self) -> HttpSourceConfig:
        if (self.sitemap is None) == (self.start_url is None):
            raise ValueError("give exactly one of sitemap (a sitemap's URL) or start_url (a page to crawl from)")
        return self


class ConnectorConfig(_Strict):
    """A source implemented outside this package: `name` is the entry point's name in the group
    `rag_pipeline.sources`; `options` are handed to it as they are."""

    name: str = Field(min_length=1)
    options: dict = Field(default_factory=dict)
