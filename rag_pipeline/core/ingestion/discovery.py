"""Discovery: walk a source, identify each document, read its metadata, diff with the last manifest."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from rag_pipeline.core.bounded import bounded_lines, size_text
from rag_pipeline.core.ingestion.encoding import TextEncodingError, decode_text
from rag_pipeline.core.ingestion.source_tree import (
    SIDECAR_SUFFIX,
    SUPPORTED_TYPES,
    DocumentReadError,
    SourceTree,
    SourceUnavailableError,
    TreeEntry,
    name_and_suffix,
)
from rag_pipeline.core.metadata import (
    MAX_SIDECAR_BYTES,
    build_meta,
    load_mapping,
    meta_from_json,
    meta_to_json,
    split_front_matter,
)
from rag_pipeline.core.models import DiscoveredFile, DocumentMeta, EarlierRead, ManifestDiff
from rag_pipeline.core.progress import Progress

# The text limit of a BEIR record when the caller gives none (limits.max_text_chars's default).
BEIR_DEFAULT_MAX_TEXT_CHARS = 2_000_000
# The content hash of a file that was not read: its size and time identify the failed version.
UNREAD_PREFIX = "unread:"
FRONT_MATTER_TYPES = {"md", "txt"}
# The skip reason of a file of a type the pipeline does not read (followed by its quoted suffix).
UNSUPPORTED_TYPE = "unsupported file type"
NO_EXTENSION = "(no extension)"
# Files a docs tree carries beside its pages and nobody expects to be read as text: a site's
# images, stylesheets, scripts, fonts, media and archives. They never count towards a source
# being "mostly unsupported" (a built docs site is half assets and still a corpus).
ASSET_SUFFIXES = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".webp", ".bmp", ".tif", ".tiff",
    ".css", ".js", ".map", ".woff", ".woff2", ".ttf", ".otf", ".eot",
    ".mp3", ".mp4", ".webm", ".ogg", ".wav", ".mov",
    ".zip", ".gz", ".tgz", ".bz2", ".xz", ".tar", ".whl", ".pyc",
})
# Files without an extension named one by one in the advice to exclude them, at most.
NAMED_FILES = 5
# A file changed this close before the discovery that read it may change again within the same
# tick of its clock (the "racy clean" case of git's index): it is read again by the next discovery.
RACY_MARGIN_NS = 2_000_000_000
# Carried-over files between two progress counts (a count per file costs more than such a file).
PROGRESS_STEP = 1024


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_doc_id(source_id: str, rel_path: str) -> str:
    """Stable document identity: `<source id>:<relative POSIX path>`."""
    return f"{source_id}:{rel_path}"


_CODE_BLOCKS = re.compile(rb"<(pre|code)\b.*?</\1>", re.DOTALL | re.IGNORECASE)
_TEMPLATE_TAG = re.compile(rb"\{%-?\s*(if|for|block|extends|include|import|set|macro)\b")


def is_html_template(data: bytes) -> bool:
    """A site-generator template (mkdocs/Jekyll partials): template statements outside code samples."""
    return bool(_TEMPLATE_TAG.search(_CODE_BLOCKS.sub(b"", data)))


def _read_meta(
    tree: SourceTree, rel_path: str, file_type: str, data: bytes, defaults: Mapping
) -> tuple[DocumentMeta, str | None]:
    """Metadata of one file from its sidecar or front matter; a problem becomes an error string."""
    sidecar = rel_path + SIDECAR_SUFFIX
    raw: dict | None = None
    try:
        if tree.exists(sidecar):
            name = PurePosixPath(sidecar).name
            size = tree.resolve(sidecar).size
            if size > MAX_SIDECAR_BYTES:
                raise ValueError(f"sidecar {name} is {size / 1024:,.0f} KB, over the {MAX_SIDECAR_BYTES // 1024} KB limit for "
                                 "metadata: not read (a sidecar holds a few key: value lines)")
            try:
                text = tree.read(sidecar, MAX_SIDECAR_BYTES).decode("utf-8")
            except DocumentReadError as exc:
                raise ValueError(f"sidecar {name}: {exc}") from exc
            except UnicodeDecodeError as exc:
                raise ValueError(f"sidecar {name} is not valid UTF-8") from exc
            raw = load_mapping(text, f"sidecar {name}")
        elif file_type in FRONT_MATTER_TYPES:
            try:
                # Decoded as the parser decodes it: a byte-order mark before `---` must not turn the
                # front matter (tenant, visibility, roles) into body text served to everyone.
                text = decode_text(data, file_type)
            except TextEncodingError:
                text = ""  # the parser reports the encoding problem with its position
            raw, _, _ = split_front_matter(text)
        return build_meta(raw, defaults), None
    except ValueError as exc:
        return build_meta(None, defaults), f"metadata: {exc}"


def discover_files(
    source_id: str, root: Path, defaults: Mapping | None = None, exclude: Iterable[str] = (),
    follow_symlinks: str = "within_root", max_file_bytes: int | None = None, allow_hard_links: bool = False,
    stage: str = "discovery",
) -> list[DiscoveredFile]:
    """Every name under `root`, in path order: supported documents, skipped and failed files alike.

    Sidecar metadata files are consumed by their document, not listed on their own. A file that
    cannot be read is a failed document of its own; the walk goes on.
    """
    tree = SourceTree(source_id, root, follow_symlinks, max_file_bytes, exclude, allow_hard_links)
    entries, _ = tree.walk()
    return describe_entries(tree, entries, defaults or {}, stage=stage)


def defaults_digest(defaults: Mapping) -> str:
    """The source's metadata defaults as a short digest: part of every `stat_key`, since a
    document's metadata is built from them."""
    return hashlib.sha256(json.dumps(defaults, sort_keys=True, default=str).encode()).hexdigest()[:12]


