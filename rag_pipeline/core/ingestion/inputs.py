"""Decide before paying: a source's inputs as one fingerprint.

The fingerprint covers every name under the source root with its size, modification time and
what discovery would say of it without reading it (a link's target, a skip reason, an error),
the folders that could not be listed, the source's settings, the chunking settings, the lexical
analyzer's identity, the embedder's identity (model weights included) and the parser's version. Discovery stages it; the
switch commits it with the manifest. A run whose fresh fingerprint equals the committed one, and
whose source's last switch was not refused, has nothing to do: the command line then skips the
source's run (a change of content that keeps a file's size and modification time to the
nanosecond is not seen, as with make and rsync; `--force` runs anyway).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.config import ChunkingConfig, SourceConfig
from rag_pipeline.core.ingestion.discovery import is_html_template
from rag_pipeline.core.ingestion.parsing import parser_version
from rag_pipeline.core.ingestion.source_tree import SUPPORTED_TYPES, SourceTree, TreeEntry
from rag_pipeline.core.retrieval.lexical import analyzer_identity


def settings_fingerprint(chunking: ChunkingConfig, embedder_identity: str) -> str:
    """What shapes a source's chunks, postings and vectors besides its files."""
    payload = {"chunking": chunking.model_dump(mode="json"), "analyzer": analyzer_identity(),
               "embedder": embedder_identity, "parser": parser_version()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def chunking_fingerprint(chunking: ChunkingConfig) -> str:
    """What a staged chunk and its postings were made with: the chunking settings and the lexical
    analyzer. A staged document whose fingerprint differs is chunked and posted again."""
    return hashlib.sha256(f"{chunking.fingerprint()}|{analyzer_identity()}".encode()).hexdigest()[:16]


def tree_digest(entries: Sequence[TreeEntry], unreadable: Sequence[str]) -> str:
    """The names, sizes and times of a walk (nothing read)."""
    rows = [[e.rel_path, e.size, e.mtime_ns, e.link_target, e.skip_reason, e.error] for e in entries]
    return hashlib.sha256(json.dumps([rows, list(unreadable)]).encode()).hexdigest()


def file_digest(path: Path) -> str:
    """A single-file source (a BEIR corpus): its size and time."""
    stat = os.stat(path)
    return hashlib.sha256(json.dumps([str(path), stat.st_size, stat.st_mtime_ns]).encode()).hexdigest()


def inputs_fingerprint(source: SourceConfig, files_digest: str, settings: str) -> str:
    # How many parsers work at once changes no output: changing it is no reason to run.
    payload = {"files": files_digest, "source": source.model_dump(mode="json", exclude={"parse_workers"}),
               "settings": settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def with_revision(fingerprint: str, revision: str | None) -> str:
    """The fingerprint with the source's revision (a git commit) in clear after `@`: committed by the
    switch with the manifest, so what a source serves and the revision it came from move together."""
    return f"{fingerprint}@{revision}" if revision else fingerprint


def revision_of(fingerprint: str | None) -> str | None:
    """The revision `with_revision` put in a fingerprint, if any."""
    return (fingerprint or "").partition("@")[2] or None


def source_tree(source: SourceConfig) -> SourceTree:
    """Safe access to a source's files, with its own link policy, size limit and exclusions."""
    return SourceTree(source.source_id, Path(source.path), source.follow_symlinks, source.limits.max_file_bytes,
                      source.exclude, source.allow_hard_links)


@dataclass(frozen=True)
class SourceWalk:
    """One walk of a source's names with their sizes and times (no file opened): what decides
    whether it must run, and which parsers a run would need."""

    source: SourceConfig
    files_digest: str
    entries: tuple[TreeEntry, ...] = ()
    revision: str | None = None

    def fingerprint(self, settings: str) -> str:
        return with_revision(inputs_fingerprint(self.source, self.files_digest, settings), self.revision)

    def types_likely_to_parse(self, manifest: Sequence[dict]) -> set[str]:
        """The file types of the documents whose size or time differ from the committed `manifest`
        rows, or that it lacks: what a run will probably parse (a file touched without a change of
        content is counted too; a BEIR corpus is not parsed by the parser process)."""
        known = {row["rel_path"]: (row["size"], row["mtime_ns"]) for row in manifest}
        types: set[str] = set()
        tree: SourceTree | None = None
        for entry in self.entries:
            suffix = Path(entry.rel_path).suffix.lower()
            if (entry.skip_reason is not None or entry.error is not None or suffix not in SUPPORTED_TYPES
                    or known.get(entry.rel_path) == (entry.size, entry.mtime_ns) or SUPPORTED_TYPES[suffix] in types):
                continue
            if SUPPORTED_TYPES[suffix] == "html":
                # A site generator's partial (mkdocs `overrides/`) is skipped by discovery, unparsed:
                # it must not cost a run the HTML parser's start (unstructured and spaCy, about 2 CPU s).
                tree = tree or source_tree(self.source)
                if _is_template(tree, entry):
                    continue
            types.add(SUPPORTED_TYPES[suffix])
        return types


def _is_template(tree: SourceTree, entry: TreeEntry) -> bool:
    """Whether discovery will skip this HTML file as a template (unreadable: assume not)."""
    try:
        return is_html_template(tree.read_entry(entry))
    except OSError:  # DocumentReadError included: a refused read
        return False


def walk_source(source: SourceConfig, store_folder: Path | None = None) -> SourceWalk:
    """The source's walk now (OSError or RuntimeError for a root that cannot be read). A source that
    is not a folder is listed (`store_folder`: where its cache lives); a `DomainError` if it cannot be."""
    if not source.is_folder:
        from rag_pipeline.core.ingestion.sources.listed import listing_digest
        from rag_pipeline.core.ingestion.sources.registry import open_source

        opened = open_source(source, store_folder)
        try:
            listing = opened.list()
        finally:
            opened.close()
        return SourceWalk(source, listing_digest(listing), revision=listing.revision)
    if source.kind == "beir":
        return SourceWalk(source, file_digest(Path(source.path)))
    entries, unreadable = source_tree(source).walk()
    return SourceWalk(source, tree_digest(entries, unreadable), tuple(entries))


def current_fingerprint(source: SourceConfig, settings: str, store_folder: Path | None = None) -> str:
    """The source's fingerprint now, from a walk that opens no file."""
    return walk_source(source, store_folder).fingerprint(settings)
