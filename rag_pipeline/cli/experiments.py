"""`experiment` and `experiments`: one-component experiments, gated and logged."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rag_pipeline.cli.common import gate_policy
from rag_pipeline.config import ConfigError, PipelineConfig, load_config, with_overlay


def _experiment_store(config: PipelineConfig, path: str | None, read_only: bool = False):
    """The experiment log's store: `--store` (a DuckDB file), or the configured one's namespace."""
    from rag_pipeline.core.storage import open_store

    if path:
        return open_store(config.storage.model_copy(update={"backend": "duckdb", "path": Path(path).resolve()}),
                          read_only=read_only)
    return open_store(config.storage, namespace="experiments", read_only=read_only)


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run a one-component experiment: baseline config vs candidate overlay, gated and logged."""
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.evaluation.experiments import BundleRefused, render_log, run_experiment
    from rag_pipeline.core.evaluation.gating.gates import render_gate

    base = load_config(args.config)
    baseline = with_overlay(base, args.baseline_set or [], args.baseline)
    candidate = with_overlay(base, args.set or [], args.candidate)
    store = _experiment_store(base, args.store)
    try:
        row, gate, _, _ = run_experiment(
            baseline, candidate, store, base.golden_set, gate_policy(base, args.policy), args.hypothesis,
            lambda c: make_embedder(c.embedding), allow_bundle=args.allow_bundle,
        )
    except BundleRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(render_gate(gate, terminal=True))
    print()
    print(render_log([row]))
    return 0 if gate.passed else 1


def cmd_experiments(args: argparse.Namespace) -> int:
    from rag_pipeline.core.evaluation.experiments import render_log
    from rag_pipeline.core.storage import NoIndexError

    base = load_config(args.config)
    if args.store and not Path(args.store).is_file():
        # A store the user named: a typo must not read as "no experiment logged yet".
        raise ConfigError(f"--store {Path(args.store).resolve()} does not exist: give the experiment log's DuckDB "
                          "file (written by `rag-pipeline experiment --store`), or leave --store out for the configured one")
    try:
        rows = _experiment_store(base, args.store, read_only=True).records.experiment_log()
    except NoIndexError as exc:
        rows = []  # no experiment yet: an empty log, and nothing created to say so
        print(f"no experiment logged yet ({str(exc).split(':', 1)[0]})", file=sys.stderr)
    print(render_log(rows))
    return 0
