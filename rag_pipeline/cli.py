"""`rag-pipeline`: the pipeline from the command line, for CI jobs and scripts outside the Dagster UI."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import logging
import math
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from rag_pipeline.config import ConfigError, PipelineConfig, load_config, parse_source_overrides, with_overlay
from rag_pipeline.core.evaluation.golden import GoldenSetError
from rag_pipeline.core.render import printable, printable_lines

if TYPE_CHECKING:  # the runner imports Dagster: only commands that run something pay for it
    from rag_pipeline.runner import MonitorRun

# Columns of the human-readable ingestion summary, in pipeline order.
SUMMARY_COLUMNS = ("discovered", "skipped", "added", "changed", "unchanged", "unreadable", "deleted", "parsed", "chunked",
                   "embedded", "cache_hits", "indexed", "queryable", "failed")


def _load(args: argparse.Namespace) -> tuple[PipelineConfig, dict[str, str]]:
    overrides = parse_source_overrides(args.source or [])
    return load_config(args.config, sources=overrides, golden_set=getattr(args, "golden", None)), overrides


def _load_sources(args: argparse.Namespace) -> tuple[PipelineConfig, dict[str, str]]:
    """`_load`, for a command that ingests: with no source at all it would do nothing and say nothing."""
    config, overrides = _load(args)
    if not config.sources:
        raise ConfigError("no sources to ingest: list them under sources: in the config, or pass --source NAME=PATH")
    _check_source_paths(config)
    return config, overrides


def _check_source_paths(config: PipelineConfig) -> None:
    """A source path that does not exist is a config error (exit 2), unless the source was served
    from it before: then it vanished (unmounted, moved), an outage that fails that source alone."""
    from rag_pipeline.core.storage import NoIndexError

    missing = [s for s in config.sources if not Path(s.path).exists()]
    if not missing:
        return
    try:
        store = _store(config, create=False)  # a config error must not leave an empty index behind
        served_before = {s.source_id for s in missing if store.ledger.served_root(s.source_id) == str(s.path)}
        store.close()
    except NoIndexError:
        served_before = set()
    for source in missing:
        if source.source_id not in served_before:
            where = config.config_path or "the config"
            raise ConfigError(f"source {source.name!r}: path {source.path} does not exist, and nothing was ever indexed from "
                              f"it: fix its path in {where} (or --source {source.name}=PATH), or remove the source")


def _store(config: PipelineConfig, read_only: bool = False, create: bool = True):
    """The configured store; `read_only` for commands that only read it (they create nothing: a
    missing index is an error, exit 2), `create=False` for writers that need an index there."""
    from rag_pipeline.core.storage import open_store

    return open_store(config.storage, read_only=read_only, create=create)


def _evaluation_id(store, requested: str | None) -> str:
    """An evaluation id as given, or the latest stored one for `latest` (or nothing given)."""
    eval_id = store.records.latest_evaluation() if requested in (None, "", "latest") else requested
    if eval_id is None:
        raise ConfigError("no evaluation in the store yet: run `rag-pipeline eval` first")
    return eval_id


def _experiment_store(config: PipelineConfig, path: str | None, read_only: bool = False):
    """The experiment log's store: `--store` (a DuckDB file), or the configured one's namespace."""
    from rag_pipeline.core.storage import open_store

    if path:
        return open_store(config.storage.model_copy(update={"backend": "duckdb", "path": Path(path).resolve()}),
                          read_only=read_only)
    return open_store(config.storage, namespace="experiments", read_only=read_only)


def _instance():
    """The Dagster instance of $DAGSTER_HOME when set (runs then show in the UI), else a throwaway one."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()


def _walks(config: PipelineConfig) -> dict:
    """Each source's walk (names, sizes, times), made once for the two decisions below; a source
    whose root cannot be walked has none (its run says why)."""
    from rag_pipeline.core.ingestion.inputs import walk_source

    walks = {}
    for source in config.sources:
        try:
            walks[source.source_id] = walk_source(source)
        except (OSError, RuntimeError):
            continue
    return walks


def _all_unchanged(config: PipelineConfig, store, force: bool, walks: dict):
    """Every source's outcome when none of them needs a run, decided before Dagster is imported
    (which alone costs seconds); None otherwise.

    With a persistent Dagster instance ($DAGSTER_HOME), a command-line run of a source that was
    killed is left open there until a later run of the source closes it: a source whose ingestion
    lock says such a run may exist (it is held now, or its holder died holding it; see
    `Database.run_left_open`) goes to the runner, which closes it; so does every source on a
    backend whose lock leaves no trace of a dead holder (PostgreSQL's advisory lock). Runs the UI,
    a sensor or a schedule launched take no such lock: the source sensor closes those of dead
    processes."""
    if force:
        return None
    from rag_pipeline.core.ingestion.embedding import make_embedder
    from rag_pipeline.core.ingestion.inputs import settings_fingerprint
    from rag_pipeline.outcomes import unchanged_run

    persistent_instance = bool(os.environ.get("DAGSTER_HOME"))
    settings = settings_fingerprint(config.chunking, make_embedder(config.embedding).identity)
    runs = []
    for source in config.sources:
        if source.source_id not in walks:
            return None
        if persistent_instance and store.db.run_left_open(source.source_id) is not False:
            return None
        run = unchanged_run(source, store, settings, walks[source.source_id])
        if run is None:
            return None
        runs.append(run)
    return runs


