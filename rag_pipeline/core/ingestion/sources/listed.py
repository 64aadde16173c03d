"""Discovery over a `DocumentSource`: its listing described as discovered documents, fetching
only those whose version differs from the one an earlier discovery read.

The same rules as for a folder: hidden names and unsupported types are skipped, a `.meta.yaml`
sidecar (or front matter in Markdown and text) gives a document's metadata, bad metadata fails
the document closed, a document over the size limit fails alone, and a document listed with an
error keeps its last indexed version served. A document missing from an *incomplete* listing is
kept as it was committed, failed with the listing's reason: only a complete listing deletes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rag_pipeline.core import metadata
from rag_pipeline.core.ingestion import discovery
from rag_pipeline.core.ingestion.encoding import TextEncodingError, decode_text
from rag_pipeline.core.ingestion.source_tree import SIDECAR_SUFFIX, SUPPORTED_TYPES, name_and_suffix
from rag_pipeline.core.ingestion.sources.base import (
    DocumentReadError,
    DocumentSource,
    FetchedDocument,
    ListedDocument,
    Listing,
)
from rag_pipeline.core.models import DiscoveredFile, DocumentMeta, EarlierRead

if TYPE_CHECKING:
    from rag_pipeline.config import SourceConfig
    from rag_pipeline.core.storage import Store

# A discovered document's `stat_key` for a listed source: the listed version(s), then the defaults' digest.
KEY_SEPARATOR = "|"


def listing_digest(listing: Listing) -> str:
    """What the listing says, in a digest (no document fetched): the inputs' fingerprint of the source."""
    import hashlib
    import json

    rows = [[d.rel_path, d.version, d.size, d.file_type, d.error] for d in listing.documents]
    payload = [rows, listing.complete, listing.incomplete_reason, listing.revision]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


def listed_version(stat_key: str) -> str:
    """The document's listed version out of the `stat_key` discovery recorded for it."""
    return stat_key.split(KEY_SEPARATOR, 1)[0]


def file_type_of(document: ListedDocument) -> str:
    suffix = name_and_suffix(document.rel_path)[1].lower()
    return document.file_type or SUPPORTED_TYPES.get(suffix, suffix.lstrip(".") or "none")


def describe_listing(
    source_id: str, source: DocumentSource, listing: Listing, defaults: Mapping,
    earlier: Mapping[str, EarlierRead], committed: Sequence[dict], max_bytes: int,
) -> list[DiscoveredFile]:
    """Every listed name described, sidecars consumed by their documents, in path order; then the
    committed documents an incomplete listing lacks, kept as they were."""
    by_path = {d.rel_path: d for d in listing.documents}
    defaults_key = discovery.defaults_digest(defaults)
    found: list[DiscoveredFile] = []
    for document in sorted(listing.documents, key=lambda d: d.rel_path):
        name = name_and_suffix(document.rel_path)[0]
        if name.endswith(SIDECAR_SUFFIX) and document.rel_path[: -len(SIDECAR_SUFFIX)] in by_path:
            continue
        sidecar = by_path.get(document.rel_path + SIDECAR_SUFFIX)
        key = KEY_SEPARATOR.join([document.version, sidecar.version if sidecar else "", defaults_key])
        known = earlier.get(document.rel_path)
        found.append(_describe(source_id, source, document, sidecar, defaults, key,
                               known if known is not None and known.stat_key == key else None, max_bytes))
    if not listing.complete:
        found += _kept_from_committed(source_id, committed, set(by_path), listing.incomplete_reason)
    return found


def _skip_reason(document: ListedDocument, file_type: str) -> str | None:
    name, suffix = name_and_suffix(document.rel_path)
    if name.endswith(SIDECAR_SUFFIX):
        return "metadata sidecar whose document does not exist"
    if name.startswith("."):
        return "hidden file"
    if file_type not in SUPPORTED_TYPES.values():
        return f"unsupported file type '{suffix or '(no extension)'}'"
    return None


