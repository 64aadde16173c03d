"""`search_scale.py --fresh ROUNDS`: one question searched by `rag-pipeline search` in fresh processes.

The bundled sample (data/pipeline.yaml's three sources, the real model) is ingested once into a new
DuckDB file (untimed). Then the first search after that ingest (it writes the search copy to the
cache folder), then ROUNDS searches, each a new `python -m rag_pipeline.cli search` process timed
whole: wall seconds, and CPU seconds of its process tree (performance_page.timed). With `--before
CHECKOUT`, the same command runs with that checkout's code too, alternating round by round (which
goes first alternates), on the same index. Medians; the load average before and after. Bytecode
is cached (PYTHONDONTWRITEBYTECODE is dropped for the children), as an installed package has it.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

QUESTION = "How many vacation days do employees get?"
PROJECT = Path(__file__).resolve().parent.parent


def fresh_search(rounds: int, before: Path | None = None, label: str = "before") -> dict:
    import yaml
    from performance_page import timed

    from rag_pipeline_tests.harness.local_deployment import pipeline_config

    work = Path(tempfile.mkdtemp(prefix="search_fresh_"))
    try:
        raw = pipeline_config(PROJECT / "data" / "pipeline.yaml")
        raw["storage"] = {**(raw.get("storage") or {}), "path": str(work / "index.duckdb")}
        config = work / "pipeline.yaml"
        config.write_text(yaml.safe_dump(raw))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
               "UNSTRUCTURED_DISABLE_NOTICE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("DAGSTER_HOME", None)
        # Bytecode cached, as an installed package has it (not each module compiled again in each process).
        env.pop("PYTHONDONTWRITEBYTECODE", None)

        def cli(code: Path, *command: str):
            done = timed([sys.executable, "-m", "rag_pipeline.cli", command[0], "--config", str(config), *command[1:]],
                         env={**env, "PYTHONPATH": str(code)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=work)
            if done.done.returncode != 0:
                raise RuntimeError(f"rag-pipeline {command[0]} ({code}) failed: {done.done.stderr[-2000:]}")
            return done

        load_before = [round(x, 2) for x in os.getloadavg()]
        ingest = cli(PROJECT, "ingest")
        first = cli(PROJECT, "search", QUESTION)
        codes = {"this code": PROJECT, **({label: before.resolve()} if before else {})}
        runs: dict[str, list] = {label: [] for label in codes}
        for i in range(rounds):
            order = list(codes.items()) if i % 2 == 0 else list(reversed(codes.items()))
            for label, code in order:
                done = cli(code, "search", QUESTION)
                runs[label].append((round(done.wall_s, 3), round(done.cpu_s, 3)))
        hits = [line for line in first.done.stdout.splitlines() if line.strip()[:3].strip(". ").isdigit()]
        return {
            "question": QUESTION, "rounds": rounds, "ingest_wall_s": round(ingest.wall_s, 1),
            "first_search": {"wall_s": round(first.wall_s, 3), "cpu_s": round(first.cpu_s, 3)},
            "hits_shown": len(hits),
            "searches": {label: {"wall_median_s": statistics.median(w for w, _ in values),
                                 "cpu_median_s": statistics.median(c for _, c in values), "runs": values}
                         for label, values in runs.items()},
            "loadavg_before": load_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "command": "python benchmarks/search_scale.py " + " ".join(sys.argv[1:]),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_fresh_page(output: dict) -> None:
    from performance_page import write_section

    lines = [
        f"`rag-pipeline search \"{output['question']}\"` on the bundled sample index (data/pipeline.yaml's "
        "sources, the real model), each a new process timed whole: wall and CPU seconds of its process tree, "
        f"median of {output['rounds']} rounds. The first search after the ingest wrote the search copy to the "
        f"cache folder: {output['first_search']['wall_s']:.2f} s wall, {output['first_search']['cpu_s']:.2f} s CPU. "
        f"Load average {output['loadavg_before']} before, {output['loadavg_after']} after.",
        "",
        "| code | wall median s | CPU median s | rounds (wall, CPU) |",
        "|---|---|---|---|",
    ]
    for label, row in output["searches"].items():
        runs = "; ".join(f"{w:.2f}, {c:.2f}" for w, c in row["runs"])
        lines.append(f"| {label} | {row['wall_median_s']:.2f} | {row['cpu_median_s']:.2f} | {runs} |")
    write_section("A search in a fresh process", "\n".join(lines), script="benchmarks/search_scale.py:fresh",
                  command=output["command"])
