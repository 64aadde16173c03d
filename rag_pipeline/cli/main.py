"""`rag-pipeline`: the pipeline from the command line, for CI jobs and scripts outside the Dagster UI."""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from datetime import date

from rag_pipeline.cli.common import BROKEN_PIPE_EXIT
from rag_pipeline.core.errors import EXIT_INPUT, DomainError
from rag_pipeline.core.render import printable


def _command(path: str):
    """The function `module.function` of rag_pipeline.cli, imported when its command runs: a command
    pays for its own imports only (`ingest` with nothing to do imports neither Dagster nor numpy)."""
    module, function = path.rsplit(".", 1)

    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"rag_pipeline.cli.{module}"), function)(args)

    run.__name__ = function
    return run


def _positive_int(text: str) -> int:
    """A count of at least 1 (argparse names the flag and exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number: give 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} asks for no hits: give 1 or more")
    return value


def _day(text: str) -> date:
    """A calendar day, YYYY-MM-DD (argparse names the flag and exits 2 otherwise)."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day: give YYYY-MM-DD") from None


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
                        help="run every source, also those whose inputs did not change since their last switch, "
                             "and prove each whole (every served document probed again)")
    ingest.add_argument("--fail-on-document-errors", action="store_true",
                        help="exit 1 when any document failed (by default a failed document is a warning)")
    ingest.set_defaults(func=_command("ingest.cmd_ingest"))

    evaluate = sub.add_parser(
        "eval", help="ingest, evaluate retrieval on a golden set, then gate against the promoted baseline",
        description="Measures first (metrics table, report, traces, the files asked for), then gates. Exit codes: "
                    "0 no regression (also: no baseline yet, not better, an inconclusive drop, --no-gate, another "
                    "system's run without --gate); "
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
    gating = evaluate.add_mutually_exclusive_group()
    gating.add_argument("--no-gate", action="store_true", help="measure only: no gate, exit 0 unless a run failed")
    gating.add_argument("--gate", action="store_true", help="with --run: gate the other system's run against this "
                                                            "index's promoted baseline (without it, the run is measured "
                                                            "and compared, never gated); this index is always gated")
    evaluate.add_argument("--at", metavar="STATE|DATE", help="measure a past index state again instead (a state id of "
                                                             "`index list`, or a date or date-time: every source as it was "
                                                             "then); nothing served changes, nothing is stored or gated")
    evaluate.add_argument("--subset", choices=("full", "pr"), default="full",
                          help="pr: the fast slice-stratified subset for pull requests (evaluation.pr_subset_size, no "
                               "holdout), gated only against a baseline of the same subset")
    evaluate.set_defaults(func=_command("evaluate.cmd_eval"))

    search = sub.add_parser("search", help="show what retrieval returns for one question, with its trace")
    search.add_argument("query")
    search.add_argument("--config")
    search.add_argument("--tenant", help="the caller's tenant (trusted context)")
    search.add_argument("--roles", help="comma-separated roles of the caller, e.g. employee,support")
    search.add_argument("--status", help="statuses to include (default: published), e.g. published,superseded")
    search.add_argument("--mode", choices=("dense", "bm25", "hybrid"))
    search.add_argument("--k", type=_positive_int, default=None, help="hits to return (at least 1; default: config)")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=_command("search.cmd_search"), source=None)

    beir = sub.add_parser("import-beir", help="write a golden set from a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/)")
    beir.add_argument("dataset", help="folder holding corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    beir.add_argument("--name", required=True, help="source name to use for the corpus (document ids: NAME:<_id>)")
    beir.add_argument("--out", required=True, help="golden-set JSONL to write")
    beir.add_argument("--qrels", default="test", help="qrels split file name without .tsv (default: test)")
    beir.set_defaults(func=_command("golden.cmd_import_beir"))

    gate = sub.add_parser("gate", help="gate a candidate evaluation against a baseline; exit 1 on a regression")
    gate.add_argument("--config")
    gate.add_argument("--baseline", default="baseline", help="eval id, or 'baseline' (the promoted one)")
    gate.add_argument("--candidate", default="latest", help="eval id, or 'latest'")
    gate.add_argument("--policy", help="gate policy YAML (default: gate_policy in the config)")
    gate.set_defaults(func=_command("evaluate.cmd_gate"))
    gate_sub = gate.add_subparsers(dest="gate_command", metavar="{waive,waivers}")
    waive = gate_sub.add_parser(
        "waive", help="waive one gate rule until a day: its regression is shown as WAIVED and does not fail the gate",
        description="Records who waives which rule, why and until when (inclusive, UTC) in the store. The rule "
                    "is named as the gate reports it (a headline metric, 'protected slice NAME METRIC', ...). "
                    "Exit 2 for an unknown rule (the known ones listed), a day already past, an empty --by or --reason.")
    waive.add_argument("--rule", required=True, help="the rule as the gate names it, e.g. recall_at_5")
    waive.add_argument("--by", required=True, help="who owns the exception (recorded, shown in every report)")
    waive.add_argument("--reason", required=True, help="why the rule may fail until then (recorded, shown)")
    waive.add_argument("--until", required=True, type=_day, metavar="YYYY-MM-DD",
                       help="the last day the waiver holds (inclusive, UTC); after it the rule gates again")
    waive.add_argument("--config", default=argparse.SUPPRESS)
    waive.add_argument("--policy", default=argparse.SUPPRESS, help="gate policy YAML (its rules are the known ones)")
    waive.set_defaults(func=_command("waivers.cmd_waive"))
    waivers = gate_sub.add_parser("waivers", help="list the gate's waivers, active and expired")
    waivers.add_argument("--config", default=argparse.SUPPRESS)
    waivers.add_argument("--json", action="store_true")
    waivers.set_defaults(func=_command("waivers.cmd_waivers"))

    promote = sub.add_parser("promote", help="promote an evaluation to baseline if the gate says PROMOTE")
    promote.add_argument("--config")
    promote.add_argument("--eval", help="eval id (default: the latest evaluation)")
    promote.add_argument("--policy")
    promote.set_defaults(func=_command("evaluate.cmd_promote"))

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
    experiment.set_defaults(func=_command("experiments.cmd_experiment"))

    experiments = sub.add_parser("experiments", help="print the experiment log")
    experiments.add_argument("--config")
    experiments.add_argument("--store")
    experiments.set_defaults(func=_command("experiments.cmd_experiments"))

    calibration = sub.add_parser("calibrate", help="the answer grader against human verdicts")
    calibration.add_argument("--config")
    calibration.add_argument("--policy")
    calibration.add_argument("--verdicts", help="human verdicts JSONL (default: grader_verdicts in the gate policy)")
    calibration.set_defaults(func=_command("evaluate.cmd_calibrate"))

    monitoring = sub.add_parser("monitor", help="sample a day of production queries and report drift against the golden set")
    common(monitoring)
    monitoring.add_argument("--day", help="YYYY-MM-DD (default: the last day of the query log)")
    monitoring.add_argument("--fail-on-drift", action="store_true", help="exit 1 when the drift check warns")
    monitoring.set_defaults(func=_command("monitor.cmd_monitor"))

    golden = sub.add_parser("golden", help="change the golden set by explicit, recorded commands")
    golden_sub = golden.add_subparsers(dest="golden_command", required=True)
    release = golden_sub.add_parser("release-holdout", help="move holdout cases to another split (a new, recorded revision)")
    release.add_argument("case_ids", nargs="+")
    release.add_argument("--config")
    release.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    release.add_argument("--to", default="validation", choices=("dev", "validation"))
    release.add_argument("--by", required=True, help="who releases them (recorded)")
    release.add_argument("--reason", required=True, help="why (recorded)")
    release.set_defaults(func=_command("golden.cmd_release_holdout"), source=None)

    golden_import = golden_sub.add_parser("import", help="a golden set from a RAGAS, DeepEval or hand-written dataset")
    golden_import.add_argument("file", help="the dataset: JSON, JSONL or CSV")
    golden_import.add_argument("--shape", choices=("ragas", "deepeval", "handwritten", "auto"), default="auto")
    golden_import.add_argument("--out", required=True, help="golden-set JSONL to write")
    golden_import.add_argument("--source-prefix", metavar="X", help="source id for bare passage ids (X:<id>) and file names")
    golden_import.add_argument("--force", action="store_true", help="overwrite --out when it exists")
    golden_import.add_argument("--config")
    golden_import.set_defaults(func=_command("golden.cmd_golden_import"), source=None)
    export_ragas = golden_sub.add_parser("export-ragas", help="a stored evaluation as a RAGAS dataset (holdout left out)")
    export_ragas.add_argument("--eval", default="latest", metavar="EVAL_ID", help="eval id, or 'latest'")
    export_ragas.add_argument("--out", required=True, help="JSONL to write (CSV when it ends in .csv)")
    export_ragas.add_argument("--config")
    export_ragas.set_defaults(func=_command("golden.cmd_golden_export_ragas"), source=None)
    triage = golden_sub.add_parser("triage", help="write a review queue: drift candidates, failed cases, grader "
                                                  "disagreements and user reports, each with its nearest golden cases")
    triage.add_argument("--config")
    triage.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    triage.add_argument("--reports", help="JSONL of user-reported failures (question, tenant, roles, note, reported_by)")
    triage.add_argument("--verdicts", help="people's verdicts on answers (as for `calibrate`): where the grader "
                                           "disagrees with them, an item")
    triage.add_argument("--out", required=True, help="review queue JSONL to write")
    triage.set_defaults(func=_command("golden.cmd_golden_triage"), source=None)
    accept = golden_sub.add_parser("accept", help="append reviewed queue items to the golden set (a new revision)")
    accept.add_argument("reviewed", nargs="+", help="reviewed queue file(s); one per reviewer when two review")
    accept.add_argument("--config")
    accept.add_argument("--golden", help="golden-set JSONL (default: golden_set in the config)")
    accept.add_argument("--duplicate-threshold", type=float, default=0.9, help="cosine at or above which an item is a near duplicate")
    accept.set_defaults(func=_command("golden.cmd_golden_accept"), source=None)

    index = sub.add_parser("index", help="the served states of a source; restore, pin or disable one (undo a bad night)")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    listing = index_sub.add_parser("list", help="every kept state of a source: when, what it served, its evaluations")
    restore = index_sub.add_parser("restore", help="serve a kept state again (or the baseline's) and pin the source there")
    restore.add_argument("--to", required=True, metavar="STATE|baseline",
                         help="a state id (`index list`), or `baseline`: the state the promoted baseline was measured on")
    disable = index_sub.add_parser("disable", help="serve nothing of a source until `index enable` (a leak, a poisoned source)")
    unpin = index_sub.add_parser("unpin", help="let a pinned source follow its files again")
    enable = index_sub.add_parser("enable", help="let a disabled source follow its files again")
    forget = index_sub.add_parser("forget", help="remove a document from every kept state's history at once (a leak, "
                                                 "a legal removal); the states that served it can no longer be restored")
    forget.add_argument("--config")
    forget.add_argument("--doc", required=True, metavar="DOC_ID", help="the document id, source:path")
    forget.set_defaults(func=_command("index.cmd_index"), source=None)
    for command in (listing, restore, disable, unpin, enable):
        command.add_argument("--config")
        command.add_argument("--source", dest="index_source", required=True, metavar="SOURCE", help="the source's name")
        command.set_defaults(func=_command("index.cmd_index"), source=None)
    listing.add_argument("--json", action="store_true")
    for command in (restore, disable):
        command.add_argument("--by", help="who does this (recorded and shown; default: the login name)")
        command.add_argument("--reason", required=True, help="why (recorded and shown to everyone until it is undone)")

    demo = sub.add_parser("demo", help="run the whole pipeline on the configured (sample) data")
    common(demo)
    demo.set_defaults(func=_command("demo.cmd_demo"))
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
    except DomainError as exc:
        # A fault of the input or the deployment (core/errors.py): its message is the whole story.
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        # A file named on the command line or in the config that cannot be opened as one.
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        # The reader went away (`rag-pipeline search ... | head`): stop quietly, as a shell tool
        # does; what is left unflushed goes nowhere rather than into a second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