def _start_early(config: PipelineConfig, store, walks: dict) -> None:
    """Files changed (their size or time differ from the committed manifest): a run is coming.
    Start the parser process for their types now, under the first such source's memory limit, so
    that its imports run on the other core while this process loads the model and imports Dagster
    (the parser's start is the longer of the two)."""
    from rag_pipeline.core.ingestion.embedding import ModelEmbedder, make_embedder
    from rag_pipeline.core.ingestion.parse_worker import start_parser_early

    types: set[str] = set()
    memory_limit = None
    for source in config.sources:
        walk = walks.get(source.source_id)
        if walk is None:
            continue
        try:
            manifest = store.staging.manifest_rows(source.source_id)
        except Exception:  # noqa: BLE001 - only a head start: the run itself reports any problem
            continue
        changed = walk.types_likely_to_parse(manifest)
        if changed and memory_limit is None:
            memory_limit = source.limits.max_parser_memory_mb
        types |= changed
    start_parser_early(types, memory_limit)
    embedder = make_embedder(config.embedding)
    if types and isinstance(embedder, ModelEmbedder):
        # As one text needs it (a page edit's chunk); once per process, so the run's embedder finds
        # it loaded. A full build encodes in batches on another session and leaves this one idle.
        embedder.load()


def cmd_ingest(args: argparse.Namespace) -> int:
    config, overrides = _load_sources(args)
    walks = _walks(config)
    store = _store(config)
    with store.db.session():
        _start_early(config, store, walks)
        runs = _all_unchanged(config, store, args.force, walks)
    if runs is None:
        from rag_pipeline.runner import ingest

        with _instance() as instance:
            runs = ingest(config, instance, overrides=overrides, force=args.force)
    if args.json:
        print_json({"sources": {run.source_id: run.as_json() for run in runs}})
    else:
        print_ingest_summary(runs)
    if _interrupted(runs):
        return INTERRUPTED_EXIT
    if not all(run.success for run in runs):
        return 1
    return 1 if args.fail_on_document_errors and any(run.failures for run in runs) else 0


INTERRUPTED_EXIT = 128 + signal.SIGINT  # the shell's code for a command stopped by Ctrl-C
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE  # and for one whose reader closed its output


def _interrupted(runs) -> bool:
    """Whether Ctrl-C (or a termination signal) stopped the ingestion: then nothing comes after it."""
    return any(run.interrupted for run in runs)


def print_ingest_summary(runs) -> None:
    width = max([len("source"), *(len(r.source_id) for r in runs)])
    header = "source".ljust(width) + " " + " ".join(c.rjust(max(len(c), 5)) for c in SUMMARY_COLUMNS)
    print(header)
    print("-" * len(header))
    for run in runs:
        values = {**run.counts, "failed": len(run.failures)}
        print(run.source_id.ljust(width) + " " + " ".join(str(values.get(c, 0)).rjust(max(len(c), 5)) for c in SUMMARY_COLUMNS))
    for run in runs:
        if run.not_run:
            print(f"  {run.source_id}: {printable(run.not_run)}")
        _print_skipped(run)
        for failure in run.failures:
            print(f"  FAILED {printable(failure['doc_id'])} at {failure['stage']}: {printable(failure['reason'])}")
        for check, passed in run.checks.items():
            if not passed:
                print(f"  CHECK {'WARNED' if check in run.warnings else 'FAILED'} {run.source_id}: {check}")
        if run.error:
            print(f"  RUN FAILED {run.source_id}: {printable(run.error)}")


# Exit codes of eval, gate and promote (documented in docs/golden-set.md).
EXIT_PASS = 0  # measured; the gate passed, or found nothing to compare with, or an inconclusive drop
EXIT_REGRESSION = 1  # the gate found a regression, or a run failed (ingestion, evaluation: the output says which)
EXIT_USAGE = 2  # a usage or config error: flags, the config, the golden file, a run file
# Errors of the evaluation step that are the input's, not the machine's: exit 2, like the same error caught before it.
_INPUT_ERRORS = {"GoldenSetError", "RunFileError", "InputTooLargeError", "ConfigError", "EvaluationError"}


# Skipped files named per reason before the rest are only counted (`--json` lists them all).
SKIPPED_SHOWN = 5


def _print_skipped(run) -> None:
    """What discovery skipped and why, grouped by reason: `skipped 3: unsupported file type '.png' (2: a.png, b.png)`."""
    by_reason: dict[str, list[str]] = {}
    for item in run.skipped:
        by_reason.setdefault(item["reason"], []).append(item["doc_id"])
    for reason, doc_ids in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0])):
        named = ", ".join(printable(d) for d in doc_ids[:SKIPPED_SHOWN])
        more = f" and {len(doc_ids) - SKIPPED_SHOWN} more" if len(doc_ids) > SKIPPED_SHOWN else ""
        print(f"  SKIPPED {len(doc_ids)} in {run.source_id}: {printable(reason)}: {named}{more}")


