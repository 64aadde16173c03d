"""The chunking strategies compared on the sample corpus, one component change at a time, with the
real model, through the experiment runner (gate + experiment log).

    python benchmarks/chunking_experiments.py [--store PATH]

Steps: fixed-size windows with overlap -> heading sections -> + breadcrumbs -> + thin-section merge.
Prints the experiment log rows (recall@1/3/5/10 and MRR@10, paired bootstrap p-values, decision).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.api import (  # noqa: E402
    duckdb_store,
    load_config,
    load_policy,
    make_embedder,
    render_log,
    run_experiment,
)
from rag_pipeline.config import PROJECT_ROOT  # noqa: E402

METRICS = ("recall_at_1", "recall_at_3", "recall_at_5", "recall_at_10", "mrr_at_10")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=PROJECT_ROOT / "benchmarks" / "out" / "chunking" / "experiments.duckdb")
    args = parser.parse_args()
    if args.store.exists():
        args.store.unlink()
    config = load_config(PROJECT_ROOT / "data" / "pipeline.yaml")
    policy = load_policy(config.gate_policy)
    policy = policy.model_copy(update={"headline_metrics": METRICS, "tolerance": {m: 0.01 for m in METRICS}})

    def chunking(**changes):
        return config.model_copy(update={"chunking": config.chunking.model_copy(update=changes)})

    steps = [
        (chunking(strategy="fixed", breadcrumbs=False, merge_thin=False), chunking(strategy="sections", breadcrumbs=False, merge_thin=False),
         "heading sections keep a topic together where fixed windows cut it"),
        (chunking(strategy="sections", breadcrumbs=False, merge_thin=False), chunking(strategy="sections", breadcrumbs=True, merge_thin=False),
         "breadcrumbs put the title and heading path into every embedded chunk"),
        (chunking(strategy="sections", breadcrumbs=True, merge_thin=False), chunking(strategy="sections", breadcrumbs=True, merge_thin=True),
         "merging thin sections removes near-empty chunks that crowd the top k"),
    ]
    store = duckdb_store(args.store)
    rows = []
    for baseline, candidate, hypothesis in steps:
        row, gate, _, _ = run_experiment(baseline, candidate, store, config.golden_set, policy, hypothesis,
                                         lambda c: make_embedder(c.embedding))
        rows.append(row)
        print(f"{hypothesis}: {gate.decision}", file=sys.stderr)
    print(render_log(rows, METRICS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