def stat_key(entry: TreeEntry, defaults_key: str) -> str:
    """What identifies the state of a file without reading it: size, modification and change times,
    inode (a change time cannot be set back by a user, and a file replaced is another inode), and the
    metadata defaults its metadata was built with."""
    return f"{entry.size}:{entry.mtime_ns}:{entry.ctime_ns}:{entry.inode}:{defaults_key}"


def _still_valid(earlier: EarlierRead | None, key: str, entry: TreeEntry) -> bool:
    """The earlier read holds for the file as it is now: the same stat key, and the file was not
    changed just before (or after) that read began."""
    return (earlier is not None and earlier.stat_key == key
            and max(entry.mtime_ns, entry.ctime_ns) < earlier.started_ns - RACY_MARGIN_NS)


def describe_entries(
    tree: SourceTree, entries: Sequence[TreeEntry], defaults: Mapping,
    earlier: Mapping[str, EarlierRead] | None = None, progress: Callable[[str], None] | None = None,
    stage: str = "discovery",
) -> list[DiscoveredFile]:
    """Every entry described (sidecars consumed by their documents). A document whose `stat_key`
    equals the one an earlier discovery read it with (`earlier`, by relative path) is not read
    again: its hash and metadata are carried over. One with a sidecar is always read (its
    metadata lives in another file)."""
    names = {e.rel_path for e in entries}
    defaults_key = defaults_digest(defaults)
    earlier = earlier or {}
    found = []
    done = Progress(f"{tree.source_id}: {stage}", len(entries), progress)
    counted = 0  # entries done and not yet counted by `done` (carried-over files are counted in steps)
    for entry in entries:
        counted += 1
        rel_path = entry.rel_path
        named = name_and_suffix(rel_path)
        if named[0].endswith(SIDECAR_SUFFIX) and rel_path[: -len(SIDECAR_SUFFIX)] in names:
            continue
        key = None if rel_path + SIDECAR_SUFFIX in names else stat_key(entry, defaults_key)
        known = earlier.get(rel_path)
        if (key and _still_valid(known, key, entry) and entry.skip_reason is None and entry.error is None
                and named[1].lower() in SUPPORTED_TYPES and not named[0].startswith(".")):
            found.append(_carried_over(tree, entry, named, known, key))
            if counted < PROGRESS_STEP:
                continue
        else:
            found.append(describe_entry(tree, entry, defaults, key, None, named))
        done.advance(counted)
        counted = 0
    done.advance(counted)
    return found


def _carried_over(tree: SourceTree, entry: TreeEntry, named: tuple[str, str], known: EarlierRead,
                  key: str) -> DiscoveredFile:
    """A supported document an earlier discovery read in this very state (`describe_entry`'s case
    for most files of a run: its hash and metadata carried over, built without the checks a file
    that is read needs)."""
    return DiscoveredFile(
        doc_id=f"{tree.source_id}:{entry.rel_path}", source_id=tree.source_id, rel_path=entry.rel_path,
        abs_path=entry.real_path or f"{tree.root}/{entry.rel_path}", content_hash=known.content_hash,
        size=entry.size, file_type=SUPPORTED_TYPES[named[1].lower()], supported=True,
        meta=meta_from_json(known.meta_json), mtime_ns=entry.mtime_ns, stat_key=key, carried_over=True)


