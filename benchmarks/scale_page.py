"""The page of `benchmarks/scale.py` (section "The cost curve" of docs/performance.md, and the curve
docs/performance-scale.png), drawn from the rows of benchmarks/results/scale.jsonl: one row per
(embedder, backend, size), the latest measured; rows measured before a fix beside the current ones;
the incremental cases round by round where a row kept its rounds.
"""

from __future__ import annotations

import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLOT = ROOT / "docs" / "performance-scale.png"


# --- The page -----------------------------------------------------------------------------------

# Rows measured on the code before a fix, kept to compare with (`"before_fixes": true` in the row):
# the page shows them beside the current rows of the same size, never as the current figure.
BEFORE = "before_fixes"


def _key(row: dict) -> tuple:
    return row.get("embedder", "minilm"), row["backend"], row["docs_asked"]


def _latest(results: list[dict]) -> list[dict]:
    """The latest result of each (embedder, backend, docs), ordered by them."""
    latest = {_key(r): r for r in results if not r.get(BEFORE)}
    return [latest[key] for key in sorted(latest)]


def _before_after(results: list[dict], rows: list[dict]) -> list[str]:
    """A table of the rows measured before the fixes beside the current ones of the same size."""
    current = {_key(r): r for r in rows}
    pairs = [(r, current[_key(r)]) for r in results if r.get(BEFORE) and _key(r) in current]
    if not pairs:
        return []
    lines = ["| embedder | backend | docs | measured on | full build s | no change s | one edit s | 1% deleted s "
             "(switch s) | peak RSS MB | load at start |", "|---|---|---|---|---|---|---|---|---|---|"]
    for before, after in pairs:
        for row in (before, after):
            switch = row["stages_s"]["delete_1pct"].get("indexed", 0.0)
            lines.append(
                f"| {row.get('embedder', 'minilm')} | {row['backend']} | {row['docs']:,} | {row.get('revision', '?')} "
                f"| {row['full_s']:.1f} | {row['no_change_s']:.2f} | {row['edit_s']:.2f} | {row['delete_1pct_s']:.2f} "
                f"({switch:.2f}) | {row['peak_rss_mb']:.0f} | {row['load_avg_start'][0]} |")
    return lines


# The stages whose growth the page tabulates: (phase, stage).
_GROWTH = [("full", "discovered"), ("full", "parsed"), ("full", "chunked"), ("full", "embedded"), ("full", "indexed"),
           ("no_change", "discovered"), ("no_change", "indexed"), ("edit", "discovered"), ("edit", "indexed"),
           ("delete_1pct", "discovered"), ("delete_1pct", "indexed")]


def _growth(rows: list[dict], embedder: str = "hashing", backend: str = "duckdb") -> list[str]:
    """Seconds of each stage at each size of one (embedder, backend), and how much each grew per
    tenfold size: 10 is as fast as the corpus grows, 100 is with its square."""
    mine = sorted((r for r in rows if (r.get("embedder", "minilm"), r["backend"]) == (embedder, backend)),
                  key=lambda r: r["docs"])
    if len(mine) < 2:
        return []
    head = " | ".join(f"{r['docs']:,} docs s" for r in mine)
    steps = " | ".join(f"x ({a['docs']:,} to {b['docs']:,})" for a, b in zip(mine, mine[1:]))
    lines = [f"| run | stage | {head} | {steps} |", "|---|---|" + "---|" * (2 * len(mine) - 1)]
    for phase, stage in _GROWTH:
        seconds = [r["stages_s"][phase].get(stage, 0.0) for r in mine]
        factors = [f"{b / a:.1f}" if a >= 0.05 else "-" for a, b in zip(seconds, seconds[1:])]
        lines.append(f"| {phase.replace('_1pct', ' 1%').replace('_', '-')} | {stage} | "
                     + " | ".join(f"{x:.2f}" for x in seconds) + " | " + " | ".join(factors) + " |")
    lines.append("| load at start | 1 min, 2 cores | " + " | ".join(str(r["load_avg_start"][0]) for r in mine)
                 + " |" + " |" * (len(mine) - 1))
    return lines


def _rounds_flag(row: dict) -> str:
    return f" --rounds {row['rounds']}" if row.get("rounds", 1) > 1 else ""


_CASES = (("no_change", "no change"), ("edit", "one edit"), ("delete_1pct", "1% deleted"))


def _server_note(rows: list[dict]) -> str:
    """What the CPU of a PostgreSQL row holds of the server's (a process of its own, started once for
    the whole run, which does most of a switch's work there)."""
    postgres = [r for r in rows if r["backend"] == "postgres"]
    with_server = [r for r in postgres if "server_cpu_s" in r["incremental"]["no_change"]]
    notes = []
    if with_server:
        notes.append("on PostgreSQL the server's CPU meanwhile added (its processes' times, from /proc)")
    if len(with_server) < len(postgres):
        notes.append("PostgreSQL rows measured before that leave the server's out")
    return "".join(f"; {note}" for note in notes)


