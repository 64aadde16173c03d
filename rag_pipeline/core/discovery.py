"""Discovery: walk a source, identify each document, read its metadata, diff with the last manifest."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from datetime import date
from pathlib import Path

import yaml

from rag_pipeline.core.models import DiscoveredFile, DocumentMeta, ManifestDiff

# File types that unstructured parses for us; everything else is recorded as skipped.
SUPPORTED_TYPES: dict[str, str] = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
SIDECAR_SUFFIX = ".meta.yaml"
FRONT_MATTER_TYPES = {"md", "txt"}
_META_FIELDS = {f for f in DocumentMeta.__dataclass_fields__}
_STATUSES = {"published", "draft", "superseded"}
_VISIBILITIES = {"public", "internal"}


class SourceUnavailableError(RuntimeError):
    """The source cannot be trusted for this run (missing, unreadable, emptied, mass deletion).

    Raised before anything is written, so the index keeps serving its previous state.
    """


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_doc_id(source_id: str, rel_path: str) -> str:
    """Stable document identity: `<source id>:<relative POSIX path>`."""
    return f"{source_id}:{rel_path}"


def split_front_matter(text: str) -> tuple[dict | None, str, int]:
    """Split YAML front matter from a text file.

    Returns (front matter mapping or None, body, number of lines the front matter occupied),
    so that line numbers in the body can be mapped back to the file.
    Raises ValueError with the line of a YAML error.
    """
    if not text.startswith("---"):
        return None, text, 0
    lines = text.splitlines(keepends=True)
    if lines[0].strip() != "---":
        return None, text, 0
    for index in range(1, len(lines)):
        if lines[index].strip() in ("---", "..."):
            raw = "".join(lines[1:index])
            try:
                data = yaml.safe_load(raw) or {}
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f" at line {mark.line + 2}" if mark is not None else ""
                raise ValueError(f"front matter is not valid YAML{where}: {exc}") from exc
            if not isinstance(data, dict):
                raise ValueError("front matter must be a YAML mapping (key: value lines)")
            return data, "".join(lines[index + 1 :]), index + 1
    raise ValueError("front matter opened with '---' on line 1 but never closed")


def build_meta(raw: Mapping | None, defaults: Mapping) -> DocumentMeta:
    """Merge a document's own metadata over the source defaults; raise ValueError on bad values."""
    merged = {k: v for k, v in dict(defaults).items() if k in _META_FIELDS}
    for key, value in (raw or {}).items():
        if key in _META_FIELDS:
            merged[key] = value
    status = merged.get("status", "published") or "published"
    if status not in _STATUSES:
        raise ValueError(f"status {status!r} is not one of {sorted(_STATUSES)}")
    visibility = merged.get("visibility", "public") or "public"
    if visibility not in _VISIBILITIES:
        raise ValueError(f"visibility {visibility!r} is not one of {sorted(_VISIBILITIES)}")
    roles = merged.get("roles") or ()
    if isinstance(roles, str):
        roles = (roles,)
    if visibility == "internal" and not roles:
        roles = ("employee",)  # an internal page nobody may read is a bug; employees is the safe floor
    effective = merged.get("effective_date")
    if effective is not None and not isinstance(effective, date):
        try:
            effective = date.fromisoformat(str(effective))
        except ValueError as exc:
            raise ValueError(f"effective_date {effective!r} is not a YYYY-MM-DD date") from exc
    tenant = merged.get("tenant")
    return DocumentMeta(
        title=str(merged["title"]) if merged.get("title") else None,
        tenant=str(tenant) if tenant not in (None, "") else None,
        visibility=visibility,
        roles=tuple(str(r) for r in roles),
        status=status,
        effective_date=effective,
        supersedes=merged.get("supersedes") or None,
        superseded_by=merged.get("superseded_by") or None,
    )


def meta_to_json(meta: DocumentMeta) -> str:
    return json.dumps(asdict(meta), sort_keys=True, default=str)


_CODE_BLOCKS = re.compile(rb"<(pre|code)\b.*?</\1>", re.DOTALL | re.IGNORECASE)
_TEMPLATE_TAG = re.compile(rb"\{%-?\s*(if|for|block|extends|include|import|set|macro)\b")


