"""The in-memory copy kept as files in the tool's cache folder, mapped by every later process.

A copy read from the database (memory_load.py) is written once to
`<cache folder>/search-copies/<database key>/v<CACHE_FORMAT>-<version key>/` and mapped from there
(numpy arrays mapped read-only, ids and hit records as mapped bytes): the next search process maps
it in milliseconds instead of reading every vector and posting again, processes on one machine
share its pages, and a hit's fields come from its record instead of a query over the chunks table.

Keys, so that a stale copy never answers: the database key is the engine and the DuckDB file's
resolved path; the version key is a hash of the served version (`served_versions`: one token per
source, replaced by every switch and purge, never reused), and `meta.json` repeats the version,
which must equal the one asked for. A copy is only written outside a transaction, after the
version read before the load is read again after it (a switch landing meanwhile: nothing is written).

Safety: a copy is written into a temporary folder beside its place and renamed into it whole, so
a reader sees all of it or none; two processes writing the same version each write their own, the
first rename wins and the other is discarded. `meta.json` records each file's size and a hash of
its first and last 64 KB (`files.fingerprint`); a file that differs (truncated, overwritten, a damaged header)
makes the folder discarded and the copy read again from the database. A folder removed while
mapped (a newer version's writer prunes older ones) stays readable for the process mapping it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rag_pipeline.core.files import cache_folder, fingerprint
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.memory import HitRecords, PackedStrings, ServedCopy, TermPostings
from rag_pipeline.core.storage.memory_load import load_served_copy as read_copy

LOGGER = logging.getLogger("rag_pipeline.progress.search")
# Changes to the files written take a new format (older folders are then never mapped, and pruned).
CACHE_FORMAT = 1
FOLDER = "search-copies"
# A temporary folder this old is a crashed writer's.
_ABANDONED_SECONDS = 3600
# ServedCopy's arrays, by file name.
_ARRAYS = ("tenant", "public", "role_set", "status", "effective_day", "vectors", "norms", "has_vector", "lex_len")


def cache_root() -> Path:
    """The tool's cache folder (the model's too): $RAG_PIPELINE_CACHE, else ~/.cache/rag_pipeline."""
    return cache_folder() / FOLDER


def version_key(version: tuple) -> str:
    return hashlib.sha256(json.dumps([list(row) for row in version]).encode()).hexdigest()[:32]


class CopyCache:
    """The cached copies of one database's served versions (only the newest written is kept)."""

    def __init__(self, database: str, root: Path | None = None) -> None:
        self.database = database
        self.root = root or cache_root()
        self.folder = self.root / hashlib.sha256(database.encode()).hexdigest()[:16]

    @classmethod
    def of(cls, db: Database) -> CopyCache | None:
        """The cache of `db`'s copies, or None where the engine has no key for it."""
        key = db.copy_cache_key()
        return None if key is None else cls(key)

    def place(self, version: tuple) -> Path:
        return self.folder / f"v{CACHE_FORMAT}-{version_key(version)}"

    # ---- reading ------------------------------------------------------------------------------

    def map(self, version: tuple) -> ServedCopy | None:
        """The cached copy of `version`, mapped; None when there is none or it is not the one written
        (then it is removed, and the caller reads the database)."""
        place = self.place(version)
        try:
            meta = json.loads((place / "meta.json").read_text())
        except FileNotFoundError:
            # A folder is renamed into place with its meta.json: one without it was damaged after.
            return self._discard(place, "its meta.json is missing") if place.exists() else None
        except (OSError, ValueError) as exc:
            return self._discard(place, f"its meta.json cannot be read ({exc})")
        try:
            problem = _problem(place, meta, version)
            if problem is None:
                return _mapped(place, meta, version)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, FileNotFoundError) and not place.exists():
                return None  # pruned by a newer version's writer while we read it
            problem = f"{type(exc).__name__}: {exc}"
        return self._discard(place, problem)

    def _discard(self, place: Path, why: str) -> None:
        LOGGER.warning(f"the cached search copy {place} is damaged ({why}): reading the index again")
        shutil.rmtree(place, ignore_errors=True)
        return None

    # ---- writing ------------------------------------------------------------------------------

    def build(self, db: Database, version: tuple, load: Callable = read_copy) -> tuple[ServedCopy, bool]:
        """The copy of `version` read from `db` (by `load`: memory_load's), written to the cache and
        mapped from it; and whether `version` was still served after the read (else nothing is
        written and the caller retries). A cache folder that cannot be written leaves the copy in
        memory only."""
        from rag_pipeline.core.storage.served import served_version

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=".writing-", dir=self.folder))
            records = _RecordFile(work)
        except OSError as exc:
            LOGGER.debug(f"search copy cache {self.folder} cannot be written ({exc}): the copy stays in memory")
            copy = load(db, version)
            return copy, served_version(db) == version
        try:
            try:
                with records:
                    copy = load(db, version, records=records.add)
            except OSError as exc:  # the records' file could not be written (a full disk)
                LOGGER.debug(f"search copy cache {self.folder} cannot be written ({exc}): the copy stays in memory")
                copy = load(db, version)
                return copy, served_version(db) == version
            if served_version(db) != version:
                return copy, False
            records.finish(copy.size)
            _write(work, copy, self.database)
            place = self.place(version)
            try:
                os.rename(work, place)
            except OSError:
                if not (place / "meta.json").exists():
                    raise
                # Another process wrote this version first: its copy is the same; ours is dropped below.
            self._prune(keep=place)
            return self.map(version) or copy, True
        except OSError as exc:
            LOGGER.debug(f"search copy cache {self.folder} cannot be written ({exc}): the copy stays in memory")
            return copy, served_version(db) == version
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _prune(self, keep: Path) -> None:
        """Remove this database's other versions, crashed writers' folders, and the copies of
        databases whose file is gone."""
        now = time.time()
        for other in self.folder.iterdir():
            if other == keep or not other.is_dir():
                continue
            if other.name.startswith(".writing-"):
                try:
                    if now - other.stat().st_mtime < _ABANDONED_SECONDS:
                        continue  # another process is writing it
                except OSError:
                    continue
            shutil.rmtree(other, ignore_errors=True)
        (self.folder / "database.json").write_text(json.dumps({"database": self.database}))
        for folder in self.root.iterdir():
            if folder == self.folder:
                continue
            try:
                database = json.loads((folder / "database.json").read_text())["database"]
            except (OSError, ValueError, KeyError):
                continue
            engine, _, path = database.partition(":")
            if engine == "duckdb" and not Path(path).exists():
                shutil.rmtree(folder, ignore_errors=True)