def describe_entry(
    tree: SourceTree, entry: TreeEntry, defaults: Mapping, key: str | None = None, known: EarlierRead | None = None,
    named: tuple[str, str] | None = None,
) -> DiscoveredFile:
    """Read (when allowed), hash and classify one entry; a read problem becomes the document's error.
    `known`: what an earlier discovery read from this very state of the file (not read again);
    `named`: its `name_and_suffix`, when the caller has it."""
    rel_path = entry.rel_path
    name, suffix = named or name_and_suffix(rel_path)
    suffix = suffix.lower()
    file_type = SUPPORTED_TYPES.get(suffix, suffix.lstrip(".") or "none")
    skip_reason = entry.skip_reason
    if skip_reason is None:
        if name.endswith(SIDECAR_SUFFIX):
            skip_reason = "metadata sidecar whose document does not exist"
        elif name.startswith("."):
            skip_reason = "hidden file"
        elif suffix not in SUPPORTED_TYPES:
            skip_reason = f"{UNSUPPORTED_TYPE} '{suffix or NO_EXTENSION}'"
    error = entry.error
    meta, meta_error = DocumentMeta(), None
    if skip_reason is None and error is None and known is not None:
        # Read before in this very state: its hash and metadata are carried over, the file is not opened.
        content_hash, meta = known.content_hash, meta_from_json(known.meta_json)
    else:
        data = b""
        if skip_reason is None and error is None:
            try:
                data = tree.read_entry(entry)
            except DocumentReadError as exc:
                error = str(exc)
        if skip_reason is None and error is None and file_type == "html" and is_html_template(data):
            skip_reason = "HTML template (Jinja/Liquid tags), not a document"
        if skip_reason is None and error is None:
            meta, meta_error = _read_meta(tree, rel_path, file_type, data, defaults)
        # A file that was not read has no content hash; its size and time identify the failed version.
        content_hash = sha256_bytes(data) if data or (error is None and skip_reason is None) else \
            f"{UNREAD_PREFIX}{entry.size}:{entry.mtime_ns}"
    return DiscoveredFile(
        doc_id=make_doc_id(tree.source_id, rel_path),
        source_id=tree.source_id,
        rel_path=rel_path,
        abs_path=str(entry.real_path or tree.root / rel_path),
        content_hash=content_hash,
        size=entry.size,
        file_type=file_type,
        supported=skip_reason is None,
        skip_reason=skip_reason,
        meta=meta,
        error=error or meta_error,
        mtime_ns=entry.mtime_ns,
        # Only a document read whole, with sound metadata, may be carried over by the next discovery.
        stat_key=key if skip_reason is None and error is None and meta_error is None else None,
        carried_over=skip_reason is None and error is None and known is not None,
    )


def refuse_mostly_unsupported(source_id: str, files: Sequence[DiscoveredFile], max_share: float, min_files: int) -> None:
    """Raise SourceUnavailableError when most of a source's files are of types the pipeline does not
    read: more than `max_share` of the files listed (excluded ones are never listed), and at least
    `min_files` of them or every file; assets (ASSET_SUFFIXES) are left out of both counts. A run that indexes two requirement files and skips 71 pages
    is not a success: the sentence names the types and what to do."""
    files = [item for item in files if name_and_suffix(item.rel_path)[1].lower() not in ASSET_SUFFIXES]
    unsupported: dict[str, list[str]] = {}
    for item in files:
        if not item.supported and (item.skip_reason or "").startswith(UNSUPPORTED_TYPE):
            unsupported.setdefault(item.skip_reason[len(UNSUPPORTED_TYPE):].strip(" '"), []).append(item.rel_path)
    count = sum(len(paths) for paths in unsupported.values())
    if not files or count <= max_share * len(files) or (count < min_files and count < len(files)):
        return
    by_count = sorted(unsupported.items(), key=lambda item: (-len(item[1]), item[0]))
    types = ", ".join(f"{suffix} {len(paths)}" for suffix, paths in by_count)
    # As the files spell them: exclude patterns match case-sensitively (and `*` crosses folders).
    spellings = {suffix: dict.fromkeys(name_and_suffix(path)[1] for path in paths) for suffix, paths in by_count}
    patterns = [f"'*{spelled}'" for suffix, _ in by_count if suffix != NO_EXTENSION for spelled in spellings[suffix]]
    patterns += [f"'{path}'" for path in unsupported.get(NO_EXTENSION, [])[:NAMED_FILES]]
    raise SourceUnavailableError(
        f"source {source_id!r}: {count:,} of {len(files):,} files are of types this pipeline does not read: {types}; "
        f"exclude them in the source's config (exclude: [{', '.join(patterns)}]) or convert them "
        f"(the limit: more than {max_share:.0%} of the files, limits.max_unsupported_share, and at least {min_files} "
        "of them, limits.min_unsupported_files); nothing was changed")


