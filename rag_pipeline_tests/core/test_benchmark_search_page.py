"""search_scale.py below a thousand chunks and re-run in part: the search memory's ratio of a corpus
whose vectors are under 1 MB, and the page's rows of sizes and methods a run did not measure, kept
with the earlier run that measured them."""

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# The section as the page held it before the rows named their run (one run, its stamp without a commit).
EARLIER = """# Performance

<!-- benchmarks/search_scale.py -->
## Search memory at scale

`python benchmarks/search_scale.py --sizes 1000000 --methods numpy,memory,duckdb,pg-hnsw --queries 50 --work /tmp/search1m --out /tmp/search1m/run_1m.json`, 2026-12-03 06:58 UTC, on 2 CPUs, 24 GiB, Linux x86_64, Python 3.11.7.

Synthetic corpus: 384-d clustered float32 vectors (2000 clusters) and Zipf postings (50,000 terms, 40-200 tokens a chunk); 50 queries one at a time after one warm-up (the SQL paths: the first 10 at N >= 500,000); HNSW m=16, ef_construction=64, ef_search=100. memory is the product default (exact: the in-memory copy of the served index), duckdb and pg-exact the exact SQL paths, pg-hnsw the approximate one (pgvector HNSW; DuckDB's vss extension is not used: it is not installed and cannot be fetched offline).

| N | method | search memory MB | raw vectors MB | ratio | dense p50 / p95 ms | recall@10 | queries |
|---|---|---|---|---|---|---|---|
| 1,000,000 | memory | 2,133 | 1,465 | 1.46 | 394.74 / 614.64 | 1.0000 | 50 |
| 1,000,000 | duckdb | 2,346 | 1,465 | 1.60 | 7908.23 / 11733.03 | 1.0000 | 10 |
| 1,000,000 | pg-hnsw | 129 (client 1 + server 128) | 1,465 | 0.09 | 16.93 / 51.79 | 0.7980 | 50 |

search memory: the highest RSS of the method's own search process from the opened store on (the copy's load and every query included), minus its RSS then; PostgreSQL adds the growth of the server process serving that connection. MB = 2^20 bytes; ratio = search memory / the raw float32 vectors; recall@k of the dense top k against the exact reference.

Product default (memory), every query including the read of its hits' rows from the database (`hits`: p50 ms per query):

| N | postings | dense p50 / p95 ms | bm25 p50 / p95 ms | hybrid p50 / p95 ms | hits dense / bm25 | copy load s | copy arrays MB |
|---|---|---|---|---|---|---|---|
| 1,000,000 | 77,790,814 | 394.74 / 614.64 | 233.36 / 352.54 | 1511.99 / 2227.34 | 153.57 / 187.85 | 93.00 | 1891 |

pg-hnsw at 1,000,000: the server's RSS growth is bounded by shared_buffers (128MB); the HNSW index (1,953 MB, built in 380 s) and the table are read through the OS page cache, which no process's RSS counts.

Not run in this invocation: pg-exact.
<!-- /benchmarks/search_scale.py -->
"""


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as the scripts import each other: from their own folder


def test_the_ratio_of_a_corpus_under_one_mb_of_vectors_is_finite_and_shown(benchmarks):
    from search_memory_use import memory_ratio, raw_vectors_mb
    from search_page import memory_table

    # 300 chunks: 0.44 MB of vectors, which the page rounded to 0 and divided by.
    assert raw_vectors_mb(300) == pytest.approx(300 * 384 * 4 / 2**20)
    assert memory_ratio(51, 300) == pytest.approx(51 / 0.439453125, abs=1e-3)
    [row] = memory_table(_output(300, ("memory",), ratio=memory_ratio(51, 300)))[2:]
    assert "| 300 | memory | 51 | 0.44 | 116.05 |" in row


def test_a_partial_run_keeps_the_rows_it_did_not_measure_with_their_run(tmp_path, benchmarks):
    from search_page import write_page

    page = tmp_path / "performance.md"
    page.write_text(EARLIER)
    write_page(_output(1_000_000, ("numpy", "memory"), ratio=1.4), page)
    text = page.read_text()
    earlier = ("2026-12-03 06:58 UTC, commit not recorded, `python benchmarks/search_scale.py --sizes 1000000 "
               "--methods numpy,memory,duckdb,pg-hnsw --queries 50")
    memory, duckdb, hnsw = (_row(text, f"| 1,000,000 | {m} |") for m in ("memory", "duckdb", "pg-hnsw"))
    assert memory.endswith("| 1.40 | 300.00 / 400.00 | 1.0000 | 50 | this run |")
    assert "| 2,346 | 1,465 | 1.60 | 7908.23 / 11733.03 |" in duckdb and earlier in duckdb
    assert "| 129 (client 1 + server 128) |" in hnsw and earlier in hnsw
    assert "pg-hnsw at 1,000,000: the server's RSS growth" in text
    assert _row(text, "| 1,000,000 | 77,790,814 |").endswith("| 2.00 | 1800 | this run |")
    assert "Not run in this invocation: duckdb, pg-exact, pg-hnsw; the rows of theirs above" in text

    # Again: the kept rows still name the run that measured them, not the one before this.
    write_page(_output(1_000_000, ("numpy", "memory"), ratio=1.3), page)
    again = page.read_text()
    assert _row(again, "| 1,000,000 | duckdb |") == duckdb
    assert _row(again, "| 1,000,000 | memory |").endswith("| this run |")
    assert again.count("pg-hnsw at 1,000,000:") == 1
    # A size measured now beside one measured before: both, each with its run.
    write_page(_output(10_000, ("numpy", "memory"), ratio=2.0), page)
    final = page.read_text()
    assert _row(final, "| 10,000 | memory |").endswith("| this run |")
    assert "commit " in _row(final, "| 1,000,000 | memory |").rsplit("|", 2)[1]