class _RecordFile:
    """Hit records written as they are read (`records.bin`), placed by copy index (`starts`, `lengths`:
    12 bytes a chunk, the only part of the records held in memory)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.written = 0
        self.starts = self.lengths = None
        self.file = open(self.work / "records.bin", "wb")

    def __enter__(self) -> _RecordFile:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def add(self, size: int, positions: np.ndarray, encoded: list[bytes]) -> None:
        if self.starts is None:
            self.starts, self.lengths = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.uint32)
        lengths = np.fromiter(map(len, encoded), dtype=np.uint32, count=len(encoded))
        ends = self.written + np.cumsum(lengths, dtype=np.int64)
        self.starts[positions] = ends - lengths
        self.lengths[positions] = lengths
        self.file.write(b"".join(encoded))
        self.written = int(ends[-1]) if len(ends) else self.written

    def finish(self, size: int) -> None:
        if self.starts is None:  # no chunk
            self.starts, self.lengths = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.uint32)
        np.save(self.work / "record_starts.npy", self.starts)
        np.save(self.work / "record_lengths.npy", self.lengths)
        self.starts = self.lengths = None


def _write(work: Path, copy: ServedCopy, database: str) -> None:
    """Every array and table of `copy` into `work`, then meta.json (sizes and end hashes) last."""
    arrays = {name: getattr(copy, name) for name in _ARRAYS if getattr(copy, name) is not None}
    arrays.update(indptr=copy.postings.indptr, posting_chunks=copy.postings.chunks, posting_tf=copy.postings.tf,
                  chunk_offsets=copy.chunk_ids.offsets)
    terms = PackedStrings.pack([list(copy.terms)])  # in row order: term t is row t
    arrays["term_offsets"] = terms.offsets
    for name, array in arrays.items():
        np.save(work / f"{name}.npy", np.ascontiguousarray(array))
    (work / "chunk_ids.bin").write_bytes(bytes(copy.chunk_ids.data))
    (work / "terms.bin").write_bytes(terms.data)
    files = sorted(p.name for p in work.iterdir())
    meta = {
        "format": CACHE_FORMAT, "database": database, "version": [list(row) for row in copy.version],
        "size": copy.size, "tenants": list(copy.tenants.items()), "statuses": list(copy.statuses.items()),
        "role_sets": [sorted(roles) for roles in copy.role_sets], "vectors": copy.vectors is not None,
        "files": {name: fingerprint(work / name) for name in files},
    }
    (work / "meta.json").write_text(json.dumps(meta))




def _problem(place: Path, meta: dict, version: tuple) -> str | None:
    """Why the folder is not the copy of `version` as written, or None."""
    if meta.get("format") != CACHE_FORMAT:
        return f"format {meta.get('format')}, not {CACHE_FORMAT}"
    if tuple(tuple(row) for row in meta["version"]) != tuple(tuple(row) for row in version):
        return "it holds another served version"
    for name, written in meta["files"].items():
        if fingerprint(place / name) != written:
            return f"{name} is not the file written"
    return None


def _mapped(place: Path, meta: dict, version: tuple) -> ServedCopy:
    arrays = {name: _array(place / f"{name}.npy") for name in (*_ARRAYS, "indptr", "posting_chunks", "posting_tf",
                                                                 "chunk_offsets", "term_offsets", "record_starts",
                                                                 "record_lengths")
              if (place / f"{name}.npy").exists()}
    terms = PackedStrings(_bytes(place / "terms.bin"), arrays.pop("term_offsets"))
    return ServedCopy(
        version=version, chunk_ids=PackedStrings(_bytes(place / "chunk_ids.bin"), arrays.pop("chunk_offsets")),
        tenant=arrays["tenant"], tenants=dict(meta["tenants"]), public=arrays["public"],
        role_sets=[frozenset(roles) for roles in meta["role_sets"]], role_set=arrays["role_set"],
        status=arrays["status"], statuses=dict(meta["statuses"]), effective_day=arrays["effective_day"],
        vectors=arrays.get("vectors") if meta["vectors"] else None, norms=arrays.get("norms"),
        has_vector=arrays["has_vector"], lex_len=arrays["lex_len"], terms={t: i for i, t in enumerate(terms)},
        postings=TermPostings(indptr=arrays["indptr"], chunks=arrays["posting_chunks"], tf=arrays["posting_tf"]),
        records=HitRecords(_bytes(place / "records.bin"), arrays["record_starts"], arrays["record_lengths"]),
    )


def _array(path: Path) -> np.ndarray:
    """A saved array mapped read-only (a plain view of the map: no memmap subclass in the arithmetic)."""
    try:
        return np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
    except ValueError:
        if path.stat().st_size > 4096:
            raise
        return np.load(path, allow_pickle=False)  # an empty array: nothing to map


def _bytes(path: Path):
    """A file's bytes, mapped read-only (an empty file: b"")."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