def discover_beir_corpus(
    source_id: str, corpus_path: Path, defaults: Mapping | None = None, max_text_chars: int | None = None
) -> list[DiscoveredFile]:
    """Each line of a BEIR `corpus.jsonl` (`_id`, `title`, `text`) is one document; a bad line
    (not JSON, not UTF-8, no `_id`, over the text limit) is a failed document of its own."""
    defaults = defaults or {}
    if not corpus_path.is_file():
        raise SourceUnavailableError(
            f"source {source_id!r}: BEIR corpus {corpus_path} does not exist; nothing was changed"
        )
    meta = build_meta(None, defaults)
    found: list[DiscoveredFile] = []

    def failed(line_number: int, raw: bytes, reason: str) -> DiscoveredFile:
        rel_path = f"line-{line_number}"
        return DiscoveredFile(
            doc_id=make_doc_id(source_id, rel_path), source_id=source_id, rel_path=rel_path,
            abs_path=str(corpus_path), content_hash=sha256_bytes(raw), size=len(raw), file_type="beir",
            supported=True, meta=meta, error=f"{corpus_path.name} line {line_number}: {reason}",
        )

    # A record is read only up to what its text limit allows, JSON escapes included (six bytes a
    # character at most): a longer line is read past, never held.
    max_line = 6 * (max_text_chars or BEIR_DEFAULT_MAX_TEXT_CHARS) + 64 * 1024
    with corpus_path.open("rb") as handle:
        for line in bounded_lines(handle, max_line):
            line_number, raw = line.number, line.data
            if raw is None:
                found.append(failed(line_number, f"{line_number}:{line.size}".encode(), (
                    f"a line of {size_text(line.size)}, over the {size_text(max_line)} a record within the text limit "
                    "(limits.max_text_chars) can take: not read")))
                continue
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                corpus_id = str(record["_id"])
                title = str(record.get("title") or "")
                text = str(record.get("text") or "")
            except UnicodeDecodeError:
                found.append(failed(line_number, raw, "not valid UTF-8"))
                continue
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                found.append(failed(line_number, raw, f"not a BEIR record ({exc})"))
                continue
            if max_text_chars is not None and len(title) + len(text) > max_text_chars:
                found.append(failed(line_number, raw, (
                    f"record {corpus_id!r} holds {len(title) + len(text):,} characters, over the "
                    f"{max_text_chars:,} limit (limits.max_text_chars)")))
                continue
            payload = f"{title}\n{text}".encode()
            found.append(
                DiscoveredFile(
                    doc_id=make_doc_id(source_id, corpus_id),
                    source_id=source_id,
                    rel_path=corpus_id,
                    abs_path=str(corpus_path),
                    content_hash=sha256_bytes(payload),
                    size=len(payload),
                    file_type="beir",
                    supported=True,
                    meta=replace(meta, title=title or None),
                    inline_text=text,
                    inline_title=title,
                )
            )
    return found


def diff_manifest(
    current: Iterable[DiscoveredFile], previous: Mapping[str, tuple[str, str]],
    meta_json: Mapping[str, str] | None = None,
) -> ManifestDiff:
    """Compare supported documents with the previous manifest (`doc_id -> (content hash, meta json)`).

    A document counts as changed when its bytes or its metadata changed; one that could not be
    read (its content unknown) counts as unreadable, new or not. `meta_json`: each document's
    `meta_to_json`, when the caller has it already (discovery writes it too).
    """
    added, changed, unchanged, unreadable = [], [], [], []
    seen: set[str] = set()
    for item in current:
        if not item.supported:
            continue
        seen.add(item.doc_id)
        before = previous.get(item.doc_id)
        if item.content_hash.startswith(UNREAD_PREFIX):
            unreadable.append(item.doc_id)
        elif before is None:
            added.append(item.doc_id)
        elif before != (item.content_hash,
                        meta_json[item.doc_id] if meta_json is not None else meta_to_json(item.meta)):
            changed.append(item.doc_id)
        else:
            unchanged.append(item.doc_id)
    deleted = sorted(set(previous) - seen)
    return ManifestDiff(tuple(added), tuple(changed), tuple(unchanged), tuple(deleted), tuple(unreadable))


def source_fingerprint(root: Path, kind: str = "files") -> str:
    """A cheap fingerprint of a source's state from file names, sizes and modification times.

    Used by the change sensor to decide whether a source needs a run, without hashing contents
    (discovery does that). Links are not followed (their own times count). A missing root has
    its own fingerprint, so the run that follows can fail loudly instead of the sensor going quiet.
    """
    root = Path(root)
    if not root.exists():
        return "missing"
    digest = hashlib.sha256()
    if kind == "beir" or root.is_file():
        info = root.stat()
        digest.update(f"{info.st_size}:{info.st_mtime_ns}".encode())
        return digest.hexdigest()[:16]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            try:
                info = os.lstat(path)
            except OSError:
                continue  # vanished between listing and stat: the next tick sees the new state
            digest.update(f"{path.relative_to(root).as_posix()}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
