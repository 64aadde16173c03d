"""search_scale.py's search processes: each store method searched in a spawned process of its own, so
that its memory is its own (search memory: its RSS growth from the opened store on, and on PostgreSQL
the serving backend's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from search_memory_use import _meminfo_mb, load_copy, peak_rss_mb, reset_peak, rss_mb
from search_methods import bm25_call, dense_call, time_hybrid, time_store

from rag_pipeline.api import Store
from rag_pipeline.core.storage.duckdb import DuckDBDatabase
from rag_pipeline.core.storage.postgres import PostgresDatabase


def open_store(spec: dict) -> Store:
    """The store a method searches, from a picklable description (opened in the search process)."""
    if spec["engine"] == "duckdb":
        return Store(DuckDBDatabase(spec["path"]), memory_search=spec["method"] == "memory")
    return Store(PostgresDatabase(spec["dsn"], schema=spec["schema"], **spec.get("options", {})), memory_search=False)


def _backend_status(pid: int | None, field: str) -> int | None:
    return None if pid is None else _meminfo_mb(f"/proc/{pid}/status", field)


def search_worker(spec: dict, n: int, posting_count: int, k: int, limit: int, query_matrix: np.ndarray,
                  term_queries: list[np.ndarray], warm_up: tuple[np.ndarray, np.ndarray]) -> dict:
    """One method's searches, in a fresh process: open the store (schema checked), note the RSS,
    then (memory) load the copy, and time dense, BM25 (not pg-hnsw) and hybrid (memory only) on the
    first `limit` queries. Search memory: the highest RSS from there on (VmHWM, reset per phase and
    the phases' highest taken) minus that RSS; on PostgreSQL also the server process serving this
    connection (its VmHWM, when this user may reset it, minus its RSS at the start)."""
    method = spec["method"]
    store = open_store(spec)
    try:
        store.db.value("SELECT 1")  # the schema check: what is measured starts from an opened store
        backend = store.db.value("SELECT pg_backend_pid()") if spec["engine"] == "postgres" else None
        backend_reset = False
        if backend is not None:
            try:
                Path(f"/proc/{backend}/clear_refs").write_text("5")
                backend_reset = True
            except OSError:
                pass
        out = {"rss_start_mb": rss_mb(), "backend_start_mb": _backend_status(backend, "VmRSS"), "facts": {},
               "problem": None, "searches": {}}
        peaks = []
        if method == "memory":
            out["facts"], out["problem"] = load_copy(store, n, posting_count)
            peaks.append(peak_rss_mb())
            if out["problem"] is not None:
                return out
        calls = [("dense", dense_call(k), query_matrix[:limit], warm_up[0])]
        if method != "pg-hnsw":
            calls.append(("bm25", bm25_call(k), term_queries[:limit], warm_up[1]))
        for search, call, items, warm in calls:
            reset_peak()
            before = rss_mb()
            latencies, results, breakdown = time_store(store, call, items, warm)
            peaks.append(peak_rss_mb())
            out["searches"][search] = {"latencies": latencies, "results": results, "breakdown": breakdown,
                                       "rss_before_mb": before, "rss_after_mb": rss_mb(), "peak_rss_mb": peaks[-1]}
        if method == "memory":
            reset_peak()
            before = rss_mb()
            latencies, results, breakdown = time_hybrid(store, list(zip(query_matrix, term_queries)), warm_up, k)
            peaks.append(peak_rss_mb())
            out["searches"]["hybrid"] = {"latencies": latencies, "results": results, "breakdown": breakdown,
                                         "rss_before_mb": before, "rss_after_mb": rss_mb(), "peak_rss_mb": peaks[-1]}
        out["rss_mb"] = rss_mb()
        out["search_mem_mb"] = max(peaks) - out["rss_start_mb"]
        if backend is not None:
            high = _backend_status(backend, "VmHWM" if backend_reset else "VmRSS")
            out["server_mem_mb"] = high - out["backend_start_mb"]
            out["server_mem_measure"] = ("VmHWM (reset at the start) minus VmRSS at the start" if backend_reset else
                                         "VmRSS at the end minus at the start (its VmHWM could not be reset)")
        return out
    finally:
        store.close()


def run_search_child(spec: dict, *arguments) -> tuple[dict | None, str | None]:
    """`search_worker` in a spawned process (nothing of this one's heap in its RSS; killed alone if
    it does not fit): (its result, None) or (None, what went wrong)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            out = pool.submit(search_worker, spec, *arguments).result()
    except BrokenProcessPool as exc:
        return None, f"the {spec['method']} search process died ({exc}; out of memory?)"
    return out, out["problem"]
