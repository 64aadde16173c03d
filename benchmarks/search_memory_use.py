"""search_scale.py's memory measurement: RSS and its peak (VmHWM), the guards that skip what would not
fit, and the in-memory copy's load, checked."""

from __future__ import annotations

import resource
import time
from pathlib import Path

from search_data import DIMENSION

from rag_pipeline.api import Store

# Memory guards: bounds of a search process's peak growth (VmHWM), measured at 100k. The copy: its
# vectors, 5 bytes per posting and about 60 per chunk kept, and while it loads the engine's join
# state and one batch (posting and chunk bounds with a margin for those).
COPY_BYTES_PER_POSTING = 8
COPY_BYTES_PER_CHUNK = 400
# DuckDB's SQL dense path scans the vectors a batch of 65,536 rows at a time.
SQL_SCAN_MB = 1024
SPARE_MB = 2048


def _status_mb(field: str) -> int | None:
    return _meminfo_mb("/proc/self/status", field)


def _meminfo_mb(path: str, field: str) -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def rss_mb() -> int | None:
    return _status_mb("VmRSS")


def peak_rss_mb() -> int:
    """The process's peak resident memory since the start or the last `reset_peak` (Linux: VmHWM)."""
    return _status_mb("VmHWM") or int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux's /proc/self/clear_refs), so that a peak is one call's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def memory_problem(need_mb: int, what: str) -> str | None:
    available = _meminfo_mb("/proc/meminfo", "MemAvailable")
    if available is not None and need_mb > available - SPARE_MB:
        return (f"skipped: {what} would need about {need_mb:,} MB and {available:,} MB are available; "
                "--no-memory-check runs it anyway")
    return None


def raw_vectors_mb(n: int) -> float:
    """The raw vectors' size: n x DIMENSION float32, in MB of 2^20 bytes (the unit of every *_mb here).
    Not rounded: below 683 chunks they are under 1 MB, and the search memory's ratio divides by it."""
    return n * DIMENSION * 4 / 2**20


def memory_ratio(search_mem_mb: int, n: int) -> float:
    """Search memory over the raw vectors of n chunks."""
    return round(search_mem_mb / raw_vectors_mb(n), 3)


def search_memory_problem(method: str, n: int, posting_count: int) -> str | None:
    """Why a method's search process would not fit in memory now, or None (the *_BYTES_* bounds)."""
    if method == "memory":
        need = n * DIMENSION * 4 + posting_count * COPY_BYTES_PER_POSTING + n * COPY_BYTES_PER_CHUNK
        return memory_problem(need // 2**20, "loading the in-memory copy")
    if method == "duckdb":
        return memory_problem(SQL_SCAN_MB, "a DuckDB SQL dense scan")
    return None


def load_copy(store: Store, n: int, posting_count: int) -> tuple[dict, str | None]:
    """The first `served_copy()`: its time, the RSS it adds and its peak; and what is wrong with it."""
    reset_peak()
    before = rss_mb()
    started = time.perf_counter()
    copy = store.search.served_copy()
    seconds = time.perf_counter() - started
    after, peak = rss_mb(), peak_rss_mb()
    facts = {"copy_load_s": round(seconds, 2), "copy_mb": None if before is None else after - before,
             "copy_peak_mb": None if before is None else peak - before}
    if copy is None:
        return facts, "the in-memory copy did not load (served_copy() is None): the store searched in SQL"
    facts["copy_version"] = [list(v) for v in copy.version]
    facts["copy_arrays_mb"] = round(copy.nbytes / 2**20)
    facts["copy_postings_mb"] = round(copy.postings.nbytes / 2**20)
    facts["copy_bytes_per_posting"] = round((copy.postings.chunks.itemsize + copy.postings.tf.itemsize), 2)
    wrong = []
    if not copy.version:
        wrong.append("its served version is empty")
    if copy.size != n:
        wrong.append(f"it holds {copy.size:,} chunks, not {n:,}")
    if copy.vectors is None or int(copy.has_vector.sum()) != n:
        wrong.append("it lacks vectors")
    if copy.postings.nnz != posting_count:
        wrong.append(f"it holds {copy.postings.nnz:,} postings, not {posting_count:,}")
    if store.search.served_copy() is not copy:
        wrong.append("a second served_copy() reloaded it")
    # What a later process pays: a new search maps the copy the first one wrote to the cache folder.
    from rag_pipeline.core.storage.search import Search

    started = time.perf_counter()
    mapped = Search(store.db).served_copy()
    facts["copy_map_s"] = round(time.perf_counter() - started, 4)
    facts["copy_mapped"] = mapped is not None and mapped.records is not None
    if mapped is None or mapped.size != copy.size:
        wrong.append("a new search did not find the same copy")
    return facts, ("in-memory copy: " + "; ".join(wrong)) if wrong else None
