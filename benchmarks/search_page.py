"""search_scale.py's output: the tables printed, and its section of docs/performance.md (search memory
and the product default's latencies)."""

from __future__ import annotations

from pathlib import Path

from earlier_rows import kept_keys, section, with_earlier_rows
from search_data import CENTRES, DIMENSION, NOISE, VOCABULARY, ZIPF_EXPONENT
from search_methods import METHODS

SCRIPT = "benchmarks/search_scale.py"
EARLIER_NOTE = "(From the earlier run its row names.)"


def _ms(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def _mb(value: float) -> str:
    """MB in whole units, or with two decimals below 10 (a small corpus's vectors)."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2f}"


MEMORY_NOTE = ("search memory: the highest RSS of the method's own search process from the opened store on "
               "(the copy's load and every query included), minus its RSS then; PostgreSQL adds the growth of the "
               "server process serving that connection. MB = 2^20 bytes; ratio = search memory / the raw float32 "
               "vectors; recall@k of the dense top k against the exact reference.")


def memory_table(output: dict) -> list[str]:
    """Per size and store method: search memory against the raw vectors, dense latency and recall."""
    k = output["config"]["k"]
    lines = [f"| N | method | search memory MB | raw vectors MB | ratio | dense p50 / p95 ms | recall@{k} | queries |",
             "|---|---|---|---|---|---|---|---|"]
    for size in output["sizes"]:
        for method, row in size["search_memory"].items():
            parts = (f" (client {row['client_mem_mb']:,} + server {row['server_mem_mb']:,})"
                     if "server_mem_mb" in row else "")
            lines.append(f"| {size['chunks']:,} | {method} | {row['search_mem_mb']:,}{parts} | {_mb(row['raw_vectors_mb'])} | "
                         f"{row['mem_ratio']:.2f} | {_ms(row['dense_p50_ms'])} / {_ms(row['dense_p95_ms'])} | "
                         f"{row[f'recall_at_{k}']:.4f} | {row['dense_queries']} |")
    return lines


def render(output: dict) -> str:
    config, k = output["config"], output["config"]["k"]
    lines = [
        f"Search at scale: {DIMENSION}-d clustered vectors ({CENTRES} clusters, noise {NOISE}) and Zipf postings "
        f"({VOCABULARY:,} terms, s={ZIPF_EXPONENT}); k={k}, {config['queries']} queries one at a time after one "
        f"warm-up; seed {config['seed']}",
        "environment: " + ", ".join(f"{key} {value}" for key, value in output["environment"].items()),
        "",
        "Product default (memory store):",
        "",
        "| N | postings | dense p50 / p95 | bm25 p50 / p95 | hybrid p50 / p95 | numpy dense p50 | sparse bm25 p50 | "
        "copy load s | copy MB (peak) | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in output["sizes"]:
        lines.append(
            f"| {size['chunks']:,} | {size['postings']:,} | {_ms(size['dense_p50_ms'])} / {_ms(size['dense_p95_ms'])} | "
            f"{_ms(size['bm25_p50_ms'])} / {_ms(size['bm25_p95_ms'])} | "
            f"{_ms(size['hybrid_p50_ms'])} / {_ms(size['hybrid_p95_ms'])} | {_ms(size['numpy_dense_p50_ms'])} | "
            f"{_ms(size['sparse_bm25_p50_ms'])} | {_ms(size['copy_load_s'])} | "
            f"{size['copy_mb'] if size['copy_mb'] is not None else '–'} ({size['copy_peak_mb'] or '–'}) | "
            f"{size['rss_mb'] or '–'} |")
    lines += ["", "Search memory:", "", *memory_table(output), "", MEMORY_NOTE]
    lines += [
        "",
        f"| N | method | search | queries | p50 ms | p95 ms | mean ms | recall@{k} | identical | = memory | load s | "
        "build s | where the time goes (p50 ms) | RSS before / peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for size in output["sizes"]:
        for row in size["methods"]:
            label = f"| {size['chunks']:,} | {row['method']} | {row['search']} |"
            if not row["queries"]:
                lines.append(f"{label} 0 | " + " | ".join(["–"] * 10) + " |")
                notes.append(f"{size['chunks']:,} {row['method']} {row['search']}: {row['note']}")
                continue
            parts = ", ".join(f"{name[: -len('_p50_ms')]} {value:.2f}" for name, value in row.items()
                              if name.endswith("_p50_ms")) or "–"
            build = "–" if row.get("build_s") is None else f"{row['build_s']:.2f}"
            load = "–" if row.get("load_s") is None else f"{row['load_s']:.2f}"
            same = "–" if "identical_to_memory" not in row else f"{row['identical_to_memory']:.2f}"
            lines.append(
                f"{label} {row['queries']} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | {row['mean_ms']:.2f} | "
                f"{row[f'recall_at_{k}']:.4f} | {row['identical_to_exact']:.2f} | {same} | {load} | {build} | {parts} | "
                f"{row.get('rss_before_mb') or '–'} / {row['peak_rss_mb']} |"
            )
            if row.get("note"):
                notes.append(f"{size['chunks']:,} {row['method']} {row['search']}: {row['note']}")
            if "index_mb" in row:
                notes.append(f"{size['chunks']:,} {row['method']}: index {row['index_mb']} MB, "
                             f"plan uses vectors_hnsw_idx: {row.get('plan_uses_hnsw_index')}")
    lines += ["", "identical = fraction of queries whose ranked top-k equals the reference (dense: exact cosine; "
              "bm25: the sparse matrix; hybrid: their fusion); = memory: the same, against the memory store's lists; "
              "load = chunk and vector inserts in batches; RSS: before timing, and the peak during it."]
    lines += notes
    for size in output["sizes"]:
        for method, plan in size["plans"].items():
            lines += ["", f"EXPLAIN ANALYZE, candidate statement of {method} at N={size['chunks']:,}:"]
            lines += [f"    {line}" for line in plan]
    return "\n".join(lines)


def rounds_lines(rounds: dict) -> list[str]:
    """What the medians of `rounds` (`run_rounds`' result) were taken from: each round's search memory and
    dense p50 per size and method, and how each round's process went."""
    from search_latency import processes_line

    lines = [f"Each figure above is the median of {len(rounds['rounds'])} rounds, each the whole command in a fresh "
             "process (the same seed: the same data and queries, stored and searched anew). Each round's search "
             "memory MB / dense p50 ms:", ""]
    first = rounds["rounds"][0]
    for index, size in enumerate(first["sizes"]):
        for method in size["search_memory"]:
            found = [output["sizes"][index]["search_memory"][method] for output in rounds["rounds"]]
            lines.append(f"- {size['chunks']:,} {method}: " + "; ".join(
                f"{row['search_mem_mb']:,} / {_ms(row['dense_p50_ms'])}" for row in found))
    # pg_ctl starts the PostgreSQL server as a daemon: its CPU (loading, building the index) is not the tree's.
    server = ("; not the PostgreSQL server, which runs apart" if any(m.startswith("pg") for m in first["config"]["methods"])
              else "")
    return [*lines, "", "The rounds' processes (wall s, CPU s of the process tree: generating, storing, the "
                        f"references and every search process{server}; load average before / after): "
                        f"{processes_line(rounds['processes'])}."]


def write_page(output: dict, page: Path | None = None, rounds: dict | None = None) -> None:
    """This script's section of docs/performance.md: the search memory table, the product default's
    latencies. Rows of sizes and methods this run did not measure stay, each naming its run (earlier_rows.py).
    With `rounds` (`run_rounds`' result; `output` their medians), each round's figures and process too."""
    from performance_page import PAGE, write_section

    page = page or PAGE
    earlier = section(SCRIPT, page)
    config = output["config"]
    memory = with_earlier_rows(memory_table(output), earlier, key_cells=2)
    latency = [
        "| N | postings | dense p50 / p95 ms | bm25 p50 / p95 ms | hybrid p50 / p95 ms | hits dense / bm25 | copy load s | "
        "copy arrays MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in output["sizes"]:
        copy = next((r for r in size["methods"] if r["method"] == "memory" and r["queries"]), {})
        hits = {r["search"]: r.get("hits_p50_ms") for r in size["methods"] if r["method"] == "memory" and r["queries"]}
        latency.append(f"| {size['chunks']:,} | {size['postings']:,} | {_ms(size['dense_p50_ms'])} / "
                       f"{_ms(size['dense_p95_ms'])} | {_ms(size['bm25_p50_ms'])} / {_ms(size['bm25_p95_ms'])} | "
                       f"{_ms(size['hybrid_p50_ms'])} / {_ms(size['hybrid_p95_ms'])} | {_ms(hits.get('dense'))} / "
                       f"{_ms(hits.get('bm25'))} | {_ms(size['copy_load_s'])} | {copy.get('copy_arrays_mb', '–')} |")
    body = [
        f"Synthetic corpus: {DIMENSION}-d clustered float32 vectors ({CENTRES} clusters) and Zipf postings "
        f"({VOCABULARY:,} terms, 40-200 tokens a chunk); {config['queries']} queries one at a time after one warm-up "
        f"(the SQL paths: the first {config['slow_queries']} at N >= {config['slow_size']:,}); HNSW m={config['hnsw']['m']}, "
        f"ef_construction={config['hnsw']['ef_construction']}, ef_search={config['hnsw']['ef_search']}. "
        "memory is the product default (exact: the in-memory copy of the served index), duckdb and pg-exact the "
        "exact SQL paths, pg-hnsw the approximate one (pgvector HNSW; DuckDB's vss extension is not used: "
        "it is not installed and cannot be fetched offline). `measured`: this run, or the earlier run a row "
        "was kept from (a size or method this run did not measure).",
        "", *memory, "", MEMORY_NOTE, "",
        "Product default (memory), every query including the read of its hits' rows from the database "
        "(`hits`: p50 ms per query):",
        "",
        *with_earlier_rows(latency, earlier, key_cells=1),
    ]
    for size in output["sizes"]:
        index = next((r for r in size["methods"] if r["method"] == "pg-hnsw" and r.get("index_mb")), None)
        if index is not None:
            body += ["", f"pg-hnsw at {size['chunks']:,}: the server's RSS growth is bounded by shared_buffers "
                     f"({output['environment'].get('shared_buffers')}); the HNSW index ({index['index_mb']:,} MB, built in "
                     f"{index['build_s']:,.0f} s) and the table are read through the OS page cache, which no process's "
                     "RSS counts."]
    kept = kept_keys(memory, key_cells=2)
    for line in (earlier or "").splitlines():  # an earlier run's note on a pg-hnsw row kept
        if line.startswith("pg-hnsw at ") and (line[len("pg-hnsw at "):].split(":")[0], "pg-hnsw") in kept:
            body += ["", line if line.endswith(EARLIER_NOTE) else f"{line} {EARLIER_NOTE}"]
    left_out = [m for m in METHODS if m not in config["methods"]]
    if left_out:
        shown = any(method in left_out for _, method in kept)
        body += ["", f"Not run in this invocation: {', '.join(left_out)}" +
                 ("; the rows of theirs above come from the earlier run each names." if shown else ".")]
    skipped = [f"{size['chunks']:,} {r['method']} {r['search']}: {r['note']}" for size in output["sizes"]
               for r in size["methods"] if not r["queries"]]
    if skipped:
        body += ["", "Not measured: " + "; ".join(skipped) + "."]
    if rounds is not None:
        body += ["", *rounds_lines(rounds)]
    write_section("Search memory at scale", "\n".join(body), script=SCRIPT, command=output.get("command"), page=page,
                  measured=output.get("measured"))
