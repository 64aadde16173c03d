"""`rag-pipeline`: the pipeline from the command line, for CI jobs and scripts outside the Dagster UI."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.config import ConfigError, PipelineConfig, load_config
from rag_pipeline.core.golden import GoldenSetError

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
    if getattr(args, "golden", None):
        config = config.model_copy(update={"golden_set": Path(args.golden).resolve()})
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


def cmd_eval(args: argparse.Namespace) -> int:
    """Ingest (incrementally) the configured sources, then evaluate the golden set."""
    from rag_pipeline.runner import evaluate_golden, ingest

    config, overrides = _load(args)
    with _instance() as instance:
        runs = ingest(config, instance, overrides=overrides)
        if not all(r.success for r in runs) and not args.json:
            print_ingest_summary(runs)
        evaluation = evaluate_golden(config, instance, args.mode, overrides=overrides)
    if evaluation.error:
        print(f"error: evaluation failed: {evaluation.error}", file=sys.stderr)
        return 1
    if args.trec_run:
        _write_trec_run(config, evaluation.summary["eval_id"], Path(args.trec_run))
    if args.json:
        keys = ("eval_id", "revision", "mode", "config_fingerprint", "index_state", "overall", "weighted",
                "by_slice", "by_split", "unanswerable", "latency", "no_result_threshold", "stale_cases")
        print(json.dumps({k: evaluation.summary.get(k) for k in keys}, indent=2, default=_json_number))
    else:
        print(evaluation.golden_summary)
        print(evaluation.slice_table)
        print(f"report: {evaluation.report}")
    ingestion_ok = all(r.success for r in runs)
    return 0 if ingestion_ok and evaluation.success else 1


def _json_number(value):
    return str(value)


def _write_trec_run(config: PipelineConfig, eval_id: str, out: Path) -> None:
    from rag_pipeline.core.store import DuckDBStore

    DuckDBStore(config.storage.path).write_trec_run(eval_id, out)
    print(f"TREC run written to {out}", file=sys.stderr)


def cmd_search(args: argparse.Namespace) -> int:
    """What retrieval returns for one question, with the trace: the first look at a failed case."""
    from rag_pipeline.core.embedding import make_embedder
    from rag_pipeline.core.models import SearchFilters
    from rag_pipeline.core.retrieval import Retriever
    from rag_pipeline.core.store import DuckDBStore

    config, _ = _load(args)
    store = DuckDBStore(config.storage.path)
    retriever = Retriever(store, make_embedder(config.embedding), config.retrieval)
    statuses = tuple(args.status.split(",")) if args.status else ("published",)
    filters = SearchFilters(tenant=args.tenant, roles=tuple(r for r in (args.roles or "").split(",") if r), statuses=statuses)
    result = retriever.search(args.query, filters, args.mode, args.k)
    if args.json:
        print(json.dumps(result.trace(depth=args.k), indent=2))
        return 0
    print(f"query: {args.query!r}  mode: {result.mode}  tenant: {filters.tenant}  roles: {list(filters.roles)}")
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or hit.title
        lines = f" lines {hit.line_start}-{hit.line_end}" if hit.line_start else ""
        print(f"{hit.rank:>3}. {hit.score:.4f}  {hit.doc_id}{lines}  [{where}]")
        print("      " + " ".join(hit.text.split())[:160])
    for stage, hits in result.candidates.items():
        print(f"  {stage}: " + ", ".join(f"{h.doc_id}#{h.rank}" for h in hits[:5]))
    print("  latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in result.latency_ms.items()))
    print(f"  context: {result.context_tokens} words")
    return 0


def cmd_import_beir(args: argparse.Namespace) -> int:
    """Turn a BEIR dataset into a golden-set file (its corpus.jsonl is used as a source in place)."""
    from rag_pipeline.core.beir import import_beir

    out = Path(args.out)
    count = import_beir(Path(args.dataset), args.name, out, split=args.qrels)
    corpus = (Path(args.dataset) / "corpus.jsonl").resolve()
    print(f"wrote {count} cases to {out}")
    print(f"evaluate with: rag-pipeline eval --source {args.name}={corpus} --golden {out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole pipeline on the bundled sample data, recorded in $DAGSTER_HOME for `make ui`."""
    from rag_pipeline.runner import evaluate_golden, ingest

    config, overrides = _load(args)
    with _instance() as instance:
        print(f"== ingesting {len(config.sources)} sources into {config.storage.path}")
        runs = ingest(config, instance, overrides=overrides)
        print_ingest_summary(runs)
        evaluation = None
        if config.golden_set is not None:
            print(f"\n== golden evaluation of {config.golden_set}")
            evaluation = evaluate_golden(config, instance, overrides=overrides)
            if evaluation.error:
                print(f"evaluation FAILED: {evaluation.error}")
            else:
                print(evaluation.golden_summary)
                print(evaluation.slice_table)
                print(f"report: {evaluation.report}")
    ok = all(run.success for run in runs) and (evaluation is None or evaluation.success)
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

    evaluate = sub.add_parser("eval", help="ingest, then evaluate retrieval on a golden set")
    common(evaluate)
    evaluate.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    evaluate.add_argument("--mode", choices=("dense", "bm25", "hybrid"), help="retrieval mode (default: config)")
    evaluate.add_argument("--trec-run", metavar="OUT", help="also write the ranked documents as a TREC run file")
    evaluate.set_defaults(func=cmd_eval)

    search = sub.add_parser("search", help="show what retrieval returns for one question, with its trace")
    search.add_argument("query")
    search.add_argument("--config")
    search.add_argument("--tenant", help="the caller's tenant (trusted context)")
    search.add_argument("--roles", help="comma-separated roles of the caller, e.g. employee,support")
    search.add_argument("--status", help="statuses to include (default: published), e.g. published,superseded")
    search.add_argument("--mode", choices=("dense", "bm25", "hybrid"))
    search.add_argument("--k", type=int, default=None)
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search, source=None)

    beir = sub.add_parser("import-beir", help="write a golden set from a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/)")
    beir.add_argument("dataset", help="folder holding corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    beir.add_argument("--name", required=True, help="source name to use for the corpus (document ids: NAME:<_id>)")
    beir.add_argument("--out", required=True, help="golden-set JSONL to write")
    beir.add_argument("--qrels", default="test", help="qrels split file name without .tsv (default: test)")
    beir.set_defaults(func=cmd_import_beir)

    demo = sub.add_parser("demo", help="run the whole pipeline on the configured (sample) data")
    common(demo)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, GoldenSetError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