def is_html_template(data: bytes) -> bool:
    """A site-generator template (mkdocs/Jekyll partials): template statements outside code samples."""
    return bool(_TEMPLATE_TAG.search(_CODE_BLOCKS.sub(b"", data)))


def _read_meta(path: Path, file_type: str, data: bytes, defaults: Mapping) -> tuple[DocumentMeta, str | None]:
    """Metadata of one file from its sidecar or front matter; a problem becomes an error string."""
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    raw: dict | None = None
    try:
        if sidecar.is_file():
            loaded = yaml.safe_load(sidecar.read_text(encoding="utf-8")) or {}
            if not isinstance(loaded, dict):
                raise ValueError(f"sidecar {sidecar.name} must be a YAML mapping")
            raw = loaded
        elif file_type in FRONT_MATTER_TYPES:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = ""  # the parser reports the encoding problem with its position
            raw, _, _ = split_front_matter(text)
        return build_meta(raw, defaults), None
    except (ValueError, yaml.YAMLError) as exc:
        return build_meta(None, defaults), f"metadata: {exc}"


def _is_excluded(rel_path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(rel_path, pattern) for pattern in patterns)


def discover_files(
    source_id: str, root: Path, defaults: Mapping | None = None, exclude: Iterable[str] = ()
) -> list[DiscoveredFile]:
    """Every file under `root`, in path order: supported documents and skipped files alike.

    Hidden folders (`.git`, `.cache`...) are not walked; hidden files are recorded as skipped.
    Sidecar metadata files are consumed by their document, not listed on their own.
    """
    defaults = defaults or {}
    _check_root_readable(source_id, root)
    found: list[DiscoveredFile] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise_walk_error(source_id)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel_path = path.relative_to(root).as_posix()
            if _is_excluded(rel_path, exclude):
                continue
            if name.endswith(SIDECAR_SUFFIX):
                owner = path.with_name(name[: -len(SIDECAR_SUFFIX)])
                if owner.exists():
                    continue
            found.append(describe_file(source_id, path, rel_path, defaults))
    return found


def describe_file(source_id: str, path: Path, rel_path: str, defaults: Mapping) -> DiscoveredFile:
    data = path.read_bytes()
    suffix = path.suffix.lower()
    file_type = SUPPORTED_TYPES.get(suffix, suffix.lstrip(".") or "none")
    skip_reason = None
    if path.name.endswith(SIDECAR_SUFFIX):
        skip_reason = "metadata sidecar whose document does not exist"
    elif path.name.startswith("."):
        skip_reason = "hidden file"
    elif suffix not in SUPPORTED_TYPES:
        skip_reason = f"unsupported file type '{suffix or '(no extension)'}'"
    elif file_type == "html" and is_html_template(data):
        skip_reason = "HTML template (Jinja/Liquid tags), not a document"
    meta, meta_error = (DocumentMeta(), None)
    if skip_reason is None:
        meta, meta_error = _read_meta(path, file_type, data, defaults)
    return DiscoveredFile(
        doc_id=make_doc_id(source_id, rel_path),
        source_id=source_id,
        rel_path=rel_path,
        abs_path=str(path),
        content_hash=sha256_bytes(data),
        size=len(data),
        file_type=file_type,
        supported=skip_reason is None,
        skip_reason=skip_reason,
        meta=meta,
        meta_error=meta_error,
    )


def discover_beir_corpus(source_id: str, corpus_path: Path, defaults: Mapping | None = None) -> list[DiscoveredFile]:
    """Each line of a BEIR `corpus.jsonl` (`_id`, `title`, `text`) is one document."""
    defaults = defaults or {}
    if not corpus_path.is_file():
        raise SourceUnavailableError(
            f"source {source_id!r}: BEIR corpus {corpus_path} does not exist; nothing was changed"
        )
    meta = build_meta(None, defaults)
    found: list[DiscoveredFile] = []
    with corpus_path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                corpus_id = str(record["_id"])
                title = str(record.get("title") or "")
                text = str(record.get("text") or "")
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                found.append(
                    DiscoveredFile(
                        doc_id=make_doc_id(source_id, f"line-{line_number}"),
                        source_id=source_id,
                        rel_path=f"line-{line_number}",
                        abs_path=str(corpus_path),
                        content_hash=sha256_bytes(line.encode()),
                        size=len(line),
                        file_type="beir",
                        supported=True,
                        meta=meta,
                        meta_error=f"{corpus_path.name} line {line_number}: not a BEIR record ({exc})",
                    )
                )
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


