"""`eval`, `gate`, `promote` and `calibrate`: measure on the golden set, then judge against the baseline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rag_pipeline.cli.common import (
    EXIT_PASS,
    EXIT_REGRESSION,
    INTERRUPTED_EXIT,
    configured_store,
    dagster_instance,
    evaluation_id,
    gate_policy,
    load_args,
    load_args_with_sources,
    print_json,
)
from rag_pipeline.cli.ingest import any_interrupted, print_ingest_summary
from rag_pipeline.config import ConfigError, PipelineConfig, load_config
from rag_pipeline.core.render import printable, printable_lines


def cmd_eval(args: argparse.Namespace) -> int:
    """Ingest (incrementally) the configured sources, or read another system's run; measure the golden
    set (metrics, report, traces, requested files); then gate against the promoted baseline (another
    system's run: compared with it, gated only with --gate)."""
    from rag_pipeline.cli.runner import evaluate_golden, ingest

    config, overrides = load_args(args) if args.run or args.at else load_args_with_sources(args)
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    if args.at:
        return _eval_at(config, args)
    if args.run and not Path(args.run).is_file():
        raise ConfigError(f"run file {args.run} does not exist")
    gated = args.gate or not (args.no_gate or args.run)
    with dagster_instance() as instance:
        runs = [] if args.run else ingest(config, instance, overrides=overrides)
        if not all(r.success for r in runs) and not args.json:
            print_ingest_summary(runs)
        if any_interrupted(runs):
            return INTERRUPTED_EXIT
        golden = _checked_golden(config)  # a bad golden file is named here, line by line (exit 2)
        evaluation = evaluate_golden(config, instance, args.mode, overrides=overrides, suite=args.subset,
                                     run_file=str(Path(args.run).resolve()) if args.run else None, gate=gated)
    if not evaluation.measured:
        print(f"error: evaluation failed: {printable_lines(evaluation.error)}", file=sys.stderr)
        return evaluation.exit_code
    store = configured_store(config)
    eval_id = evaluation.summary["eval_id"]
    files = _write_eval_files(args, golden, store, eval_id)
    comparison = None
    if gated or args.run:  # another system's run is compared with the baseline, even when not gated
        from rag_pipeline.core.evaluation.gating.baselines import compare_with_baseline

        comparison = compare_with_baseline(store, eval_id, gate_policy(config, None))
    # Why each case moved against the baseline, as golden_eval found and kept it (falls first).
    moved = store.records.case_changes(eval_id)
    if args.junit_xml:
        from rag_pipeline.core.evaluation.attribution.render import junit_messages
        from rag_pipeline.core.evaluation.gating.junit import write_junit

        files["junit_xml"] = str(write_junit(Path(args.junit_xml), eval_id, store.records.case_rows(eval_id),
                                             evaluation.summary.get("report_k", config.evaluation.report_k),
                                             comparison if gated else None, gated=gated, moved=junit_messages(moved)))
    regression = gated and comparison is not None and comparison.gate is not None and not comparison.gate.passed
    ingestion_ok = all(r.success for r in runs)
    code = EXIT_REGRESSION if regression or not ingestion_ok or evaluation.error else EXIT_PASS
    if args.json:
        keys = ("eval_id", "revision", "suite", "mode", "config_fingerprint", "index_state", "report_k", "overall",
                "weighted", "by_slice", "by_split", "unanswerable", "latency", "answers", "no_result_threshold",
                "stale_cases", "external_run")
        from rag_pipeline.core.evaluation.gating.report import answers_note

        # `answers` is empty when none were generated or graded: `answers_note` says why, and what to set.
        print_json({**{k: evaluation.summary.get(k) for k in keys}, "answers_note": answers_note(evaluation.summary),
                    "report": evaluation.report, "files": files,
                    "gate": _gate_json(comparison, gated=gated, run=bool(args.run)),
                    "case_changes": moved, "exit_code": code})
    else:
        _print_measurement(evaluation, store, files)
        print()
        if not gated and args.run:
            print(_compared_text(comparison))
        elif not gated:
            print("gate: not gated (--no-gate): measured only")
        else:
            from rag_pipeline.core.evaluation.gating.baselines import gate_text

            print(gate_text(comparison))
            # Another system's run (`--run`) has no retrieval here to replay: nothing is attributed.
            if comparison is not None and comparison.gate is not None and evaluation.summary.get("mode") != "run":
                from rag_pipeline.core.evaluation.attribution.render import text_lines

                print("\n" + "\n".join(text_lines(moved)))
        if evaluation.error:
            print(f"\nevaluation run FAILED after measuring: {printable_lines(evaluation.error)}")
        if not ingestion_ok:
            print("\ningestion FAILED for " + ", ".join(r.source_id for r in runs if not r.success) + " (above)")
    return code


def _eval_at(config: PipelineConfig, args: argparse.Namespace) -> int:
    """A past index state measured again (nothing served changes, nothing stored), beside what was measured then."""
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.evaluation.gating.report import slice_text
    from rag_pipeline.core.evaluation.past_states import evaluate_at, states_at

    store = configured_store(config, create=False)
    states = states_at(store, config.source_ids, args.at)
    past = evaluate_at(config.golden_set, store, make_embedder(config.embedding), config.retrieval,
                       config.retrieval_fingerprint(), states, args.mode, config.answers, config.evaluation.report_k)
    if args.json:
        print_json(past.as_json())
        return EXIT_PASS
    served = ", ".join(f"{source}: {state.state_id if state else 'nothing'}" for source, state in states.items())
    print(f"measured again at {printable(args.at)} ({printable(served)}); nothing served changed, nothing stored")
    print(slice_text(past.result.as_json()))
    if past.recorded is None:
        print("no evaluation measured these states with this config when they were served")
    else:
        print(f"measured then by {past.recorded}: largest difference of an overall metric {past.largest_difference:.2e}")
    return EXIT_PASS


def _checked_golden(config: PipelineConfig):
    """The configured golden set, validated against every document the sources have held (ids
    resolved from paths); GoldenSetError lists each problem on its own line."""
    from rag_pipeline.core.evaluation.golden.validation import load_golden_set

    store = configured_store(config)
    history = store.ledger.document_history()
    return load_golden_set(config.golden_set, served_hashes=store.served.document_hashes() if history else None,
                           known_documents=history or None)


def _write_eval_files(args: argparse.Namespace, golden, store, eval_id: str) -> dict[str, str]:
    """The run files asked for: a TREC run (retrieval scores, tagged with the eval id) and its qrels beside it."""
    files: dict[str, str] = {}
    if not args.trec_run:
        return files
    from rag_pipeline.core.evaluation.scoring.run_files import write_qrels, write_trec_run

    out = Path(args.trec_run)
    files["trec_run"] = str(write_trec_run(store.records.ranked_runs(eval_id), out, tag=eval_id))
    evaluated = {row["case_id"] for row in store.records.case_rows(eval_id)}
    qrels = out.with_suffix(".qrels") if out.suffix != ".qrels" else out.with_name(out.name + ".qrels")
    files["qrels"] = str(write_qrels([c for c in golden.cases if c.id in evaluated], qrels))
    return files


def _print_measurement(evaluation, store, files: dict[str, str]) -> None:
    """What was measured, before any verdict: the golden set, the metrics table, the failed cases at
    the report's k, and where the report and files are."""
    from rag_pipeline.core.evaluation.gating.report import answers_note, slice_text
    from rag_pipeline.core.evaluation.scoring.results import gold_rank_text
    from rag_pipeline.core.evaluation.scoring.run_files import describe_run

    summary = evaluation.summary
    print(printable_lines(evaluation.golden_summary))
    external = summary.get("external_run")
    if external:
        print(f"scored another system's run, not this index: {printable(describe_run(external))} (config fingerprint "
              f"{summary['config_fingerprint'][:12]}: the run file's hash)")
    print()
    print(slice_text(summary))
    note = answers_note(summary)
    if note:
        print(f"\n{note}")
    k = summary.get("report_k", 5)
    failed = [row for row in store.records.failed_cases(summary["eval_id"], k) if row["split"] != "holdout"]
    print(f"\nfailed cases at k={k} (no gold document in the top {k}, or a forbidden one retrieved): {len(failed)}"
          + ("" if failed else " (none)"))
    for row in failed[:10]:
        rank = gold_rank_text(row["first_gold_rank"], len(row["ranked_docs"] or []), "listed" if external else "retrieved")
        print(f"  {printable(row['case_id'])} [{printable(row['slice'])}] first gold rank {rank}; top {k}: "
              + (printable(", ".join((row["ranked_docs"] or [])[:k])) or "nothing retrieved"))
    if len(failed) > 10:
        print(f"  ... and {len(failed) - 10} more in the report")
    print(f"\nreport: {evaluation.report}")
    for name, path in files.items():
        print(f"{name.replace('_', ' ')}: {path}")


def _compared_text(comparison) -> str:
    """Another system's run beside this index's baseline, as information: the metrics, no outcome."""
    head = ("gate: not gated: another system's run is measured and compared with this index's baseline, never "
            "judged by it (pass --gate to gate it)")
    if comparison is None or comparison.gate is None or not comparison.gate.deltas:
        reason = comparison.missing_reason if comparison is not None else "no baseline"
        return f"{head}\ncompared with: nothing ({printable(reason)})"
    from rag_pipeline.core.render import text_table

    gate = comparison.gate
    rows = [(d.metric, f"{d.baseline:.4f}", f"{d.candidate:.4f}", f"{d.delta:+.4f}",
             f"{d.ci_low:+.4f} to {d.ci_high:+.4f}", f"{d.p_value:.3f}", d.cases) for d in gate.deltas]
    table = text_table(rows, ["metric", "baseline", "the run", "delta", f"{1 - gate.alpha:.0%} CI", "p", "cases"])
    return f"{head}\ncompared with {printable(comparison.against)}:\n{table}"


def _gate_json(comparison, gated: bool, run: bool = False) -> dict:
    if not gated:
        if not run:
            return {"verdict": "not gated", "reason": "--no-gate"}
        deltas = [{"metric": d.metric, "baseline": d.baseline, "run": d.candidate, "delta": d.delta,
                   "ci_low": d.ci_low, "ci_high": d.ci_high, "p_value": d.p_value}
                  for d in (comparison.gate.deltas if comparison is not None and comparison.gate is not None else [])]
        return {"verdict": "not gated", "reason": "another system's run: compared, gated only with --gate",
                "baseline": comparison.baseline_id if comparison is not None else None, "compared": deltas}
    if comparison is None or comparison.gate is None:
        return {"verdict": "no baseline", "reason": comparison.missing_reason if comparison else None}
    gate = comparison.gate
    return {"verdict": gate.verdict, "baseline": comparison.baseline_id, "against": comparison.against,
            "promote": gate.promote, "decision": gate.decision,
            "rules": [{"rule": r.rule, "outcome": r.outcome, "message": r.message,
                       **({"waiver": {"by": r.waiver.waived_by, "reason": r.waiver.reason,
                                      "until": r.waiver.until.isoformat()}} if r.waiver else {})} for r in gate.rules]}


def cmd_gate(args: argparse.Namespace) -> int:
    """Compare two stored evaluations; exit 1 on a regression (an ERROR rule), else 0 (also when there
    is no baseline to compare with, or the drop is inconclusive)."""
    from rag_pipeline.core.evaluation.gating.baselines import compare_with_baseline, gate_text

    config = load_config(args.config)
    store = configured_store(config, read_only=True)
    candidate_id = evaluation_id(store, args.candidate)
    baseline_id = None if args.baseline == "baseline" else args.baseline
    comparison = compare_with_baseline(store, candidate_id, gate_policy(config, args.policy), baseline_id)
    print(gate_text(comparison))
    return EXIT_REGRESSION if comparison.gate is not None and not comparison.gate.passed else EXIT_PASS


def cmd_promote(args: argparse.Namespace) -> int:
    """Promote an evaluation to baseline of its golden revision, if the gate says PROMOTE; exit 1
    only on a regression (keeping the baseline because the candidate is not better exits 0)."""
    from rag_pipeline.core.evaluation.gating.baselines import promotion

    config = load_config(args.config)
    store = configured_store(config, create=False)
    eval_id = evaluation_id(store, args.eval)
    summary = store.records.evaluation_summary(eval_id)
    if store.records.baseline(summary["revision"], summary.get("suite", "full")) == eval_id:
        # Already promoted (a promote that died before Dagster heard of it, or run twice): finish it.
        record_promotion_in_dagster(store, eval_id)
        print(f"{eval_id} is already the promoted baseline of golden revision {summary['revision']}")
        return 0
    outcome = promotion(store, eval_id, gate_policy(config, args.policy))
    if outcome.promoted:
        record_promotion_in_dagster(store, eval_id)
    print(outcome.text)
    return EXIT_REGRESSION if outcome.regression else EXIT_PASS


def record_promotion_in_dagster(store, eval_id: str, instance=None) -> None:
    """Show the promotion in Dagster: the gate check of that evaluation passes against itself."""
    from rag_pipeline.defs.checks import record_promotion

    revision = store.records.evaluation_summary(eval_id)["revision"]
    if instance is not None:
        record_promotion(instance, revision, eval_id)
        return
    with dagster_instance() as own:
        record_promotion(own, revision, eval_id)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """How far the answer grader agrees with people; exit 1 when it may not gate."""
    from rag_pipeline.core.evaluation.answers.calibration import (
        calibrate,
        load_verdicts,
        render_calibration,
    )

    config = load_config(args.config)
    policy = gate_policy(config, args.policy)
    verdicts = Path(args.verdicts) if args.verdicts else policy.grader_verdicts
    if verdicts is None:
        raise ConfigError("no human verdicts: pass --verdicts or set grader_verdicts in the gate policy")
    report = calibrate(load_verdicts(verdicts))
    print(render_calibration(report, policy.grader_false_pass_budgets))
    return 0 if report.usable(policy.grader_false_pass_budgets)[0] else 1
