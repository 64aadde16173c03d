"""The contract between the Dagster layer and its callers: every asset records its outcome under one
metadata key, a DomainError becomes a failure with its reason and kind, anything else is a bug with
its stack, and the command line reads outcomes only."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.cli.runner import evaluate_golden, ingest
from rag_pipeline.core.errors import EXIT_FAILED, EXIT_INPUT, DomainError, InputError, UnavailableError
from rag_pipeline.core.outcomes import OUTCOME_KEY, CheckOutcome, RunResult, Status, StepOutcome
from rag_pipeline.definitions import build_definitions
from rag_pipeline.defs.run_results import run_result
from rag_pipeline_tests.conftest import write_tree

INGESTION = ["source_documents", "parsed_documents", "document_chunks", "chunk_embeddings", "search_index"]


def test_step_outcomes_round_trip_and_give_the_exit_code():
    failed = StepOutcome.of_error(InputError("golden.jsonl line 3: no question"), "golden.jsonl line 3: no question")
    assert StepOutcome.from_json(failed.to_json()) == failed
    assert (failed.status, failed.fault, failed.exit_code) == (Status.FAILED, "input", EXIT_INPUT)
    assert StepOutcome.of_error(UnavailableError("gone"), "gone").exit_code == EXIT_FAILED
    assert StepOutcome(Status.REGRESSED, "recall fell").exit_code == EXIT_FAILED
    assert StepOutcome(Status.DONE).exit_code == 0
    run = RunResult({"a": StepOutcome(Status.DONE), "b": StepOutcome(Status.REFUSED, "coverage not proven")},
                    checks={"coverage": CheckOutcome(False, True), "fresh": CheckOutcome(False, False)})
    assert not run.success and run.error == "b: coverage not proven"
    assert run.failed_checks == ["coverage"] and run.warned_checks == ["fresh"]


def test_domain_errors_say_their_kind():
    from rag_pipeline.config import ConfigError
    from rag_pipeline.core.evaluation.golden.cases import GoldenSetError
    from rag_pipeline.core.ingestion.source_tree import SourceUnavailableError
    from rag_pipeline.core.storage import SourceBusyError

    for error in (ConfigError, GoldenSetError):
        assert issubclass(error, InputError) and error.exit_code == EXIT_INPUT
    for error in (SourceUnavailableError, SourceBusyError):
        assert issubclass(error, DomainError) and error.fault == "unavailable" and error.exit_code == EXIT_FAILED
    # A plain ValueError or KeyError is a bug's, not the data's.
    assert not issubclass(ValueError, DomainError) and not issubclass(KeyError, DomainError)


def test_every_ingestion_asset_records_its_outcome(tmp_path, write_config):
    config = write_config({"kb": write_tree(tmp_path / "kb", {"a.md": "# Refunds\n\nRefunds take 14 days.\n"})})
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sources", ["kb"])
    job = build_definitions(config).resolve_job_def("ingest_sources")
    run = run_result(job.execute_in_process(instance=instance, partition_key="kb", raise_on_error=False))
    assert run.success and list(run.outcomes) == INGESTION
    for asset in INGESTION:
        assert run.values[asset][OUTCOME_KEY] == {"status": "done", "reason": "", "fault": ""}


def test_a_domain_error_fails_its_step_with_its_reason_and_kind(tmp_path, write_config):
    root = write_tree(tmp_path / "kb", {"a.md": "# A\n\ntext\n"})
    config = write_config({"kb": root})
    instance = dg.DagsterInstance.ephemeral()
    assert ingest(config, instance)[0].success
    for path in root.iterdir():
        path.unlink()
    root.rmdir()  # the source vanished: an outage, not a bug
    job = build_definitions(config).resolve_job_def("ingest_sources")
    run = run_result(job.execute_in_process(instance=instance, partition_key="kb", raise_on_error=False))
    failure = run.failure
    assert failure is not None and failure.status == Status.FAILED and failure.fault == "unavailable"
    assert run.error.startswith("source_documents: ") and "does not exist" in run.error
    assert run.bug_report is None


def test_a_bad_golden_file_is_an_input_error_with_exit_2(tmp_path, write_config):
    golden = tmp_path / "golden.jsonl"
    golden.write_text('{"id": "q1", "question": ""}\n')
    config = write_config({"kb": write_tree(tmp_path / "kb", {"a.md": "# A\n\ntext\n"})}, golden_set=str(golden))
    instance = dg.DagsterInstance.ephemeral()
    assert ingest(config, instance)[0].success
    evaluation = evaluate_golden(config, instance)
    assert not evaluation.measured and evaluation.exit_code == EXIT_INPUT
    assert "golden.jsonl line 1" in evaluation.error


@pytest.mark.parametrize("module", sorted(Path(__file__).parents[2].joinpath("rag_pipeline", "cli").glob("*.py")),
                         ids=lambda p: p.name)
def test_the_command_line_reads_outcomes_not_error_text(module):
    """No walk of Dagster's error chain, no class names, no matching of an error's words."""
    text = module.read_text()
    assert not re.search(r"\.cls_name|\.cause\b|step_failure_data|user_failure_data|re\.sub|\"\w+Error\"", text)