def _incremental(rows: list[dict]) -> list[str]:
    """Every round of the incremental cases of the rows that kept them: the run, the process's wall
    and the CPU of its process tree, medians first."""
    kept = [r for r in rows if r.get("incremental")]
    if not kept:
        return []
    lines = [
        "The incremental cases round by round (rows measured with `--rounds`; the others, one round each, kept "
        "the run's seconds alone). Each round is a fresh process; an edit round appends to another document, a "
        "deletion round deletes another 1%. run s: the ingestion call, as in the table above; process s: the "
        "whole process as a user waits for it (imports included); CPU s: user + system of its process tree "
        "(parser workers included" + _server_note(kept) + "). Medians, then each round:",
        "",
        "| embedder | backend | docs | case | rounds | run s | process s | CPU s | each round (run, process, CPU s) "
        "| load before / after (1, 5, 15 min) | measured on |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in kept:
        if "full_cpu_s" in r:  # the build the cases follow: one round
            lines.append(f"| {r.get('embedder', 'minilm')} | {r['backend']} | {r['docs']:,} | full build | 1 | {r['full_s']:.2f} "
                         f"| {r['full_process_s']:.2f} | {r['full_cpu_s']:.2f} | | {', '.join(map(str, r['load_avg_start']))} / "
                         f"(the cases') | {r.get('revision', '?')} |")
        for phase, label in _CASES:
            case = r["incremental"][phase]
            each = "; ".join(f"{a:.2f}, {b:.2f}, {c:.2f}" for a, b, c in zip(case["seconds"], case["process_s"], case["cpu_s"]))
            lines.append(
                f"| {r.get('embedder', 'minilm')} | {r['backend']} | {r['docs']:,} | {label} | {case['rounds']} "
                f"| {statistics.median_low(case['seconds']):.2f} | {statistics.median(case['process_s']):.2f} "
                f"| {statistics.median(case['cpu_s']):.2f} | {each} | {', '.join(map(str, case['load_before']))} / "
                f"{', '.join(map(str, case['load_after']))} | {r.get('revision', '?')} |")
    return lines


def _single_round(rows: list[dict]) -> list[str]:
    """Which rows' incremental cases were measured once, not in rounds, and why: said plainly, so
    that no reader takes one round for a median."""
    once = [r for r in rows if r.get("rounds", 1) <= 1]
    if not once:
        return []
    listed = "; ".join(
        f"{r.get('embedder', 'minilm')} {r['backend']} {r['docs']:,} (measured on {r.get('revision', '?')}, "
        f"its full build {r['full_s'] / 60:,.0f} min{', of which the raw encode ' + format(r['raw_encode_s'] / 60, ',.0f') + ' min' if r.get('embedder', 'minilm') == 'minilm' else ''})"
        for r in once)
    return [f"One round only, not a median (wall seconds of the run alone, no CPU seconds, its `rounds` column 1): "
            f"{listed}. They were measured before the incremental cases ran in rounds and not measured again since: "
            "a new measure runs the full build first (the minutes above, on this shared machine), which the time "
            "there was did not allow. Every other row's incremental figures are medians of its rounds."]


def _sample_flag(row: dict) -> str:
    encoded = row.get("raw_encoded_chunks", row["chunks"])
    return "" if encoded >= row["chunks"] else f" --raw-sample {encoded / row['chunks']:.1f}"


def _sampled(row: dict) -> str:
    encoded = row.get("raw_encoded_chunks", row["chunks"])
    return "" if encoded >= row["chunks"] else f", from {encoded:,} chunks"


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups = sorted({(r.get("embedder", "minilm"), r["backend"]) for r in rows})
    for embedder, backend in groups:
        mine = [r for r in rows if (r.get("embedder", "minilm"), r["backend"]) == (embedder, backend)]
        docs = [r["docs"] for r in mine]
        marker, style = ("o" if backend == "duckdb" else "s"), ("-" if embedder == "minilm" else ":")
        keys = [("no_change_s", "no change"), ("edit_s", "one document edited"), ("delete_1pct_s", "1% deleted")]
        if embedder == "minilm":
            keys = [("full_s", "full build"), ("raw_encode_s", "raw encode of its chunks"), *keys]
        for key, label in keys:
            left.plot(docs, [r[key] for r in mine], marker=marker, linestyle=style, label=f"{label} ({backend}, {embedder})")
        right.plot(docs, [r["peak_rss_mb"] for r in mine], marker=marker, linestyle=style,
                   label=f"peak RSS ({backend}, {embedder})")
        right.plot(docs, [r["index_mb"] for r in mine], marker=marker, linestyle="--",
                   label=f"store on disk ({backend}, {embedder})")
    for axis, ylabel in ((left, "seconds"), (right, "MB")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("documents")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    left.set_title("time per run")
    right.set_title("memory and size")
    figure.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=90)


def _cpu_note(row: dict) -> str:
    """The no-change run's CPU and the load it ran at, for a row measured in rounds."""
    case = row.get("incremental", {}).get("no_change")
    if not case:
        return ""
    return (f"; {statistics.median(case['cpu_s']):.1f} CPU s of its whole process, imports included, at a load of "
            f"{case['load_before'][0]:.0f} on 2 cores")


def _findings(rows: list[dict], results: list[dict]) -> list[str]:
    """What grew faster than the corpus, what was fixed, what still does: the prose around the
    before/after and growth tables (every figure from the rows)."""
    hashing = sorted((r for r in rows if (r.get("embedder"), r["backend"]) == ("hashing", "duckdb")),
                     key=lambda r: r["docs"])
    measured = sorted((r for r in rows if (r.get("embedder", "minilm"), r["backend"]) == ("minilm", "duckdb")),
                      key=lambda r: r["docs"])
    minilm = measured[-1] if measured else None
    lines = [
        "Profiled at 1k, 10k and 100k documents (hashing, DuckDB; each case in its own process), what grew "
        "faster than the corpus, or cost a no-change run more than it must, and what was done:",
        "",
        "- The switch deleted and re-inserted every served row of the source on every run that changed "
        "anything; it rewrites only the documents whose served rows differ from their staged state.",
        "- The deletion proof of the switch (`ServedIndex.remnants`) matched every deleted document against "
        "every row of `staged_postings`, `vectors` and `postings` with a prefix test (a nested-loop join, "
        "documents x rows), and queried the embedding cache once per tombstone. Now one equality join per table "
        "on the chunk id's document part (before its last `#`) and one statement for the cache. The same proof "
        "searched for every document deleted in the run; now only for those still found in `chunks` (none, "
        "unless the switch left something behind): the same verdict.",
        "- The queryable probe of a full build held every query's score against every vector at once (40 GB "
        "at 100k documents); now a block of queries at a time, and one pass over the vectors for 32 questions "
        "or more on every engine. PostgreSQL ran `NOT IN (subquery)` as a scan of the subquery per row: every "
        "anti-join of the store is `NOT EXISTS`.",
        "- Discovery read and hashed every file of the source on every run. A file whose size, modification "
        "and change times and inode equal those an earlier discovery read it with keeps its hash and metadata "
        "(as git's index does; a file changed within two seconds of that read, one with a sidecar, one that "
        "failed, or new metadata defaults: read again). The walk built a `Path` per file to name it; now a "
        "string, and each folder's real path is checked once, not once per file.",
        "",
        "The same commands on the code before a fix and after, at a similar load:",
        "",
        *_before_after(results, rows),
        "",
        "How each stage grew (hashing, DuckDB; seconds, and the factor per tenfold corpus: 10 grows as the "
        "corpus does, 100 as its square; wall times on a shared machine, so a factor within 1.5 of 10 is noise):",
        "",
        *_growth(rows),
    ]
    if measured:
        lines += ["", "With the real model (MiniLM, DuckDB), measured: " + "; ".join(
            f"at {r['docs']:,} documents the full build took {r['full_s']:,.0f} s, {r['full_over_raw_encode']:.2f} times "
            f"the raw encode of its {r['chunks']:,} chunks ({r['raw_encode_s']:,.0f} s{_sampled(r)}), a no-change run "
            f"{r['no_change_s']:.2f} s ({r['no_change_share_pct']:.2f}% of the build) and a one-document edit "
            f"{r['edit_s']:.2f} s ({r['edit_share_pct']:.2f}%)" for r in measured) + "."]
    if hashing and minilm is not None and hashing[-1]["docs"] > minilm["docs"]:
        big = hashing[-1]
        rest = big["full_s"] - big["stages_s"]["full"].get("embedded", 0.0)
        rate = minilm["raw_encode_chunks_per_s"]
        build = rest + big["chunks"] / rate
        lines[-1] += (
            f" At {big['docs']:,} documents the model was not run (its encode alone is about "
            f"{big['chunks'] / rate / 3600:.1f} h here): the hashing build without its encode took {rest:.0f} s, "
            f"and the model encodes {rate:.1f} chunks/s (the raw encode above), so a build with it would take about "
            f"{build:,.0f} s, {build / (build - rest):.2f} times its raw encode; the no-change run "
            f"({big['no_change_s']:.1f} s) would be {100 * big['no_change_s'] / build:.2f}% of it and the edit "
            f"({big['edit_s']:.1f} s) {100 * big['edit_s'] / build:.2f}%. An extrapolation from measured rows, "
            "not a measurement.")
    if hashing and hashing[-1]["docs"] > 10_000:
        big = hashing[-1]
        full_switch = big["stages_s"]["full"].get("indexed", 0.0)
        lines += [
            "",
            "The no-change run follows the full build, which follows the copy of the corpus: files copied within "
            "two seconds of the build's discovery are read again by it (the racy guard above). At 1k and 10k "
            "documents, whose copy takes about that long, its discovery takes as long as the full build's; the "
            "runs after it (the edit, the deletion) read only what changed, hence their shorter discovery.",
            "",
            f"What a no-change run still pays at {big['docs']:,} documents ({big['no_change_s']:.1f} s, "
            f"{big['no_change_share_pct']:.1f}% of the hashing build, whose encode is nearly free{_cpu_note(big)}): "
            "a stat of every "
            "file, and the switch's reads of the source's discovery, manifest, ledger and served rows, with the "
            "coverage and deletion proofs that every run re-establishes on the whole source; each linear.",
            "",
            f"What still grows faster than the corpus: the switch of a full build, {full_switch:.1f} s of the "
            f"{big['full_s']:.1f} s build at {big['docs']:,} documents, most of it the queryable probe. Every "
            "document new to the index is searched for once with its first chunk, and an exact search scores every "
            "vector: documents x vectors, fast per pair but with the square of the corpus in pairs. An engine with "
            "a vector index (PostgreSQL's HNSW) answers each search without scoring every vector; on an exact "
            "engine the search is what proves the served vectors are found, so it stays.",
        ]
    return lines


def write_page(rows: list[dict], results: list[dict]) -> None:
    from performance_page import write_section

    plot(rows)
    lines = [
        "A corpus of N documents made from the shared datasets' texts (`.md` and `.txt`, each a title and three "
        "to six sentences of one SciFact, SQuAD or PubMedQA passage; no two alike), built with the core stages "
        "and the real MiniLM (ONNX Runtime); each case in a fresh process. `raw encode` is the same chunk texts "
        "encoded again in the full build's process: the floor of a full build.",
        "",
        "Rows marked `hashing` use the deterministic test embedder instead of MiniLM (the same stages and "
        "store, 384 dimensions): they measure what is not encoding, at sizes the real model cannot reach on "
        "this machine in the time there was; their full-build and encode columns are not the model's.",
        "",
        "| embedder | backend | docs | chunks | full build s | docs/s | chunks/s | raw encode s (chunks/s) | full / raw encode "
        "| no change s (% of full) | one edit s (% of full) | 1% deleted s | rounds | peak RSS MB | store MB | measured on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.get('embedder', 'minilm')} | {r['backend']} | {r['docs']:,} | {r['chunks']:,} | {r['full_s']:.1f} | {r['docs_per_s']:.1f} "
            f"| {r['chunks_per_s']:.1f} | {r['raw_encode_s']:.1f} ({r['raw_encode_chunks_per_s']:.1f}){_sampled(r)} "
            f"| {r['full_over_raw_encode']:.2f} | {r['no_change_s']:.2f} ({r['no_change_share_pct']:.1f}%) "
            f"| {r['edit_s']:.2f} ({r['edit_share_pct']:.1f}%) | {r['delete_1pct_s']:.2f} | {r.get('rounds', 1)} "
            f"| {r['peak_rss_mb']:.0f} | {r['index_mb']:.1f} | {r.get('revision', '?')} |")
    single = _single_round(rows)
    incremental = _incremental(rows)
    lines += [*([""] + single if single else []), *([""] + incremental if incremental else []), "",
              *_findings(rows, results)]
    lines += ["", "![cost curve](performance-scale.png)", "",
              "Commands, one per row: " + ", ".join(
                  f"`python benchmarks/scale.py --docs {r['docs_asked']} --backend {r['backend']}"
                  f"{' --embedder hashing' if r.get('embedder') == 'hashing' else ''}{_rounds_flag(r)}"
                  f"{_sample_flag(r)}`" for r in rows)
              + "; load average (1, 5, 15 min) at each start: " + "; ".join(
                  f"{r['backend']} {r['docs_asked']:,}: {', '.join(map(str, r['load_avg_start']))}" for r in rows) + "."]
    write_section("The cost curve", "\n".join(lines),
                  command="python benchmarks/scale.py --page  (after the runs listed below)")
