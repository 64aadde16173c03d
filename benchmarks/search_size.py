"""search_scale.py at one size: generate, load every store, compute the references, search each
store method in its own process, and gather the rows."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from search_data import DIMENSION, chunk_id, corpus, load, postings
from search_memory_use import memory_ratio, raw_vectors_mb, reset_peak, search_memory_problem
from search_methods import (
    HYBRID_NOTE,
    RETRIEVAL,
    SQL_METHODS,
    agreement,
    bm25_weights,
    fused_reference,
    numpy_top_k,
    query_reach,
    reference,
    sparse_top_k,
    summary,
)
from search_postgres import build_hnsw, candidate_plan, hnsw_options, hnsw_store, postgres_store, vacuum_analyze
from search_process import run_search_child

from rag_pipeline.api import Store
from rag_pipeline.core.storage.duckdb import DuckDBDatabase
from rag_pipeline.core.vectors import normalise_rows


def run_size(n: int, args, work: Path, dsn: str | None, query_matrix: np.ndarray, term_queries: list[np.ndarray],
             warm_up: tuple[np.ndarray, np.ndarray], log: Callable[[str], None]) -> dict:
    k, methods = args.k, args.methods
    depth = max(RETRIEVAL.candidates, k)
    started = time.perf_counter()
    labels, matrix = corpus(n, args.seed)
    chunk, term, tf, lengths = postings(n, args.seed)
    generate_s = time.perf_counter() - started
    posting_count = len(tf)
    log(f"[{n:,}] generated {n:,} x {DIMENSION} vectors and {posting_count:,} postings in {generate_s:.1f} s")

    # ---- load: one DuckDB file for memory and duckdb; PostgreSQL exact (with postings) and HNSW
    stores: dict[str, dict] = {}
    path = work / f"search_scale_{n}.duckdb"
    if "memory" in methods or "duckdb" in methods:
        db = DuckDBDatabase(path)
        seconds = load(Store(db, memory_search=False), labels, matrix, lengths, (chunk, term, tf), args.batch)
        facts = {**seconds, "build_s": None, "file_mb": round(path.stat().st_size / 2**20)}
        for key in ("memory", "duckdb"):
            if key in methods:  # searched in a process of its own (open_store)
                stores[key] = {"spec": {"method": key, "engine": "duckdb", "path": path}, "extra": dict(facts)}
        log(f"[{n:,}] duckdb loaded in {seconds['load_s']:.1f} s + postings {seconds['postings_load_s']:.1f} s")
    if "pg-exact" in methods:
        store = postgres_store(dsn, "bench_exact")
        seconds = load(store, labels, matrix, lengths, (chunk, term, tf), args.batch)
        analyze = vacuum_analyze(store, ("chunks", "vectors", "postings"))
        size_mb = store.db.value("SELECT pg_total_relation_size('postings')") / 2**20
        stores["pg-exact"] = {"store": store, "spec": {"method": "pg-exact", "engine": "postgres", "dsn": dsn,
                                                       "schema": "bench_exact"},
                              "extra": {**seconds, "vacuum_analyze_s": round(analyze, 2), "build_s": None,
                                        "postings_mb": round(size_mb)}}
        log(f"[{n:,}] postgres exact loaded in {seconds['load_s']:.1f} s + postings {seconds['postings_load_s']:.1f} s "
            f"(+ vacuum analyze {analyze:.1f} s)")
    if "pg-hnsw" in methods:
        store = hnsw_store(dsn, args)
        seconds = load(store, labels, matrix, lengths, None, args.batch)
        analyze = vacuum_analyze(store, ("chunks", "vectors"))
        build = build_hnsw(store)
        index_mb = store.db.value("SELECT pg_relation_size('vectors_hnsw_idx')") / 2**20
        stores["pg-hnsw"] = {"store": store, "spec": {"method": "pg-hnsw", "engine": "postgres", "dsn": dsn,
                                                      "schema": "bench_hnsw", "options": hnsw_options(args)},
                             "extra": {"load_s": seconds["load_s"], "vacuum_analyze_s": round(analyze, 2),
                                       "build_s": round(build, 2), "index_mb": round(index_mb)}}
        log(f"[{n:,}] postgres hnsw loaded in {seconds['load_s']:.1f} s (+ vacuum analyze {analyze:.1f} s), "
            f"index built in {build:.1f} s")
    del labels

    # ---- references (and the numpy and sparse timings), then free them
    rows: list[dict] = []
    reset_peak()
    started = time.perf_counter()
    exact = reference(matrix, query_matrix, k)
    exact_deep = reference(matrix, query_matrix, depth)
    if "numpy" in methods:
        normalised = normalise_rows(query_matrix).astype(np.float32)
        numpy_top_k(matrix, normalise_rows(warm_up[0][None, :])[0].astype(np.float32), k)
        latencies, results, cpu = [], [], 0.0
        for query in normalised:
            started_query, cpu_started = time.perf_counter(), time.process_time()
            top = numpy_top_k(matrix, query, k)
            latencies.append(time.perf_counter() - started_query)
            cpu += time.process_time() - cpu_started
            results.append([(chunk_id(int(j)), float(query @ matrix[j])) for j in top])
        rows.append(summary("numpy", "dense", latencies, results, exact, k, len(query_matrix),
                            cpu_per_query_ms=round(cpu * 1000 / len(normalised), 3),
                            load_s=round(generate_s, 2), build_s=None,
                            note="load = generating the data in memory; scores float32"))
        log(f"[{n:,}] numpy dense p50 {rows[-1]['p50_ms']:.2f} ms")
    del matrix
    weights = bm25_weights(n, chunk, term, tf, lengths, RETRIEVAL.bm25_k1, RETRIEVAL.bm25_b)
    del chunk, term, tf, lengths
    sparse_top_k(weights, warm_up[1], k)
    latencies, bm25_exact = [], []
    cpu_started = time.process_time()
    for terms in term_queries:
        started_query = time.perf_counter()
        bm25_exact.append(sparse_top_k(weights, terms, k))
        latencies.append(time.perf_counter() - started_query)
    cpu = time.process_time() - cpu_started
    bm25_deep = [sparse_top_k(weights, terms, depth) for terms in term_queries]
    rows.append(summary("sparse", "bm25", latencies, bm25_exact, bm25_exact, k, len(term_queries),
                        cpu_per_query_ms=round(cpu * 1000 / len(term_queries), 3),
                        weights_mb=round((weights.data.nbytes + weights.indices.nbytes + weights.indptr.nbytes) / 2**20),
                        **query_reach(weights, term_queries),
                        note="scipy CSR of precomputed BM25 weights times the query's term counts (BM25 reference)"))
    log(f"[{n:,}] sparse bm25 p50 {rows[-1]['p50_ms']:.2f} ms")
    del weights
    hybrid_exact = [fused_reference(d, b, k) for d, b in zip(exact_deep, bm25_deep)]
    reference_s = time.perf_counter() - started

    # ---- the stores: memory first (in a fresh process, its copy alone), then the SQL paths, then HNSW
    plans: dict[str, list[str]] = {}
    memory_results: dict[str, list] = {}
    product: dict = {}
    bm25_agreement: dict[str, float] = {}

    def add(row: dict, results: list | None = None) -> None:
        rows.append(row)
        if not row["queries"]:
            log(f"[{n:,}] {row['method']} {row['search']}: {row['note']}")
            return
        if row["method"] == "memory":
            memory_results[row["search"]] = results
            product[f"{row['search']}_p50_ms"], product[f"{row['search']}_p95_ms"] = row["p50_ms"], row["p95_ms"]
        elif row["search"] in memory_results:
            row["identical_to_memory"] = agreement(results, memory_results[row["search"]])
        if row["search"] == "bm25":
            bm25_agreement[row["method"]] = row["identical_to_exact"]
        log(f"[{n:,}] {row['method']} {row['search']} p50 {row['p50_ms']:.2f} ms over {row['queries']} queries, "
            f"identical to the reference {row['identical_to_exact']:.2f}")

    expected = {"dense": exact, "bm25": bm25_exact, "hybrid": hybrid_exact}

    def skipped(key: str, search: str, extra: dict, note: str) -> dict:
        return {"method": key, "search": search, "queries": 0, "of_queries": len(query_matrix), **extra, "note": note}

    raw_mb = raw_vectors_mb(n)
    for key in ("memory", "duckdb", "pg-exact", "pg-hnsw"):
        if key not in stores:
            continue
        spec, extra, store = stores[key]["spec"], stores[key]["extra"], stores[key].get("store")
        limit = args.slow_queries if key in SQL_METHODS and n >= args.slow_size else len(query_matrix)
        note = (f"first {limit} of {len(query_matrix)} queries (--slow-queries at N >= {args.slow_size:,})"
                if limit < len(query_matrix) else None)
        searches = {"memory": ("dense", "bm25", "hybrid"), "pg-hnsw": ("dense",)}.get(key, ("dense", "bm25"))
        try:
            problem = search_memory_problem(key, n, posting_count) if args.memory_check else None
            child = None
            if problem is None:
                child, problem = run_search_child(spec, n, posting_count, k, limit, query_matrix, term_queries, warm_up)
            if child is not None:
                extra.update(child["facts"], search_mem_mb=child.get("search_mem_mb"), raw_vectors_mb=raw_mb,
                             rss_start_mb=child["rss_start_mb"])
                if "server_mem_mb" in child:
                    extra.update(client_mem_mb=extra["search_mem_mb"], server_mem_mb=child["server_mem_mb"],
                                 server_mem_measure=child["server_mem_measure"])
                    extra["search_mem_mb"] = extra["client_mem_mb"] + extra["server_mem_mb"]
                if extra["search_mem_mb"] is not None:
                    extra["mem_ratio"] = memory_ratio(extra["search_mem_mb"], n)
                    log(f"[{n:,}] {key} search memory {extra['search_mem_mb']:,} MB over the process's "
                        f"{child['rss_start_mb']} MB at the start: {extra['mem_ratio']:.2f}x the raw vectors ({raw_mb:,.2f} MB)")
            for search in searches:
                if problem is not None:
                    add(skipped(key, search, extra, problem))
                    continue
                timing = child["searches"][search]
                more = {"depth": depth, "rrf_k": RETRIEVAL.rrf_k, "note": HYBRID_NOTE} if search == "hybrid" else {}
                row = summary(key, search, timing["latencies"], timing["results"], expected[search], k, len(query_matrix),
                              **extra, **timing["breakdown"], **more, rss_before_mb=timing["rss_before_mb"],
                              rss_after_mb=timing["rss_after_mb"], peak_rss_mb=timing["peak_rss_mb"])
                if note:
                    row["note"] = note
                add(row, timing["results"])
            if key == "memory" and problem is None:
                product.update(rss_mb=child["rss_mb"], copy_load_s=extra["copy_load_s"], copy_map_s=extra.get("copy_map_s"),
                               copy_mb=extra["copy_mb"],
                               copy_peak_mb=extra["copy_peak_mb"])
            if store is not None:
                plans[key] = candidate_plan(store, query_matrix[0], k)
                if key == "pg-hnsw":
                    for row in rows:
                        if row["method"] == key and row["queries"]:
                            row["plan_uses_hnsw_index"] = any("vectors_hnsw_idx" in line for line in plans[key])
        finally:
            if store is not None:
                store.close()
                del stores[key]["store"], store
    if path.exists():
        path.unlink()
    numpy_row = next((r for r in rows if r["method"] == "numpy"), None)
    sparse_row = next(r for r in rows if r["method"] == "sparse")
    return {
        "chunks": n, "postings": posting_count,
        **{name: product.get(name) for name in (
            "dense_p50_ms", "dense_p95_ms", "bm25_p50_ms", "bm25_p95_ms", "hybrid_p50_ms", "hybrid_p95_ms")},
        "numpy_dense_p50_ms": numpy_row["p50_ms"] if numpy_row else None,
        "sparse_bm25_p50_ms": sparse_row["p50_ms"],
        **{name: product.get(name) for name in ("rss_mb", "copy_load_s", "copy_map_s", "copy_mb", "copy_peak_mb")},
        "bm25_identical_to_sparse": bm25_agreement,
        "search_memory": search_memory_summary(rows, k),
        "generate_s": round(generate_s, 2), "reference_s": round(reference_s, 2),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "methods": rows, "plans": plans,
    }


def search_memory_summary(rows: list[dict], k: int) -> dict[str, dict]:
    """Per store method searched: its search memory against the raw vectors, and its dense latency and recall."""
    names = ("search_mem_mb", "raw_vectors_mb", "mem_ratio", "client_mem_mb", "server_mem_mb", "p50_ms", "p95_ms",
             f"recall_at_{k}", "queries")
    return {row["method"]: {("dense_" + name if name in ("p50_ms", "p95_ms", "queries") else name): row.get(name)
                            for name in names if name in row}
            for row in rows if row["search"] == "dense" and row["queries"] and row.get("search_mem_mb") is not None}
