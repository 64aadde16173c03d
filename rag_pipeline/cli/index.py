"""`rag-pipeline index`: the served states of a source, and undoing a bad one (restore, pin, disable)."""

from __future__ import annotations

import argparse
import getpass

from rag_pipeline.cli.common import configured_store, dagster_instance, load_args, print_json
from rag_pipeline.config import PipelineConfig
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.render import printable


def _source(config: PipelineConfig, name: str) -> str:
    """The source id of `--source` (its name or id); InputError naming the configured ones."""
    for source in config.sources:
        if name in (source.name, source.source_id):
            return source.source_id
    known = ", ".join(s.name for s in config.sources) or "none"
    raise InputError(f"--source {name!r} is not a configured source (configured: {known})")


def cmd_index_list(args: argparse.Namespace) -> int:
    """Every kept state of the source, newest last: when, what it served, and the evaluations measured on it."""
    config, _ = load_args(args)
    source_id = _source(config, args.index_source)
    store = configured_store(config, read_only=True)
    states = store.states.list(source_id)
    served = store.states.latest(source_id)
    pin = store.states.pinned(source_id)
    measured = store.records.evaluations_measured(source_id)
    rows = []
    for position, state in enumerate(states):
        until = states[position + 1].created_at if position + 1 < len(states) else None
        evaluations = [m["eval_id"] for m in measured if m["manifest_hash"] == state.manifest_hash
                       and m["created_at"] >= state.created_at and (until is None or m["created_at"] < until)]
        rows.append({**state.as_json(), "served": served is not None and state.seq == served.seq,
                     "pinned": pin is not None and pin.state_id == state.state_id, "evaluations": evaluations})
    if args.json:
        print_json({"source": source_id, "pin": pin.sentence() if pin else None, "states": rows})
        return 0
    print(f"index states of {source_id} ({len(rows)} kept)")
    for row in rows:
        marks = "".join((" SERVED" if row["served"] else "", " PINNED" if row["pinned"] else ""))
        print(f"  {row['state_id']:<28} {row['created_at']}  {row['origin']:<8} {row['documents']:>6} docs "
              f"{row['chunks']:>7} chunks  evaluations: {len(row['evaluations'])}{marks}")
        if row["note"]:
            print(f"      {printable(row['note'])}")
    if pin:
        print(printable(pin.sentence()))
    return 0


def _by(args: argparse.Namespace) -> str:
    return args.by or getpass.getuser()


def cmd_index_restore(args: argparse.Namespace) -> int:
    """Serve a kept state of the source again (or `baseline`: the one the promoted baseline measured) and pin it."""
    from rag_pipeline.core.evaluation.gating.baselines import baseline_index_state
    from rag_pipeline.core.ingestion import undo

    config, _ = load_args(args)
    source_id = _source(config, args.index_source)
    store = configured_store(config, create=False)
    state = undo.resolve(store, source_id, args.to, baseline_index_state(store, config.golden_set))
    done = undo.restore(store, source_id, state, _by(args), args.reason)
    return _said(source_id, done.summary())


def cmd_index_disable(args: argparse.Namespace) -> int:
    """Serve nothing of the source until `index enable` (a leak, a poisoned source)."""
    from rag_pipeline.core.ingestion import undo

    config, _ = load_args(args)
    source_id = _source(config, args.index_source)
    done = undo.disable(configured_store(config, create=False), source_id, _by(args), args.reason)
    return _said(source_id, done.summary())


def cmd_index_unpin(args: argparse.Namespace) -> int:
    """Let a pinned source follow its files again (`enable` for a disabled one)."""
    from rag_pipeline.core.ingestion import undo

    config, _ = load_args(args)
    source_id = _source(config, args.index_source)
    store = configured_store(config, create=False)
    pin = store.states.pinned(source_id)
    wanted = "disabled" if args.index_command == "enable" else "pinned"
    if pin is not None and pin.kind != wanted:
        other = "enable" if pin.kind == "disabled" else "unpin"
        raise InputError(f"source {source_id!r} is {pin.kind}, not {wanted}: use `rag-pipeline index {other} --source {source_id}`")
    undo.unpin(store, source_id)
    said = (f"{source_id} follows its files again (it was {pin.kind} by {pin.pinned_by}): its next ingestion serves "
            f"what they hold; run `rag-pipeline ingest` now, or wait for the night")
    return _said(source_id, said)


def cmd_index_forget(args: argparse.Namespace) -> int:
    """Remove every kept version of a document from history (what is served is the ingestion's to change)."""
    config, _ = load_args(args)
    store = configured_store(config, create=False)
    with store.transaction():
        forgotten = store.states.forget_document(args.doc)
    served = any(d["doc_id"] == args.doc for s in config.source_ids for d in store.served.indexed_documents(s))
    print(f"forgot {forgotten} kept version(s) of {printable(args.doc)}"
          + ("; it is still served: delete it from its source and ingest, or `index disable` its source" if served else ""))
    return 0


def _said(source_id: str, what: str) -> int:
    """Say what was done on the terminal and where the on-call person looks (an observation of the
    source's search_index partition); the command's exit code."""
    import dagster as dg

    what = printable(what)
    with dagster_instance() as instance:
        if source_id in set(instance.get_dynamic_partitions("sources")):
            instance.report_runless_asset_event(dg.AssetObservation(
                asset_key="search_index", partition=source_id, description=what))
    print(what)
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    commands = {"list": cmd_index_list, "restore": cmd_index_restore, "disable": cmd_index_disable,
                "unpin": cmd_index_unpin, "enable": cmd_index_unpin, "forget": cmd_index_forget}
    return commands[args.index_command](args)
