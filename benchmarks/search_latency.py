"""`search_scale.py --latency-page`: the product's search latency against the arithmetic alone, in rounds.

Each round is the whole `search_scale.py` command again in a fresh process (the same seed: the same
vectors, postings and queries; stored, referenced and searched anew), timed as a process tree
(`performance_page.timed`: wall and CPU seconds), with the load average before and after. Each
round gives, per size, the p50 of its queries for the product (`store.search`, the in-memory copy)
and for numpy's matrix product and scipy's sparse product over the same data, and the CPU each
query cost its process (milliseconds, every thread of the process). The page shows, per size, the
median over the rounds of each of those figures and of each round's ratio, and every round's figures.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "search_scale.py"
# Options of the command that a round must not get: the rounds' own, and those that write the page or a file.
_DROPPED_WITH_VALUE = ("--rounds", "--out")
_DROPPED = ("--latency-page", "--page", "--json")


def round_arguments(argv: list[str], out: Path) -> list[str]:
    """The command line of one round: `argv` without the options of the rounds, writing its JSON to `out`."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _DROPPED_WITH_VALUE:
            skip = True
        elif not (arg in _DROPPED or arg.startswith(tuple(f"{name}=" for name in _DROPPED_WITH_VALUE))):
            kept.append(arg)
    return [*kept, "--out", str(out)]


def run_rounds(argv: list[str], rounds: int) -> dict:
    """`rounds` runs of the command `argv` (search_scale.py's arguments), each in a fresh process: their
    outputs and how each process went (wall, CPU of its tree, load before and after)."""
    from performance_page import measured_now, timed

    measured, outputs, processes = measured_now(), [], []
    with tempfile.TemporaryDirectory(prefix="search_latency_") as folder:
        for index in range(rounds):
            out = Path(folder) / f"round-{index}.json"
            load = [round(x, 2) for x in os.getloadavg()]
            print(f"round {index + 1} of {rounds}", file=sys.stderr, flush=True)
            run = timed([sys.executable, str(SCRIPT), *round_arguments(argv, out)], stdout=subprocess.DEVNULL)
            if run.done.returncode != 0:
                raise SystemExit(f"round {index + 1} of search_scale.py failed (exit {run.done.returncode})")
            outputs.append(json.loads(out.read_text()))
            processes.append({"wall_s": round(run.wall_s, 1), "cpu_s": round(run.cpu_s, 1), "load_before": load,
                              "load_after": [round(x, 2) for x in os.getloadavg()]})
    return {"command": "python " + " ".join(["benchmarks/search_scale.py", *argv]), "measured": measured,
            "rounds": outputs, "processes": processes}


def figures(output: dict) -> dict[int, dict]:
    """Per size of one run: the figures of the latency table (None where the run has none)."""
    found = {}
    for size in output["sizes"]:
        rows = {(r["method"], r["search"]): r for r in size["methods"] if r["queries"]}

        def of(method: str, search: str, key: str):
            return rows.get((method, search), {}).get(key)

        dense, numpy_ms = size["dense_p50_ms"], size["numpy_dense_p50_ms"]
        bm25, sparse = size["bm25_p50_ms"], size["sparse_bm25_p50_ms"]
        found[size["chunks"]] = {
            "dense": dense, "numpy": numpy_ms, "bm25": bm25, "sparse": sparse,
            # Within the round: both products ran on the machine as it was then.
            "dense_ratio": dense / numpy_ms if dense is not None and numpy_ms else None,
            "bm25_ratio": bm25 / sparse if bm25 is not None and sparse else None,
            "dense_cpu": of("memory", "dense", "cpu_per_query_ms"), "numpy_cpu": of("numpy", "dense", "cpu_per_query_ms"),
            "bm25_cpu": of("memory", "bm25", "cpu_per_query_ms"), "sparse_cpu": of("sparse", "bm25", "cpu_per_query_ms"),
            "hits_dense": of("memory", "dense", "hits_p50_ms"), "hits_bm25": of("memory", "bm25", "hits_p50_ms"),
            "version_check": of("memory", "dense", "version_check_p50_ms"),
            "copy_load_s": size.get("copy_load_s"), "copy_map_s": size.get("copy_map_s"),
            "mem_ratio": size["search_memory"].get("memory", {}).get("mem_ratio"),
        }
    return found


def medians(runs: list[dict[int, dict]]) -> dict[int, dict]:
    """Per size, the median over the runs of each figure (None when no run has it)."""
    combined = {}
    for chunks in runs[0]:
        keys = runs[0][chunks]
        values = {key: [run[chunks][key] for run in runs if run.get(chunks, {}).get(key) is not None] for key in keys}
        combined[chunks] = {key: statistics.median(found) if found else None for key, found in values.items()}
    return combined