def _row(text: str, start: str) -> str:
    [row] = [line for line in text.splitlines() if line.startswith(start)]
    return row


def _output(n: int, methods: tuple[str, ...], ratio: float) -> dict:
    from search_memory_use import raw_vectors_mb

    return {
        "command": f"python benchmarks/search_scale.py --sizes {n} --methods {','.join(methods)}",
        "config": {"k": 10, "queries": 50, "seed": 1, "slow_queries": 10, "slow_size": 500_000, "methods": list(methods),
                   "hnsw": {"m": 16, "ef_construction": 64, "ef_search": 100}},
        "environment": {"cpus": 2},
        "sizes": [{
            "chunks": n, "postings": 77_790_814 if n == 1_000_000 else 780_000, "dense_p50_ms": 300.0,
            "dense_p95_ms": 400.0, "bm25_p50_ms": 200.0, "bm25_p95_ms": 250.0, "hybrid_p50_ms": 900.0,
            "hybrid_p95_ms": 1000.0, "copy_load_s": 2.0,
            "methods": [{"method": "memory", "search": s, "queries": 50, "hits_p50_ms": 1.0, "copy_arrays_mb": 1800}
                        for s in ("dense", "bm25", "hybrid")],
            "search_memory": {"memory": {"search_mem_mb": 51 if n < 1000 else 2000, "raw_vectors_mb": raw_vectors_mb(n),
                                         "mem_ratio": ratio, "dense_p50_ms": 300.0, "dense_p95_ms": 400.0,
                                         "recall_at_10": 1.0, "dense_queries": 50}},
        }],
    }


def test_a_page_of_rounds_gives_each_figure_as_the_median_and_lists_every_round(tmp_path, benchmarks):
    from search_latency import median_output
    from search_page import write_page

    runs = [_output(1_000_000, ("numpy", "memory", "pg-hnsw"), ratio=r) for r in (1.46, 1.40, 1.45)]
    for run, mb, p50 in zip(runs, (2140, 2100, 2116), (190.0, 170.0, 184.0), strict=True):
        run["sizes"][0]["search_memory"]["memory"].update(search_mem_mb=mb, dense_p50_ms=p50)
        run["sizes"][0]["dense_p50_ms"] = p50
    result = {"command": "python benchmarks/search_scale.py --sizes 1000000 --rounds 3 --page", "rounds": runs,
              "measured": {"date": "2026-12-06 04:31 UTC", "commit": "e9f06a1"},
              "processes": [{"wall_s": 800.0 + i, "cpu_s": 900.0, "load_before": [0.3], "load_after": [1.5]}
                            for i in range(3)]}
    combined = median_output(result)
    memory = combined["sizes"][0]["search_memory"]["memory"]
    assert (memory["search_mem_mb"], memory["mem_ratio"], memory["dense_p50_ms"]) == (2116, 1.45, 184.0)
    assert isinstance(memory["search_mem_mb"], int) and combined["command"] == result["command"]
    assert combined["sizes"][0]["methods"][0]["method"] == "memory"  # text: the first round's

    page = tmp_path / "performance.md"
    page.write_text(EARLIER)
    write_page(combined, page, rounds=result)
    text = page.read_text()
    assert _row(text, "| 1,000,000 | memory |").endswith("| 2,116 | 1,465 | 1.45 | 184.00 / 400.00 | 1.0000 | 50 | this run |")
    # Stamped with the run's date and commit, also when written later from its saved JSON (--page-from).
    assert "`python benchmarks/search_scale.py --sizes 1000000 --rounds 3 --page`, 2026-12-06 04:31 UTC, commit e9f06a1," in text
    assert "the median of 3 rounds" in text
    assert "- 1,000,000 memory: 2,140 / 190.00; 2,100 / 170.00; 2,116 / 184.00" in text
    assert "every search process; not the PostgreSQL server, which runs apart; load average" in text
    assert "800.0 s, 900.0 CPU s, load [0.3] / [1.5]; 801.0 s" in text