def _check_root_readable(source_id: str, root: Path) -> None:
    if not root.exists():
        raise SourceUnavailableError(
            f"source {source_id!r}: root {root} does not exist (unmounted or moved?); "
            "nothing was deleted; fix the path in the config or remove the source"
        )
    if not root.is_dir():
        hint = "; for a BEIR corpus.jsonl set `kind: beir` on the source" if root.suffix == ".jsonl" else ""
        raise SourceUnavailableError(f"source {source_id!r}: root {root} is not a folder; nothing was changed{hint}")
    if not os.access(root, os.R_OK | os.X_OK):
        raise SourceUnavailableError(f"source {source_id!r}: root {root} is not readable; nothing was changed")


def _raise_walk_error(source_id: str):
    def handler(error: OSError) -> None:
        raise SourceUnavailableError(
            f"source {source_id!r}: cannot read {error.filename}: {error.strerror}; nothing was changed"
        ) from error

    return handler


def diff_manifest(
    current: Iterable[DiscoveredFile], previous: Mapping[str, tuple[str, str]]
) -> ManifestDiff:
    """Compare supported documents with the previous manifest (`doc_id -> (content hash, meta json)`).

    A document counts as changed when its bytes or its metadata changed.
    """
    added, changed, unchanged = [], [], []
    seen: set[str] = set()
    for item in current:
        if not item.supported:
            continue
        seen.add(item.doc_id)
        before = previous.get(item.doc_id)
        if before is None:
            added.append(item.doc_id)
        elif before != (item.content_hash, meta_to_json(item.meta)):
            changed.append(item.doc_id)
        else:
            unchanged.append(item.doc_id)
    deleted = sorted(set(previous) - seen)
    return ManifestDiff(tuple(added), tuple(changed), tuple(unchanged), tuple(deleted))


def guard_against_mass_deletion(
    source_id: str,
    diff: ManifestDiff,
    previous_count: int,
    max_delete_fraction: float,
    allow_mass_delete: bool,
) -> None:
    """Refuse a run that would empty a source or delete more than the allowed share of it.

    A loader that suddenly returns nothing is far more often an outage than a real deletion.
    """
    if allow_mass_delete or previous_count == 0 or not diff.deleted:
        return
    current_count = len(diff.added) + len(diff.changed) + len(diff.unchanged)
    share = len(diff.deleted) / previous_count
    if current_count == 0 or share > max_delete_fraction:
        sample = ", ".join(diff.deleted[:10]) + (" ..." if len(diff.deleted) > 10 else "")
        what = "is suddenly empty" if current_count == 0 else f"would lose {share:.0%} of its documents"
        raise SourceUnavailableError(
            f"source {source_id!r} {what}: {len(diff.deleted)} of {previous_count} documents would be "
            f"deleted ({sample}). Nothing was deleted. If this is intended, rerun with "
            f"lifecycle.allow_mass_delete: true (limit: {max_delete_fraction:.0%})"
        )


def source_fingerprint(root: Path, kind: str = "files") -> str:
    """A cheap fingerprint of a source's state from file names, sizes and modification times.

    Used by the change sensor to decide whether a source needs a run, without hashing contents
    (discovery does that). A missing root has its own fingerprint, so the run that follows can
    fail loudly instead of the sensor going quiet.
    """
    root = Path(root)
    if not root.exists():
        return "missing"
    digest = hashlib.sha256()
    if kind == "beir" or root.is_file():
        stat = root.stat()
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        return digest.hexdigest()[:16]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            stat = path.stat()
            digest.update(f"{path.relative_to(root).as_posix()}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]
