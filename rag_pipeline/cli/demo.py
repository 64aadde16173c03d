"""`rag-pipeline demo`: the whole pipeline on the configured (sample) data, recorded for the UI."""

from __future__ import annotations

import argparse

from rag_pipeline.cli.common import INTERRUPTED_EXIT, configured_store, dagster_instance, gate_policy, load_args
from rag_pipeline.cli.evaluate import record_promotion_in_dagster
from rag_pipeline.cli.ingest import any_interrupted, print_ingest_summary
from rag_pipeline.cli.monitor import monitoring_day, print_monitoring
from rag_pipeline.config import PipelineConfig
from rag_pipeline.core.render import printable_lines


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
    from rag_pipeline.core.evaluation.gating.baselines import compare_with_baseline
    from rag_pipeline.core.evaluation.gating.gates import render_gate

    store = configured_store(config)
    comparison = compare_with_baseline(store, eval_id, gate_policy(config, None))
    if comparison.gate is None:
        store.records.promote(comparison.revision, eval_id, "first baseline of this golden revision (demo)")
        record_promotion_in_dagster(store, eval_id, instance)
        return f"PROMOTE: {eval_id} is the first baseline of golden revision {comparison.revision}"
    return render_gate(comparison.gate, terminal=True)


def cmd_demo(args: argparse.Namespace) -> int:
    """The whole pipeline on the bundled sample data, recorded in $DAGSTER_HOME for `make ui`."""
    from rag_pipeline.cli.runner import evaluate_golden, ingest, monitor

    config, overrides = load_args(args)
    with dagster_instance() as instance:
        print(f"== ingesting {len(config.sources)} sources into {config.storage.path}")
        runs = ingest(config, instance, overrides=overrides)
        print_ingest_summary(runs)
        if any_interrupted(runs):
            return INTERRUPTED_EXIT
        evaluation = None
        if config.golden_set is not None:
            print(f"\n== golden evaluation of {config.golden_set}")
            evaluation = evaluate_golden(config, instance, overrides=overrides)
            if not evaluation.measured:
                print(f"evaluation FAILED: {printable_lines(evaluation.error)}")
            else:
                from rag_pipeline.core.evaluation.gating.report import slice_text

                print(printable_lines(evaluation.golden_summary))
                print(slice_text(evaluation.summary))
                _print_answers(evaluation.summary.get("answers") or {})
                print(f"report: {evaluation.report}")
                print("\n== gate against the promoted baseline")
                print(_demo_gate(config, evaluation.summary["eval_id"], instance))
        monitoring = None
        # Monitoring whatever the gate said: a regression must not hide the day's drift.
        if config.monitoring.query_log is not None and config.golden_set is not None:
            day = monitoring_day(config, None)
            print(f"\n== production monitoring of {config.monitoring.query_log}, day {day} (the log's last)")
            monitoring = monitor(config, instance, day)
            print_monitoring(monitoring)
    ok = (all(run.success for run in runs) and (evaluation is None or evaluation.success)
          and (monitoring is None or monitoring.success))
    print("\ndemo " + ("succeeded" if ok else "FAILED") + "; `make ui` shows the runs, checks and metadata")
    return 0 if ok else 1