def cmd_eval(args: argparse.Namespace) -> int:
    """Ingest (incrementally) the configured sources, or read another system's run; measure the golden
    set (metrics, report, traces, requested files); then gate against the promoted baseline."""
    from rag_pipeline.runner import evaluate_golden, ingest

    config, overrides = _load(args) if args.run else _load_sources(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    if args.run and not Path(args.run).is_file():
        raise ConfigError(f"run file {args.run} does not exist")
    with _instance() as instance:
        runs = [] if args.run else ingest(config, instance, overrides=overrides)
        if not all(r.success for r in runs) and not args.json:
            print_ingest_summary(runs)
        if _interrupted(runs):
            return INTERRUPTED_EXIT
        golden = _checked_golden(config)  # a bad golden file is named here, line by line (exit 2)
        evaluation = evaluate_golden(config, instance, args.mode, overrides=overrides, suite=args.subset,
                                     run_file=str(Path(args.run).resolve()) if args.run else None, gate=not args.no_gate)
    if not evaluation.measured:
        print(f"error: evaluation failed: {printable_lines(evaluation.error)}", file=sys.stderr)
        return EXIT_USAGE if evaluation.error_kind in _INPUT_ERRORS else EXIT_REGRESSION
    store = _store(config)
    eval_id = evaluation.summary["eval_id"]
    files = _write_eval_files(args, golden, store, eval_id)
    comparison = None
    if not args.no_gate:
        from rag_pipeline.core.evaluation.baselines import compare_with_baseline

        comparison = compare_with_baseline(store, eval_id, _policy(config, None))
    if args.junit_xml:
        from rag_pipeline.core.evaluation.junit import write_junit

        files["junit_xml"] = str(write_junit(Path(args.junit_xml), eval_id, store.records.case_rows(eval_id),
                                             evaluation.summary.get("report_k", config.evaluation.report_k), comparison,
                                             gated=not args.no_gate))
    regression = comparison is not None and comparison.gate is not None and not comparison.gate.passed
    ingestion_ok = all(r.success for r in runs)
    code = EXIT_REGRESSION if regression or not ingestion_ok or evaluation.error else EXIT_PASS
    if args.json:
        keys = ("eval_id", "revision", "suite", "mode", "config_fingerprint", "index_state", "report_k", "overall",
                "weighted", "by_slice", "by_split", "unanswerable", "latency", "answers", "no_result_threshold",
                "stale_cases")
        print_json({**{k: evaluation.summary.get(k) for k in keys}, "report": evaluation.report, "files": files,
                    "gate": _gate_json(comparison, gated=not args.no_gate), "exit_code": code})
    else:
        _print_measurement(evaluation, store, files)
        print()
        if args.no_gate:
            print("gate: not gated (--no-gate): measured only")
        else:
            from rag_pipeline.core.evaluation.baselines import gate_text

            print(gate_text(comparison))
        if evaluation.error:
            print(f"\nevaluation run FAILED after measuring: {printable_lines(evaluation.error)}")
        if not ingestion_ok:
            print("\ningestion FAILED for " + ", ".join(r.source_id for r in runs if not r.success) + " (above)")
    return code


def _checked_golden(config: PipelineConfig):
    """The configured golden set, validated against every document the sources have held (ids
    resolved from paths); GoldenSetError lists each problem on its own line."""
    from rag_pipeline.core.evaluation.golden import load_golden_set

    store = _store(config)
    history = store.ledger.document_history()
    return load_golden_set(config.golden_set, served_hashes=store.served.document_hashes() if history else None,
                           known_documents=history or None)


def _write_eval_files(args: argparse.Namespace, golden, store, eval_id: str) -> dict[str, str]:
    """The run files asked for: a TREC run (retrieval scores, tagged with the eval id) and its qrels beside it."""
    files: dict[str, str] = {}
    if not args.trec_run:
        return files
    from rag_pipeline.core.evaluation.run_files import write_qrels, write_trec_run

    out = Path(args.trec_run)
    files["trec_run"] = str(write_trec_run(store.records.ranked_runs(eval_id), out, tag=eval_id))
    evaluated = {row["case_id"] for row in store.records.case_rows(eval_id)}
    qrels = out.with_suffix(".qrels") if out.suffix != ".qrels" else out.with_name(out.name + ".qrels")
    files["qrels"] = str(write_qrels([c for c in golden.cases if c.id in evaluated], qrels))
    return files


def _print_measurement(evaluation, store, files: dict[str, str]) -> None:
    """What was measured, before any verdict: the golden set, the metrics table, the failed cases at
    the report's k, and where the report and files are."""
    from rag_pipeline.core.evaluation.report import slice_text

    summary = evaluation.summary
    print(printable_lines(evaluation.golden_summary))
    if summary.get("mode") == "run":
        print(f"scored another system's run (config fingerprint {summary['config_fingerprint'][:12]}: the run file's hash)")
    print()
    print(slice_text(summary))
    k = summary.get("report_k", 5)
    failed = [row for row in store.records.failed_cases(summary["eval_id"], k) if row["split"] != "holdout"]
    print(f"\nfailed cases at k={k} (no gold document in the top {k}, or a forbidden one retrieved): {len(failed)}"
          + ("" if failed else " (none)"))
    for row in failed[:10]:
        rank = row["first_gold_rank"] or "not in top 100"
        print(f"  {printable(row['case_id'])} [{printable(row['slice'])}] first gold rank {rank}; top {k}: "
              + (printable(", ".join((row["ranked_docs"] or [])[:k])) or "nothing retrieved"))
    if len(failed) > 10:
        print(f"  ... and {len(failed) - 10} more in the report")
    print(f"\nreport: {evaluation.report}")
    for name, path in files.items():
        print(f"{name.replace('_', ' ')}: {path}")


def _gate_json(comparison, gated: bool) -> dict:
    if not gated:
        return {"verdict": "not gated"}
    if comparison is None or comparison.gate is None:
        return {"verdict": "no baseline", "reason": comparison.missing_reason if comparison else None}
    gate = comparison.gate
    return {"verdict": gate.verdict, "baseline": comparison.baseline_id, "against": comparison.against,
            "promote": gate.promote, "decision": gate.decision,
            "rules": [{"rule": r.rule, "outcome": r.outcome, "message": r.message} for r in gate.rules]}


def print_json(value) -> None:
    """One strict JSON document on stdout: NaN and infinities (a metric with no case) become null,
    which every JSON parser reads, and values JSON has no type for become strings."""

    def finite(item):
        if isinstance(item, float):
            return item if math.isfinite(item) else None
        if isinstance(item, dict):
            return {key: finite(v) for key, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [finite(v) for v in item]
        return item

    print(json.dumps(finite(value), indent=2, default=str, allow_nan=False))


def cmd_release_holdout(args: argparse.Namespace) -> int:
    """Move cases out of holdout: a new golden revision, recorded with who and why."""
    from rag_pipeline.core.evaluation.holdout import release_from_holdout

    config, _ = _load(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    old, new = release_from_holdout(config.golden_set, args.case_ids, args.to)
    _store(config).records.record_golden_change("release-holdout", args.case_ids, old, new, args.by, args.reason)
    print(f"moved {len(args.case_ids)} case(s) from holdout to {args.to}: golden revision {old} -> {new} (recorded)")
    return 0


def cmd_golden_import(args: argparse.Namespace) -> int:
    """A golden set from a RAGAS, DeepEval or hand-written dataset; names every reference it could not map."""
    from rag_pipeline.core.evaluation.golden import load_golden_set
    from rag_pipeline.core.evaluation.golden_formats import import_from_store

    out = Path(args.out)
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists: a golden revision is frozen; write a new file (or pass --force)")
    config = load_config(args.config)
    store = _store(config, read_only=True)
    result = import_from_store(Path(args.file), args.shape, store, args.source_prefix)
    for problem in result.problems():
        print(f"  {printable(problem)}", file=sys.stderr)
    if not result.cases:
        print(f"error: {printable_lines(result.summary())}: no case to write", file=sys.stderr)
        return 1
    result.write(out)
    golden = load_golden_set(out, served_hashes=store.served.document_hashes(), known_documents=store.ledger.document_history())
    print(printable_lines(result.summary()))
    print(f"wrote {out}: {printable_lines(golden.summary())}")
    return 0


def cmd_golden_export_ragas(args: argparse.Namespace) -> int:
    """A stored evaluation as a RAGAS dataset (JSONL, or CSV when --out ends in .csv); holdout left out."""
    import tempfile

    from rag_pipeline.core.evaluation.evaluate import golden_file_for_revision
    from rag_pipeline.core.evaluation.golden import load_golden_set
    from rag_pipeline.core.evaluation.golden_formats import export_ragas

    config = load_config(args.config)
    store = _store(config, read_only=True)
    eval_id = _evaluation_id(store, args.eval)
    record = store.records.evaluation_summary(eval_id)
    moved = sorted(s for s, h in record["index_state"].items() if store.served.manifest_hash(s) != h)
    if moved:
        print(f"warning: {', '.join(moved)} changed since {eval_id}: contexts are the current texts of its chunk ids",
              file=sys.stderr)
    with tempfile.TemporaryDirectory() as folder:
        golden = load_golden_set(golden_file_for_revision(config.golden_set, store, record["revision"], Path(folder)))
    record["traces"] = store.records.case_traces(eval_id)
    export = export_ragas(record, golden, Path(args.out), store.served.chunk_text_by_id, config.answers.context_k)
    print(printable_lines(export.summary()))
    return 0


def cmd_golden_triage(args: argparse.Namespace) -> int:
    """The review queue: items to turn into golden cases, with what a reviewer needs beside them."""
    from rag_pipeline.core.evaluation.golden import load_golden_set
    from rag_pipeline.core.evaluation.triage import build_queue, write_queue
    from rag_pipeline.core.ingestion.embedding import make_embedder
    from rag_pipeline.core.retrieval.retriever import Retriever

    config, _ = _load(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    store, embedder = _store(config, read_only=True), make_embedder(config.embedding)
    items = build_queue(store, load_golden_set(config.golden_set), Retriever(store, embedder, config.retrieval), embedder,
                        Path(args.reports) if args.reports else None,
                        verdicts=Path(args.verdicts) if args.verdicts else None)
    write_queue(items, Path(args.out))
    origins: dict[str, int] = {}
    for item in items:
        origins[item["origin"]] = origins.get(item["origin"], 0) + 1
    print(f"{len(items)} item(s) to review in {args.out} ("
          + (", ".join(f"{n} {o}" for o, n in sorted(origins.items())) or "nothing found") + "); fill reference, gold_docs, "
          "slice, split, answerable, reviewer and decision (accept | reject), then run `rag-pipeline golden accept`")
    return 0


def cmd_golden_accept(args: argparse.Namespace) -> int:
    """Reviewed items become golden cases in a new revision; disagreements and near duplicates are listed."""
    from rag_pipeline.core.evaluation.triage import accept_reviewed
    from rag_pipeline.core.ingestion.embedding import make_embedder

    config, _ = _load(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    result = accept_reviewed([Path(p) for p in args.reviewed], config.golden_set, _store(config),
                             make_embedder(config.embedding), config.source_ids, args.duplicate_threshold)
    print(printable_lines(result.summary()))
    return 0 if not (result.disagreements or result.incomplete or result.duplicates) else 1


def cmd_search(args: argparse.Namespace) -> int:
    """What retrieval returns for one question, with the trace: the first look at a failed case."""
    from rag_pipeline.core.ingestion.embedding import make_embedder
    from rag_pipeline.core.models import SearchFilters
    from rag_pipeline.core.retrieval.retriever import Retriever

    config, _ = _load(args)
    store = _store(config, read_only=True)
    retriever = Retriever(store, make_embedder(config.embedding), config.retrieval)
    statuses = tuple(args.status.split(",")) if args.status else ("published",)
    filters = SearchFilters(tenant=args.tenant, roles=tuple(r for r in (args.roles or "").split(",") if r), statuses=statuses)
    result = retriever.search(args.query, filters, args.mode, args.k)
    if args.json:
        print_json(result.trace(depth=args.k))
        return 0
    print(f"query: {args.query!r}  mode: {result.mode}  tenant: {filters.tenant}  roles: {list(filters.roles)}")
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or hit.title
        lines = f" lines {hit.line_start}-{hit.line_end}" if hit.line_start else ""
        print(f"{hit.rank:>3}. {hit.score:.4f}  {printable(hit.doc_id)}{lines}  [{printable(where)}]")
        print("      " + printable(" ".join(hit.text.split())[:160]))
    for stage, hits in result.candidates.items():
        print(f"  {stage}: " + ", ".join(f"{printable(h.doc_id)}#{h.rank}" for h in hits[:5]))
    print("  latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in result.latency_ms.items()))
    print(f"  context: {result.context_tokens} words")
    return 0


def cmd_import_beir(args: argparse.Namespace) -> int:
    """Turn a BEIR dataset into a golden-set file (its corpus.jsonl is used as a source in place)."""
    from rag_pipeline.core.evaluation.beir import import_beir

    out = Path(args.out)
    count = import_beir(Path(args.dataset), args.name, out, split=args.qrels)
    corpus = (Path(args.dataset) / "corpus.jsonl").resolve()
    print(f"wrote {count} cases to {out}")
    print(f"evaluate with: rag-pipeline eval --source {args.name}={corpus} --golden {out}")
    return 0


def _policy(config: PipelineConfig, path: str | None):
    from rag_pipeline.core.evaluation.gates import policy_or_default

    return policy_or_default(path or config.gate_policy)


def cmd_gate(args: argparse.Namespace) -> int:
    """Compare two stored evaluations; exit 1 on a regression (an ERROR rule), else 0 (also when there
    is no baseline to compare with, or the drop is inconclusive)."""
    from rag_pipeline.core.evaluation.baselines import compare_with_baseline, gate_text

    config = load_config(args.config)
    store = _store(config, read_only=True)
    candidate_id = _evaluation_id(store, args.candidate)
    baseline_id = None if args.baseline == "baseline" else args.baseline
    comparison = compare_with_baseline(store, candidate_id, _policy(config, args.policy), baseline_id)
    print(gate_text(comparison))
    return EXIT_REGRESSION if comparison.gate is not None and not comparison.gate.passed else EXIT_PASS


def cmd_promote(args: argparse.Namespace) -> int:
    """Promote an evaluation to baseline of its golden revision, if the gate says PROMOTE; exit 1
    only on a regression (keeping the baseline because the candidate is not better exits 0)."""
    from rag_pipeline.core.evaluation.baselines import promotion

    config = load_config(args.config)
    store = _store(config, create=False)
    eval_id = _evaluation_id(store, args.eval)
    summary = store.records.evaluation_summary(eval_id)
    if store.records.baseline(summary["revision"], summary.get("suite", "full")) == eval_id:
        # Already promoted (a promote that died before Dagster heard of it, or run twice): finish it.
        _record_promotion(store, eval_id)
        print(f"{eval_id} is already the promoted baseline of golden revision {summary['revision']}")
        return 0
    outcome = promotion(store, eval_id, _policy(config, args.policy))
    if outcome.promoted:
        _record_promotion(store, eval_id)
    print(outcome.text)
    return EXIT_REGRESSION if outcome.regression else EXIT_PASS


def _record_promotion(store, eval_id: str, instance=None) -> None:
    """Show the promotion in Dagster: the gate check of that evaluation passes against itself."""
    from rag_pipeline.defs.checks import record_promotion

    revision = store.records.evaluation_summary(eval_id)["revision"]
    if instance is not None:
        record_promotion(instance, revision, eval_id)
        return
    with _instance() as own:
        record_promotion(own, revision, eval_id)


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run a one-component experiment: baseline config vs candidate overlay, gated and logged."""
    from rag_pipeline.core.evaluation.experiments import BundleRefused, render_log, run_experiment
    from rag_pipeline.core.evaluation.gates import render_gate
    from rag_pipeline.core.ingestion.embedding import make_embedder

    base = load_config(args.config)
    baseline = with_overlay(base, args.baseline_set or [], args.baseline)
    candidate = with_overlay(base, args.set or [], args.candidate)
    store = _experiment_store(base, args.store)
    try:
        row, gate, _, _ = run_experiment(
            baseline, candidate, store, base.golden_set, _policy(base, args.policy), args.hypothesis,
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
    try:
        rows = _experiment_store(base, args.store, read_only=True).records.experiment_log()
    except NoIndexError as exc:
        rows = []  # no experiment yet: an empty log, and nothing created to say so
        print(f"no experiment logged yet ({str(exc).split(':', 1)[0]})", file=sys.stderr)
    print(render_log(rows))
    return 0


def _print_answers(answers: dict) -> None:
    """The answer metrics, printed beside (never blended into) the retrieval table."""
    if not answers:
        return
    print(f"\nanswers ({answers['generator']}): " + ", ".join(f"{k} {v:.3f}" for k, v in answers["overall"].items()))
    table = answers["abstention"]
    print(f"abstention: answered {table['answered_answerable']} / abstained {table['abstained_answerable']} of answerable; "
          f"answered {table['answered_unanswerable']} / abstained {table['abstained_unanswerable']} of unanswerable")


def _demo_gate(config: PipelineConfig, eval_id: str, instance) -> str:
    """The first evaluation of a golden revision becomes its baseline; later ones are only gated
    (promotion stays an explicit act: `rag-pipeline promote`)."""
    from rag_pipeline.core.evaluation.baselines import compare_with_baseline
    from rag_pipeline.core.evaluation.gates import render_gate

    store = _store(config)
    comparison = compare_with_baseline(store, eval_id, _policy(config, None))
    if comparison.gate is None:
        store.records.promote(comparison.revision, eval_id, "first baseline of this golden revision (demo)")
        _record_promotion(store, eval_id, instance)
        return f"PROMOTE: {eval_id} is the first baseline of golden revision {comparison.revision}"
    return render_gate(comparison.gate, terminal=True)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """How far the answer grader agrees with people; exit 1 when it may not gate."""
    from rag_pipeline.core.evaluation.calibration import (
        calibrate,
        load_verdicts,
        render_calibration,
    )

    config = load_config(args.config)
    policy = _policy(config, args.policy)
    verdicts = Path(args.verdicts) if args.verdicts else policy.grader_verdicts
    if verdicts is None:
        raise ConfigError("no human verdicts: pass --verdicts or set grader_verdicts in the gate policy")
    report = calibrate(load_verdicts(verdicts))
    print(render_calibration(report, policy.grader_false_pass_budgets))
    return 0 if report.usable(policy.grader_false_pass_budgets)[0] else 1


def _monitoring_day(config: PipelineConfig, day: str | None) -> str:
    """The requested day, or the last day of the query log."""
    from rag_pipeline.core.monitoring.sampling import read_query_log

    if day:
        return date.fromisoformat(day).isoformat()
    if config.monitoring.query_log is None:
        raise ConfigError("no monitoring.query_log in the config: nothing to monitor")
    log = read_query_log(config.monitoring.query_log)
    if not log.queries:
        raise ConfigError(f"the query log {config.monitoring.query_log} holds no valid query")
    return log.queries[-1].timestamp.date().isoformat()


def _print_monitoring(run: MonitorRun) -> None:
    """What the on-call person reads first: the sample's measures, the drift verdict, the candidates."""
    if run.error:
        print(f"monitoring FAILED: {printable(run.error)}")
        return
    m = run.metadata
    print(f"sampled {m['sampled_queries']:.0f} of {m['window_queries']:.0f} queries | "
          f"no-result rate {m.get('no_result_rate', float('nan')):.2f} | p95 latency {m.get('p95_latency_ms', float('nan')):.0f} ms | "
          f"superseded hits {m.get('superseded_hit_share', 0.0):.2f} | stale hits {m.get('stale_hit_share', 0.0):.2f}")
    print(f"drift: MMD² {m['mmd2_distance']:.4f} against the golden-calibrated threshold {m['drift_threshold']:.4f}: "
          + ("DRIFT (WARN)" if run.drifted else "within threshold"))
    print("\ncandidates for new golden cases:")
    for record in m["candidates"].records:
        row = record.data
        print(f"  {row['excess_density']:.3f}  {row['query']}  (nearest golden: {row['nearest_golden']})")
    print(f"\nreport: {m['report_file']}")


def cmd_monitor(args: argparse.Namespace) -> int:
    from rag_pipeline.runner import monitor

    config, _ = _load(args)
    day = _monitoring_day(config, args.day)
    with _instance() as instance:
        run = monitor(config, instance, day)
    if args.json:
        print_json({"day": day, "success": run.success, "checks": run.checks, "error": run.error,
                    "metadata": {k: v for k, v in run.metadata.items() if isinstance(v, (int, float, str))}})
    else:
        print(f"== production monitoring, day {day}")
        _print_monitoring(run)
    if not run.success:
        return 1
    return 1 if args.fail_on_drift and run.drifted else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole pipeline on the bundled sample data, recorded in $DAGSTER_HOME for `make ui`."""
    from rag_pipeline.runner import evaluate_golden, ingest, monitor

    config, overrides = _load(args)
    with _instance() as instance:
        print(f"== ingesting {len(config.sources)} sources into {config.storage.path}")
        runs = ingest(config, instance, overrides=overrides)
        print_ingest_summary(runs)
        if _interrupted(runs):
            return INTERRUPTED_EXIT
        evaluation = None
        if config.golden_set is not None:
            print(f"\n== golden evaluation of {config.golden_set}")
            evaluation = evaluate_golden(config, instance, overrides=overrides)
            if not evaluation.measured:
                print(f"evaluation FAILED: {printable_lines(evaluation.error)}")
            else:
                from rag_pipeline.core.evaluation.report import slice_text

                print(printable_lines(evaluation.golden_summary))
                print(slice_text(evaluation.summary))
                _print_answers(evaluation.summary.get("answers") or {})
                print(f"report: {evaluation.report}")
                print("\n== gate against the promoted baseline")
                print(_demo_gate(config, evaluation.summary["eval_id"], instance))
        monitoring = None
        # Monitoring whatever the gate said: a regression must not hide the day's drift.
        if config.monitoring.query_log is not None and config.golden_set is not None:
            day = _monitoring_day(config, None)
            print(f"\n== production monitoring of {config.monitoring.query_log}, day {day} (the log's last)")
            monitoring = monitor(config, instance, day)
            _print_monitoring(monitoring)
    ok = (all(run.success for run in runs) and (evaluation is None or evaluation.success)
          and (monitoring is None or monitoring.success))
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
    ingest.add_argument("--force", action="store_true",
                        help="run every source, also those whose inputs did not change since their last switch")
    ingest.add_argument("--fail-on-document-errors", action="store_true",
                        help="exit 1 when any document failed (by default a failed document is a warning)")
    ingest.set_defaults(func=cmd_ingest)

    evaluate = sub.add_parser(
        "eval", help="ingest, evaluate retrieval on a golden set, then gate against the promoted baseline",
        description="Measures first (metrics table, report, traces, the files asked for), then gates. Exit codes: "
                    "0 no regression (also: no baseline yet, not better, an inconclusive drop, --no-gate); "
                    "1 a regression, or a failed run; 2 a usage or config error (flags, config, golden file, run file).")
    common(evaluate)
    evaluate.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    evaluate.add_argument("--mode", choices=("dense", "bm25", "hybrid"), help="retrieval mode (default: config)")
    evaluate.add_argument("--trec-run", metavar="OUT", help="also write the ranked documents as a TREC run file "
                                                            "(retrieval scores; its qrels beside it, OUT with .qrels)")
    evaluate.add_argument("--junit-xml", metavar="FILE", help="also write a JUnit XML report: a test case per golden "
                                                              "case and per gate rule")
    evaluate.add_argument("--run", metavar="FILE", help="score another system's retrieval instead of this index: a TREC "
                                                        "run or JSONL of ranked document ids per case (no ingestion)")
    evaluate.add_argument("--no-gate", action="store_true", help="measure only: no gate, exit 0 unless a run failed")
    evaluate.add_argument("--subset", choices=("full", "pr"), default="full",
                          help="pr: the fast slice-stratified subset for pull requests (evaluation.pr_subset_size, no "
                               "holdout), gated only against a baseline of the same subset")
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

    gate = sub.add_parser("gate", help="gate a candidate evaluation against a baseline; exit 1 on a regression")
    gate.add_argument("--config")
    gate.add_argument("--baseline", default="baseline", help="eval id, or 'baseline' (the promoted one)")
    gate.add_argument("--candidate", default="latest", help="eval id, or 'latest'")
    gate.add_argument("--policy", help="gate policy YAML (default: gate_policy in the config)")
    gate.set_defaults(func=cmd_gate)

    promote = sub.add_parser("promote", help="promote an evaluation to baseline if the gate says PROMOTE")
    promote.add_argument("--config")
    promote.add_argument("--eval", help="eval id (default: the latest evaluation)")
    promote.add_argument("--policy")
    promote.set_defaults(func=cmd_promote)

    experiment = sub.add_parser("experiment", help="baseline vs a candidate differing in one component")
    experiment.add_argument("--config")
    experiment.add_argument("--candidate", help="overlay YAML merged onto the config for the candidate")
    experiment.add_argument("--set", action="append", metavar="KEY=VALUE", help="candidate change, e.g. chunking.strategy=fixed")
    experiment.add_argument("--baseline", help="overlay YAML for the baseline (default: the config as is)")
    experiment.add_argument("--baseline-set", action="append", metavar="KEY=VALUE")
    experiment.add_argument("--hypothesis", required=True, help="what the change should do, in one sentence")
    experiment.add_argument("--allow-bundle", action="store_true", help="allow (and log) a change of several components")
    experiment.add_argument("--store", help="experiment DuckDB file (default: experiments.duckdb beside the index)")
    experiment.add_argument("--policy")
    experiment.set_defaults(func=cmd_experiment)

    experiments = sub.add_parser("experiments", help="print the experiment log")
    experiments.add_argument("--config")
    experiments.add_argument("--store")
    experiments.set_defaults(func=cmd_experiments)

    calibration = sub.add_parser("calibrate", help="the answer grader against human verdicts")
    calibration.add_argument("--config")
    calibration.add_argument("--policy")
    calibration.add_argument("--verdicts", help="human verdicts JSONL (default: grader_verdicts in the gate policy)")
    calibration.set_defaults(func=cmd_calibrate)

    monitoring = sub.add_parser("monitor", help="sample a day of production queries and report drift against the golden set")
    common(monitoring)
    monitoring.add_argument("--day", help="YYYY-MM-DD (default: the last day of the query log)")
    monitoring.add_argument("--fail-on-drift", action="store_true", help="exit 1 when the drift check warns")
    monitoring.set_defaults(func=cmd_monitor)

    golden = sub.add_parser("golden", help="change the golden set by explicit, recorded commands")
    golden_sub = golden.add_subparsers(dest="golden_command", required=True)
    release = golden_sub.add_parser("release-holdout", help="move holdout cases to another split (a new, recorded revision)")
    release.add_argument("case_ids", nargs="+")
    release.add_argument("--config")
    release.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    release.add_argument("--to", default="validation", choices=("dev", "validation"))
    release.add_argument("--by", required=True, help="who releases them (recorded)")
    release.add_argument("--reason", required=True, help="why (recorded)")
    release.set_defaults(func=cmd_release_holdout, source=None)

    golden_import = golden_sub.add_parser("import", help="a golden set from a RAGAS, DeepEval or hand-written dataset")
    golden_import.add_argument("file", help="the dataset: JSON, JSONL or CSV")
    golden_import.add_argument("--shape", choices=("ragas", "deepeval", "handwritten", "auto"), default="auto")
    golden_import.add_argument("--out", required=True, help="golden-set JSONL to write")
    golden_import.add_argument("--source-prefix", metavar="X", help="source id for bare passage ids (X:<id>) and file names")
    golden_import.add_argument("--force", action="store_true", help="overwrite --out when it exists")
    golden_import.add_argument("--config")
    golden_import.set_defaults(func=cmd_golden_import, source=None)
    export_ragas = golden_sub.add_parser("export-ragas", help="a stored evaluation as a RAGAS dataset (holdout left out)")
    export_ragas.add_argument("--eval", default="latest", metavar="EVAL_ID", help="eval id, or 'latest'")
    export_ragas.add_argument("--out", required=True, help="JSONL to write (CSV when it ends in .csv)")
    export_ragas.add_argument("--config")
    export_ragas.set_defaults(func=cmd_golden_export_ragas, source=None)
    triage = golden_sub.add_parser("triage", help="write a review queue: drift candidates, failed cases, grader "
                                                  "disagreements and user reports, each with its nearest golden cases")
    triage.add_argument("--config")
    triage.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    triage.add_argument("--reports", help="JSONL of user-reported failures (question, tenant, roles, note, reported_by)")
    triage.add_argument("--verdicts", help="people's verdicts on answers (as for `calibrate`): where the grader "
                                           "disagrees with them, an item")
    triage.add_argument("--out", required=True, help="review queue JSONL to write")
    triage.set_defaults(func=cmd_golden_triage, source=None)
    accept = golden_sub.add_parser("accept", help="append reviewed queue items to the golden set (a new revision)")
    accept.add_argument("reviewed", nargs="+", help="reviewed queue file(s); one per reviewer when two review")
    accept.add_argument("--config")
    accept.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    accept.add_argument("--duplicate-threshold", type=float, default=0.9, help="cosine at or above which an item is a near duplicate")
    accept.set_defaults(func=cmd_golden_accept, source=None)

    demo = sub.add_parser("demo", help="run the whole pipeline on the configured (sample) data")
    common(demo)
    demo.set_defaults(func=cmd_demo)
    return parser


class _ProgressLines(logging.Handler):
    """Progress of long stages on stderr: one line rewritten in place on a terminal, else a line each."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        # The stream of the moment, not the one at set-up: a caller that runs `main` in process
        # (a test) may replace and close sys.stderr between two commands.
        stream = sys.stderr
        line = printable(record.getMessage())
        if stream.isatty():
            done = "(100%)" in line
            stream.write("\r\033[K" + line + ("\n" if done else ""))
        else:
            stream.write(line + "\n")
        stream.flush()


def _show_progress() -> None:
    from rag_pipeline.core.progress import LOGGER

    if not any(isinstance(h, _ProgressLines) for h in LOGGER.handlers):
        LOGGER.addHandler(_ProgressLines())
        LOGGER.setLevel(logging.INFO)
        LOGGER.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # At exit, before the interpreter's teardown: the teardown then skips cyclic garbage collection
    # over the millions of objects torch, transformers and Dagster leave (1.5 s of a command's
    # exit once the model was loaded). Objects are still released by reference counting, so files
    # and databases close as before. Registered once, however often main runs in one process.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    if not getattr(args, "json", False):
        _show_progress()
    # Dagster's notices about its own beta and preview APIs are for this project's developers, not its users.
    warnings.filterwarnings("ignore", message=r".*(currently in beta|is currently in preview).*")
    try:
        return args.func(args)
    except (ConfigError, GoldenSetError, FileNotFoundError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`rag-pipeline search ... | head`): stop quietly, as a shell tool
        # does; what is left unflushed goes nowhere rather than into a second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
