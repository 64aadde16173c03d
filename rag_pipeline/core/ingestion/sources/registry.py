"""Which `DocumentSource` a configured source is: a git ref, a web site, or a connector of a third
party registered under the entry point group `rag_pipeline.sources`.

A connector's entry point names a callable `factory(options, context) -> DocumentSource`:
`options` is the `connector.options` mapping of the source's config, `context` a `SourceContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.ingestion.sources.base import DocumentSource, SourceContext

if TYPE_CHECKING:
    from rag_pipeline.config import SourceConfig

ENTRY_POINT_GROUP = "rag_pipeline.sources"
# Beside the store's database: one folder per source, kept between runs.
CACHE_FOLDER = "source_cache"


class ConnectorError(InputError):
    """A connector named in the config cannot be found or loaded: the message says which and why."""


def cache_dir(store_folder: Path | None, source_id: str) -> Path:
    """The source's own cache folder under the store's folder."""
    if store_folder is None:
        raise InputError(f"source {source_id!r} needs a folder for its cache and the store has none: "
                         "open the store from a config (storage.path)")
    return Path(store_folder) / CACHE_FOLDER / source_id


def connector_names() -> list[str]:
    """The names of the installed connectors (entry points of the group), sorted."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def _connector_factory(name: str, source_name: str) -> Callable[[Mapping, SourceContext], DocumentSource]:
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        installed = ", ".join(connector_names()) or "none"
        raise ConnectorError(f"source {source_name!r}: no connector {name!r} is installed (entry point group "
                             f"{ENTRY_POINT_GROUP}; installed: {installed}): install its package, or fix connector.name")
    try:
        return found[0].load()
    except Exception as exc:  # noqa: BLE001 - a third party's import error, whatever its type, is reported as such
        raise ConnectorError(f"source {source_name!r}: connector {name!r} ({found[0].value}) failed to load: "
                             f"{type(exc).__name__}: {exc}") from exc


def open_source(source: SourceConfig, store_folder: Path | None) -> DocumentSource:
    """The `DocumentSource` of a source that is not a local folder."""
    context = SourceContext(source.source_id, cache_dir(store_folder, source.source_id), source.limits.max_file_bytes)
    if source.git is not None:
        from rag_pipeline.core.ingestion.sources.git import GitSource

        return GitSource(source.git, context)
    if source.http is not None:
        from rag_pipeline.core.ingestion.sources.http_site import HttpSite

        return HttpSite(source.http, context)
    if source.connector is not None:
        made = _connector_factory(source.connector.name, source.name)(dict(source.connector.options), context)
        if not isinstance(made, DocumentSource):
            raise ConnectorError(f"source {source.name!r}: connector {source.connector.name!r} returned "
                                 f"{type(made).__name__}, not a DocumentSource")
        return made
    raise InputError(f"source {source.name!r} is a folder: it is read by the folder discovery, not opened")
