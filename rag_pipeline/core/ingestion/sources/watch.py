"""What the change sensor watches of each source, without reading a document."""

from __future__ import annotations

from pathlib import Path

from rag_pipeline.config import SourceConfig
from rag_pipeline.core.errors import DomainError
from rag_pipeline.core.ingestion.discovery import source_fingerprint

# A web site or a connector is not listed by the sensor (a crawl every tick would load the site):
# the schedule runs it, and a run of it costs conditional requests only when nothing changed.
NOT_WATCHED = "not watched: run by the schedule"


def sensor_fingerprint(source: SourceConfig, store_folder: Path) -> str:
    """A folder's names, sizes and times; a git ref's listing (one `ls-tree`); a constant for the
    rest. A source that cannot be listed has a fingerprint of its own, so that the run that
    follows fails with the reason instead of the sensor going quiet."""
    if source.is_folder:
        return source_fingerprint(source.path, source.kind)
    if source.git is None:
        return NOT_WATCHED
    from rag_pipeline.core.ingestion.inputs import walk_source

    try:
        return walk_source(source, store_folder).files_digest[:16]
    except DomainError as exc:
        return f"unavailable: {type(exc).__name__}"