def median_output(result: dict) -> dict:
    """`run_rounds`' result as one output of a round's shape, every number in it the median over the
    rounds (the same command and seed give every round the same shape); the rounds' command line."""

    def merge(values: list):
        present = [value for value in values if value is not None]
        if not present:
            return None
        first = present[0]
        if isinstance(first, dict):
            return {key: merge([value.get(key) for value in present]) for key in first}
        if isinstance(first, list):
            same_length = all(isinstance(value, list) and len(value) == len(first) for value in present)
            return [merge(list(items)) for items in zip(*present)] if same_length else first
        numbers = [value for value in present if isinstance(value, int | float) and not isinstance(value, bool)]
        if len(numbers) != len(present):  # text and flags: the first round's
            return first
        middle = statistics.median(numbers)
        # A count or a whole MB stays whole (the median of an even number of them may fall between two).
        return round(middle) if all(isinstance(number, int) for number in numbers) else middle

    return {**merge(result["rounds"]), "command": result["command"], "measured": result.get("measured")}


def _ms(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def _ratio(value) -> str:
    return "–" if value is None else f"{value:.2f}x"


def _row(label: str, rounds: int, chunks: int, f: dict) -> str:
    return (f"| {label}{chunks:,} | {rounds} | {_ms(f['dense'])} | {_ms(f['numpy'])} | {_ratio(f['dense_ratio'])} "
            f"| {_ms(f['bm25'])} | {_ms(f['sparse'])} | {_ratio(f['bm25_ratio'])} | {_ms(f['dense_cpu'])} / "
            f"{_ms(f['numpy_cpu'])} / {_ms(f['bm25_cpu'])} / {_ms(f['sparse_cpu'])} | {_ms(f['hits_dense'])} / "
            f"{_ms(f['hits_bm25'])} | {_ms(f['version_check'])} | {_ms(f['copy_load_s'])} | {_ms(f['copy_map_s'])} "
            f"| {_ms(f['mem_ratio'])} |")


def latency_lines(result: dict, before: dict | None = None) -> list[str]:
    """The section's markdown: `result` from `run_rounds` (or a saved single run, as one round), and
    the same rows of `before` (a saved run of earlier code, its own rounds)."""
    runs = [("", _as_rounds(result))] + ([("before: ", _as_rounds(before))] if before else [])
    first = runs[0][1]["rounds"][0]
    lines = [
        "Search through the product's own calls (`store.search`, the in-memory copy mapped from the cache folder, "
        "hits' text included) against the arithmetic alone over the same data: numpy's matrix product for dense, "
        "scipy's sparse product of precomputed BM25 weights for BM25. Each round runs the whole command in a fresh "
        f"process (the same seed: the same data and queries); per round, the p50 ms of {first['config']['queries']} "
        f"queries one at a time (k = {first['config']['k']}) and the CPU ms each query cost its process (every "
        "thread); the table gives the median over the rounds of each, and of each round's ratio (the product "
        "against the arithmetic in the same round).",
        "",
        "| N | rounds | dense p50 | numpy p50 | ratio | bm25 p50 | sparse p50 | ratio | CPU ms/query dense / numpy / "
        "bm25 / sparse | hits dense / bm25 | version check | copy load s | copy map s | search memory / raw vectors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, run in runs:
        per_round = [figures(output) for output in run["rounds"]]
        for chunks, found in medians(per_round).items():
            lines.append(_row(label, len(per_round), chunks, found))
    lines += ["", "Each round (dense / numpy / bm25 / sparse p50 ms):"]
    for label, run in runs:
        per_round = [figures(output) for output in run["rounds"]]
        for chunks in per_round[0]:
            lines.append(f"- {label}{chunks:,}: " + "; ".join(
                " / ".join(_ms(found[chunks][key]) for key in ("dense", "numpy", "bm25", "sparse")) for found in per_round))
    lines += ["", "The rounds' processes (wall s, CPU s of the process tree: generating, storing, the references and "
              "the search process; load average before / after):"]
    for label, run in runs:
        lines.append(f"- {label or 'this code: '}{processes_line(run['processes'])}")
    lines += ["", "Compare within a run: the two matrix products share the machine's state (OpenBLAS threads "
              f"{first['environment'].get('blas_threads')}; on a loaded machine a small product waits for a busy "
              "core, for numpy and the product alike, and its threads' spinning while they wait counts as CPU)."]
    if before:
        lines += ["", f"before: `{before['command']}` on earlier code."]
    return lines


def processes_line(processes: list[dict]) -> str:
    """How each round's process went: wall, CPU of its tree, the load average before and after."""
    return "; ".join(f"{p['wall_s']:.1f} s, {p['cpu_s']:.1f} CPU s, load {p['load_before']} / {p['load_after']}"
                     if p.get("wall_s") is not None else f"not timed, load {p['load_before']} at its start"
                     for p in processes)


def _as_rounds(result: dict) -> dict:
    """`run_rounds`' result as it is; a saved single run (`--out` JSON) as one round, its process untimed."""
    if "rounds" in result and isinstance(result["rounds"], list):
        return result
    return {"command": result["command"], "rounds": [result],
            "processes": [{"wall_s": None, "load_before": result["environment"]["loadavg"]}]}


def write_latency_page(result: dict, before: dict | None = None) -> None:
    """Write the section `search_scale.py:latency` of docs/performance.md."""
    from performance_page import write_section

    write_section("Search latency against its arrays", "\n".join(latency_lines(result, before)),
                  script="benchmarks/search_scale.py:latency", command=result.get("command"),
                  measured=result.get("measured"))
