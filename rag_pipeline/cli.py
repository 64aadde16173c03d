"""`rag-pipeline`: the pipeline from the command line, for CI jobs and scripts outside the Dagster UI."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.config import ConfigError, PipelineConfig, load_config

# Columns of the human-readable ingestion summary, in pipeline order.
SUMMARY_COLUMNS = ("discovered", "skipped", "added", "changed", "unchanged", "deleted", "parsed", "chunked",
                   "embedded", "cache_hits", "indexed", "queryable", "failed")


def _source_overrides(values: Sequence[str]) -> dict[str, str]:
    overrides = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--source {value!r}: expected NAME=PATH, e.g. --source docs=./docs")
        overrides[name] = str(Path(path).resolve())
    return overrides


def _load(args: argparse.Namespace) -> tuple[PipelineConfig, dict[str, str]]:
    overrides = _source_overrides(args.source or [])
    config = load_config(args.config)
    if overrides:
        config = config.with_sources({k: Path(v) for k, v in overrides.items()})
    return config, overrides


def _instance():
    """The Dagster instance of $DAGSTER_HOME when set (runs then show in the UI), else a throwaway one."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()


def cmd_ingest(args: argparse.Namespace) -> int:
    from rag_pipeline.runner import ingest

    config, overrides = _load(args)
    with _instance() as instance:
        runs = ingest(config, instance, overrides=overrides)
    if args.json:
        print(json.dumps({"sources": {run.source_id: run.as_json() for run in runs}}, indent=2, default=str))
    else:
        print_ingest_summary(runs)
    return 0 if all(run.success for run in runs) else 1


def print_ingest_summary(runs) -> None:
    width = max([len("source"), *(len(r.source_id) for r in runs)])
    header = "source".ljust(width) + " " + " ".join(c.rjust(max(len(c), 5)) for c in SUMMARY_COLUMNS)
    print(header)
    print("-" * len(header))
    for run in runs:
        values = {**run.counts, "failed": len(run.failures)}
        print(run.source_id.ljust(width) + " " + " ".join(str(values.get(c, 0)).rjust(max(len(c), 5)) for c in SUMMARY_COLUMNS))
    for run in runs:
        for failure in run.failures:
            print(f"  FAILED {failure['doc_id']} at {failure['stage']}: {failure['reason']}")
        for check, passed in run.checks.items():
            if not passed:
                print(f"  CHECK FAILED {run.source_id}: {check}")
        if run.error:
            print(f"  RUN FAILED {run.source_id}: {run.error}")


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole pipeline on the bundled sample data, recorded in $DAGSTER_HOME for `make ui`."""
    from rag_pipeline.runner import ingest

    config, overrides = _load(args)
    with _instance() as instance:
        print(f"== ingesting {len(config.sources)} sources into {config.storage.path}")
        runs = ingest(config, instance, overrides=overrides)
        print_ingest_summary(runs)
    ok = all(run.success for run in runs)
    print("\ndemo " + ("succeeded" if ok else "FAILED") + "; `make ui` shows the runs, checks and metadata")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="pipeline config (default: $RAG_PIPELINE_CONFIG or data/pipeline.yaml)")
        p.add_argument("--source", action="append", metavar="NAME=PATH", help="add or override a source")
        p.add_argument("--json", action="store_true", help="print one JSON object")

    ingest = sub.add_parser("ingest", help="ingest every configured source and report coverage")
    common(ingest)
    ingest.set_defaults(func=cmd_ingest)

    demo = sub.add_parser("demo", help="run the whole pipeline on the configured (sample) data")
    common(demo)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
