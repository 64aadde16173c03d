"""Files the pipeline writes that people and later runs rely on: written whole or not at all."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rag_pipeline.core.faults import kill_point


def cache_folder() -> Path:
    """The tool's cache (model exports, search copies): $RAG_PIPELINE_CACHE, else ~/.cache/rag_pipeline."""
    base = os.environ.get("RAG_PIPELINE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rag_pipeline")
    return Path(base)


def write_text_atomically(path: Path, text: str, fault: str | None = None) -> None:
    """Replace `path` with `text` (UTF-8) so that a reader, or a crash at any moment, sees either
    the old file or the new one: the text goes to a temporary file beside it, is flushed to disk,
    and is renamed over the old one (a rename within a folder is atomic), then the folder's entry
    is flushed. `fault`: a kill point reached when the new text is on disk but not yet in place."""
    path = Path(path)
    remove_stale_temporaries(path)
    temporary = temporary_beside(path)
    try:
        with temporary.open("wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)  # the file keeps its mode
        if fault:
            kill_point(fault)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def temporary_beside(path: Path) -> Path:
    """This process's temporary file for `path`, beside it (`remove_stale_temporaries` knows its name)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_stale_temporaries(path: Path) -> None:
    """Temporary files beside `path` left by writers that were killed before their rename."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2 : -len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.unlink(missing_ok=True)
        except PermissionError:
            continue  # another user's live process


def fingerprint(path: Path, probe_bytes: int = 1 << 16) -> list:
    """A file's size and a hash of its first and last `probe_bytes`: tells a cached file is the one
    written (truncated, overwritten, a damaged header) without reading all of it."""
    size = path.stat().st_size
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        digest.update(handle.read(probe_bytes))
        if size > probe_bytes:
            handle.seek(max(probe_bytes, size - probe_bytes))
            digest.update(handle.read())
    return [size, digest.hexdigest()]