def _describe(
    source_id: str, source: DocumentSource, document: ListedDocument, sidecar: ListedDocument | None,
    defaults: Mapping, key: str, known: EarlierRead | None, max_bytes: int,
) -> DiscoveredFile:
    file_type = file_type_of(document)
    skip_reason = _skip_reason(document, file_type)
    error = document.error
    if error is None and skip_reason is None and document.size is not None and document.size > max_bytes:
        error = (f"{document.size / 2**20:.1f} MB, over the {max_bytes / 2**20:.1f} MB limit (limits.max_file_mb): "
                 "not read; raise the source's limit or remove the document")
    meta, meta_error, size = DocumentMeta(), None, document.size or 0
    if skip_reason is not None or error is not None:
        content_hash = f"{discovery.UNREAD_PREFIX}{document.version}"
    elif known is not None:
        content_hash, meta = known.content_hash, metadata.meta_from_json(known.meta_json)
    else:
        try:
            fetched = source.fetch(document)
            if len(fetched.data) > max_bytes:
                raise DocumentReadError(f"{len(fetched.data) / 2**20:.1f} MB, over the {max_bytes / 2**20:.1f} MB limit "
                                        "(limits.max_file_mb): not read")
        except DocumentReadError as exc:
            fetched, error = None, str(exc)
        if fetched is None:
            content_hash = f"{discovery.UNREAD_PREFIX}{document.version}"
        else:
            content_hash, size = discovery.sha256_bytes(fetched.data), len(fetched.data)
            if file_type == "html" and discovery.is_html_template(fetched.data):
                skip_reason = "HTML template (Jinja/Liquid tags), not a document"
            else:
                meta, meta_error = _metadata(source, document, sidecar, file_type, fetched, defaults)
    return DiscoveredFile(
        doc_id=discovery.make_doc_id(source_id, document.rel_path), source_id=source_id, rel_path=document.rel_path,
        abs_path=f"{source.location}/{document.rel_path}", content_hash=content_hash, size=size,
        file_type=file_type, supported=skip_reason is None, skip_reason=skip_reason, meta=meta,
        error=error or meta_error,
        stat_key=key if skip_reason is None and error is None and meta_error is None else None,
    )


def _metadata(
    source: DocumentSource, document: ListedDocument, sidecar: ListedDocument | None, file_type: str,
    fetched: FetchedDocument, defaults: Mapping,
) -> tuple[DocumentMeta, str | None]:
    """The document's metadata: its sidecar's (or its front matter's), under what the source says of it."""
    try:
        raw: dict = {}
        if sidecar is not None:
            name = name_and_suffix(sidecar.rel_path)[0]
            try:
                data = source.fetch(sidecar).data
            except DocumentReadError as exc:
                raise ValueError(f"sidecar {name}: {exc}") from exc
            if len(data) > metadata.MAX_SIDECAR_BYTES:
                raise ValueError(f"sidecar {name} is over the {metadata.MAX_SIDECAR_BYTES // 1024} KB limit for metadata")
            try:
                raw = metadata.load_mapping(data.decode("utf-8"), f"sidecar {name}")
            except UnicodeDecodeError as exc:
                raise ValueError(f"sidecar {name} is not valid UTF-8") from exc
        elif file_type in discovery.FRONT_MATTER_TYPES:
            try:
                text = decode_text(fetched.data, file_type)
            except TextEncodingError:
                text = ""  # the parser reports the encoding problem with its position
            raw = metadata.split_front_matter(text)[0] or {}
        return metadata.build_meta({**raw, **fetched.metadata} or None, defaults), None
    except ValueError as exc:
        return metadata.build_meta(None, defaults), f"metadata: {exc}"


def _kept_from_committed(source_id: str, committed: Sequence[dict], listed: set[str],
                         reason: str | None) -> list[DiscoveredFile]:
    """Committed documents an incomplete listing lacks: failed with its reason, their served version kept."""
    why = f"not in the source's listing, which is incomplete ({reason or 'the source says so'}): its last indexed " \
          "version stays served"
    return [
        DiscoveredFile(
            doc_id=row["doc_id"], source_id=source_id, rel_path=row["rel_path"], abs_path="",
            content_hash=row["content_hash"], size=row["size"], file_type=row["file_type"], supported=True,
            meta=metadata.meta_from_json(row["meta_json"]), error=why, mtime_ns=row["mtime_ns"] or 0,
        )
        for row in committed if row["supported"] and row["rel_path"] not in listed
    ]


def discover_listed(source: SourceConfig, store: Store) -> tuple[list[DiscoveredFile], str, str | None, str | None]:
    """A source that is not a folder: its listing described (only documents whose version changed
    fetched), the listing's digest, its revision, and why it is incomplete (None: complete)."""
    from rag_pipeline.core.ingestion.sources.registry import open_source

    opened = open_source(source, store.folder)
    try:
        listing = opened.list()
        files = describe_listing(
            source.source_id, opened, listing, source.defaults.model_dump(), store.staging.earlier_reads(source.source_id),
            store.staging.manifest_rows(source.source_id) if not listing.complete else (), source.limits.max_file_bytes)
    finally:
        opened.close()
    incomplete = None if listing.complete else (listing.incomplete_reason or "the source says its listing is incomplete")
    return files, listing_digest(listing), listing.revision, incomplete
