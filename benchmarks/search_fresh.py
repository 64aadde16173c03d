"""`search_scale.py --fresh ROUNDS`: one question searched by `rag-pipeline search` in fresh processes.

The bundled sample (data/pipeline.yaml's three sources, the real model) is ingested (untimed) into a
new DuckDB file by each code measured, from its own checkout's data/pipeline.yaml: an older code
refuses settings added since, so each reads the config written for it. Then the first search after
each ingest (it writes the search copy to the cache folder), then ROUNDS searches, each a new
`python -m rag_pipeline.cli search` process timed whole: wall seconds, and CPU seconds of its
process tree (performance_page.timed). With `--before CHECKOUT`, the same command runs with that
checkout's code too, alternating round by round (which goes first alternates), each code on its
own index of the same sample. Medians; the load average before and after. Bytecode is cached
(PYTHONDONTWRITEBYTECODE is dropped for the children), as an installed package has it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

QUESTION = "How many vacation days do employees get?"
PROJECT = Path(__file__).resolve().parent.parent


def _own_config(code: Path, work: Path) -> Path:
    """A config for the code of checkout `code`: that checkout's own data/pipeline.yaml (its paths made
    absolute), its index a new DuckDB file in `work`. Each code reads the settings it knows: an older
    checkout refuses a setting added since."""
    import yaml

    from rag_pipeline_tests.harness.local_deployment import pipeline_config

    work.mkdir(parents=True)
    raw = pipeline_config(code / "data" / "pipeline.yaml")
    raw["storage"] = {**(raw.get("storage") or {}), "path": str(work / "index.duckdb")}
    config = work / "pipeline.yaml"
    config.write_text(yaml.safe_dump(raw))
    return config


def fresh_search(rounds: int, before: Path | None = None, label: str = "before") -> dict:
    from performance_page import timed

    work = Path(tempfile.mkdtemp(prefix="search_fresh_"))
    try:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
               "UNSTRUCTURED_DISABLE_NOTICE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("DAGSTER_HOME", None)
        # Bytecode cached, as an installed package has it (not each module compiled again in each process).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        codes = {"this code": PROJECT, **({label: before.resolve()} if before else {})}
        configs = {name: _own_config(code, work / f"code-{i}") for i, (name, code) in enumerate(codes.items())}

        def cli(name: str, *command: str):
            code, config = codes[name], configs[name]
            done = timed([sys.executable, "-m", "rag_pipeline.cli", command[0], "--config", str(config), *command[1:]],
                         env={**env, "PYTHONPATH": str(code)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=config.parent)
            if done.done.returncode != 0:
                raise RuntimeError(f"rag-pipeline {command[0]} ({code}) failed: {done.done.stderr[-2000:]}")
            return done

        load_before = [round(x, 2) for x in os.getloadavg()]
        # Untimed for the comparison: each code builds its own index of the same sample, then its first
        # search writes that index's search copy to the cache folder.
        ingest = {name: cli(name, "ingest") for name in codes}
        first = {name: cli(name, "search", QUESTION) for name in codes}
        runs: dict[str, list] = {name: [] for name in codes}
        for i in range(rounds):
            order = list(codes) if i % 2 == 0 else list(reversed(codes))
            for name in order:
                done = cli(name, "search", QUESTION)
                runs[name].append((round(done.wall_s, 3), round(done.cpu_s, 3)))
        hits = {name: len([line for line in done.done.stdout.splitlines() if line.strip()[:3].strip(". ").isdigit()])
                for name, done in first.items()}
        return {
            "question": QUESTION, "rounds": rounds,
            "ingest_wall_s": {name: round(done.wall_s, 1) for name, done in ingest.items()},
            "first_search": {name: {"wall_s": round(done.wall_s, 3), "cpu_s": round(done.cpu_s, 3)}
                             for name, done in first.items()},
            "hits_shown": hits,
            "searches": {name: {"wall_median_s": statistics.median(w for w, _ in values),
                                "cpu_median_s": statistics.median(c for _, c in values), "runs": values}
                         for name, values in runs.items()},
            "loadavg_before": load_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "command": "python benchmarks/search_scale.py " + " ".join(map(shlex.quote, sys.argv[1:])),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_fresh_page(output: dict) -> None:
    from performance_page import write_section

    lines = [
        f"`rag-pipeline search \"{output['question']}\"` on the bundled sample index (data/pipeline.yaml's "
        "sources, the real model), each a new process timed whole: wall and CPU seconds of its process tree, "
        f"median of {output['rounds']} rounds. Each code ingested its own index from its own checkout's "
        "data/pipeline.yaml (an older code refuses settings added since); with two codes the rounds alternate, "
        "and which goes first too. The first search after each ingest wrote that index's search copy to the "
        "cache folder: " + "; ".join(f"{name} {row['wall_s']:.2f} s wall, {row['cpu_s']:.2f} s CPU"
                                     for name, row in output["first_search"].items())
        + f". Load average {output['loadavg_before']} before, {output['loadavg_after']} after.",
        "",
        "| code | wall median s | CPU median s | hits shown | rounds (wall, CPU) |",
        "|---|---|---|---|---|",
    ]
    for label, row in output["searches"].items():
        runs = "; ".join(f"{w:.2f}, {c:.2f}" for w, c in row["runs"])
        lines.append(f"| {label} | {row['wall_median_s']:.2f} | {row['cpu_median_s']:.2f} | "
                     f"{output['hits_shown'][label]} | {runs} |")
    write_section("A search in a fresh process", "\n".join(lines), script="benchmarks/search_scale.py:fresh",
                  command=output["command"])
