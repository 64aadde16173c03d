"""`golden ...` and `import-beir`: the golden set changed by explicit, recorded commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rag_pipeline.cli.common import configured_store, evaluation_id, load_args
from rag_pipeline.config import ConfigError, load_config
from rag_pipeline.core.render import printable, printable_lines


def cmd_release_holdout(args: argparse.Namespace) -> int:
    """Move cases out of holdout: a new golden revision, recorded with who and why."""
    from rag_pipeline.core.evaluation.golden.holdout import release_from_holdout

    config, _ = load_args(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    old, new = release_from_holdout(config.golden_set, args.case_ids, args.to)
    configured_store(config).records.record_golden_change("release-holdout", args.case_ids, old, new, args.by, args.reason)
    print(f"moved {len(args.case_ids)} case(s) from holdout to {args.to}: golden revision {old} -> {new} (recorded)")
    return 0


def cmd_golden_import(args: argparse.Namespace) -> int:
    """A golden set from a RAGAS, DeepEval or hand-written dataset; names every reference it could not map."""
    from rag_pipeline.core.evaluation.golden.formats import import_from_store
    from rag_pipeline.core.evaluation.golden.validation import load_golden_set

    out = Path(args.out)
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists: a golden revision is frozen; write a new file (or pass --force)")
    config = load_config(args.config)
    store = configured_store(config, read_only=True)
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

    from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision
    from rag_pipeline.core.evaluation.golden.validation import load_golden_set
    from rag_pipeline.core.evaluation.scoring.ragas_export import export_ragas

    config = load_config(args.config)
    store = configured_store(config, read_only=True)
    eval_id = evaluation_id(store, args.eval)
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
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.evaluation.golden.validation import load_golden_set
    from rag_pipeline.core.evaluation.triage import build_queue, write_queue
    from rag_pipeline.core.retrieval.retriever import Retriever

    config, _ = load_args(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    store, embedder = configured_store(config, read_only=True), make_embedder(config.embedding)
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
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.evaluation.triage import accept_reviewed

    config, _ = load_args(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    result = accept_reviewed([Path(p) for p in args.reviewed], config.golden_set, configured_store(config),
                             make_embedder(config.embedding), config.source_ids, args.duplicate_threshold)
    print(printable_lines(result.summary()))
    return 0 if not (result.disagreements or result.incomplete or result.duplicates) else 1


def cmd_import_beir(args: argparse.Namespace) -> int:
    """Turn a BEIR dataset into a golden-set file (its corpus.jsonl is used as a source in place)."""
    from rag_pipeline.core.evaluation.golden.beir import import_beir

    out = Path(args.out)
    count = import_beir(Path(args.dataset), args.name, out, split=args.qrels)
    corpus = (Path(args.dataset) / "corpus.jsonl").resolve()
    print(f"wrote {count} cases to {out}")
    print(f"evaluate with: rag-pipeline eval --source {args.name}={corpus} --golden {out}")
    return 0
