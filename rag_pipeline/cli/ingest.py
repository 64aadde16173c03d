"""`rag-pipeline ingest`: each source run, or found unchanged before Dagster is imported."""

from __future__ import annotations

import argparse
import os

from rag_pipeline.cli.common import (
    INTERRUPTED_EXIT,
    configured_store,
    dagster_instance,
    load_args_with_sources,
    print_json,
)
from rag_pipeline.config import PipelineConfig
from rag_pipeline.core.ingestion.source_runs import SUMMARY_COLUMNS, unchanged_run
from rag_pipeline.core.render import printable


def _walks(config: PipelineConfig) -> dict:
    """Each source's walk (names, sizes, times), made once for the two decisions below; a source
    whose root cannot be walked has none (its run says why)."""
    from rag_pipeline.core.errors import DomainError
    from rag_pipeline.core.ingestion.inputs import walk_source

    walks = {}
    for source in config.sources:
        try:
            walks[source.source_id] = walk_source(source, config.storage.path.parent)
        except (OSError, RuntimeError, DomainError):
            continue
    return walks


def _all_unchanged(config: PipelineConfig, store, force: bool, walks: dict, embedder):
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
    from rag_pipeline.core.ingestion.inputs import settings_fingerprint

    persistent_instance = bool(os.environ.get("DAGSTER_HOME"))

    def left_open(source_id: str) -> bool:
        return persistent_instance and store.db.run_left_open(source_id) is not False

    settings = settings_fingerprint(config.chunking, embedder.identity)
    runs = []
    for source in config.sources:
        if source.source_id not in walks:
            return None
        run = unchanged_run(source, store, settings, walks[source.source_id], open_elsewhere=left_open)
        if run is None:
            return None
        runs.append(run)
    return runs


def _start_early(config: PipelineConfig, store, walks: dict, embedder) -> None:
    """A run is coming. For the files that changed (their size or time differ from the committed
    manifest), start the parser process for their types now, under the first such source's memory
    limit, so that its imports run on the other core while this process loads the model and
    imports Dagster (the parser's start is the longer of the two)."""
    from rag_pipeline.core.embedding.model import ModelEmbedder
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
    if types and isinstance(embedder, ModelEmbedder):
        # As one text needs it (a page edit's chunk); once per process, so the run's embedder finds
        # it loaded. A full build encodes in batches on another session and leaves this one idle.
        embedder.load()


def cmd_ingest(args: argparse.Namespace) -> int:
    from rag_pipeline.core.embedding.embedder import make_embedder

    config, overrides = load_args_with_sources(args)
    walks = _walks(config)
    store = configured_store(config)
    embedder = make_embedder(config.embedding)
    with store.db.session():
        runs = _all_unchanged(config, store, args.force, walks, embedder)
        if runs is None:
            _start_early(config, store, walks, embedder)
    if runs is None:
        from rag_pipeline.cli.runner import ingest

        with dagster_instance() as instance:
            runs = ingest(config, instance, overrides=overrides, force=args.force, walks=walks)
    if args.json:
        print_json({"sources": {run.source_id: run.as_json() for run in runs}})
    else:
        print_ingest_summary(runs)
    if any_interrupted(runs):
        return INTERRUPTED_EXIT
    if not all(run.success for run in runs):
        return 1
    return 1 if args.fail_on_document_errors and any(run.failures for run in runs) else 0


def any_interrupted(runs) -> bool:
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
