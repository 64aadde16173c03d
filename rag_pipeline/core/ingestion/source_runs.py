"""A source's run as every caller reports it (`SourceRun`: counts, failed documents, checks, the
reason it failed), built from the run's outcomes, and the one decision of whether a source needs a
run at all (`unchanged_run`): asked before Dagster is even imported, and again by the runner under
the source's lock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rag_pipeline.core.errors import DomainError

if TYPE_CHECKING:  # imported when deciding, so that a command that never decides does not pay for them
    from rag_pipeline.config import SourceConfig
    from rag_pipeline.core.ingestion.inputs import SourceWalk
    from rag_pipeline.core.outcomes import RunResult
    from rag_pipeline.core.storage import Store

# What a run of a source counts, in pipeline order, and the (asset, metadata key) each is read from.
# Every outcome carries all of them (0 where it has none) and the command's table shows them.
RUN_COUNTS: dict[str, tuple[str, str]] = {
    "discovered": ("source_documents", "discovered"),
    "skipped": ("source_documents", "skipped"),
    "added": ("source_documents", "added"),
    "changed": ("source_documents", "changed"),
    "unchanged": ("source_documents", "unchanged"),
    "unreadable": ("source_documents", "unreadable"),
    "deleted": ("source_documents", "deleted"),
    "parsed": ("parsed_documents", "parsed"),
    "chunked": ("document_chunks", "chunked_documents"),
    "embedded": ("chunk_embeddings", "embedded"),
    "cache_hits": ("chunk_embeddings", "cache_hits"),
    "indexed": ("search_index", "indexed"),
    "queryable": ("search_index", "queryable"),  # state: documents whose current version is served and proven queryable
}
# Counts a run that ran also reports (JSON only): what its probe and its switch did.
RUN_DETAILS: dict[str, tuple[str, str]] = {
    "probed": ("search_index", "probed"),  # this run: documents whose queryable probe ran
    # state: documents whose current version failed and whose last good version stays served
    "kept_previous": ("search_index", "kept_previous"),
}
# Columns of the human-readable ingestion summary.
SUMMARY_COLUMNS = (*RUN_COUNTS, "failed")


@dataclass
class SourceRun:
    """The outcome of one source partition's run."""

    source_id: str
    success: bool
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    error: str | None = None
    # Checks that failed with severity WARN: shown, but they do not fail the run.
    warnings: list[str] = field(default_factory=list)
    # What the source as a whole was at (a git commit) in the run's discovery, or when none ran, at its last switch.
    revision: str | None = None
    # Why no run was needed (inputs unchanged since the last committed switch), when none ran.
    not_run: str | None = None
    # The command was interrupted in this source's run, or before it (it then did not run).
    interrupted: bool = False
    # Files discovery skipped (not documents): `{"doc_id", "reason"}` each.
    skipped: list[dict] = field(default_factory=list)

    @classmethod
    def from_run(cls, source_id: str, run: RunResult, failures: list[dict], skipped: list[dict]) -> SourceRun:
        """The outcome of a run that ran: its counts (0 for a stage it did not reach), the ledger's
        failed documents, its checks and, when it failed, the reason its failed step gave."""
        counts = {name: int(run.value(asset, key, 0)) for name, (asset, key) in {**RUN_COUNTS, **RUN_DETAILS}.items()}
        revision = run.value("source_documents", "revision")
        return cls(source_id, run.success, counts, failures, {name: c.passed for name, c in run.checks.items()},
                   error=run.error, warnings=run.warned_checks, revision=revision if isinstance(revision, str) else None,
                   interrupted=run.interrupted, skipped=skipped)

    def as_json(self) -> dict:
        # Every count, 0 where this outcome has none (a source not run, a busy one): one shape for scripts.
        return {**dict.fromkeys(RUN_COUNTS, 0), **self.counts, "failed": len(self.failures), "failures": self.failures,
                "skipped_files": self.skipped, "skipped_by_reason": skipped_by_reason(s["reason"] for s in self.skipped),
                "checks": self.checks, "warnings": self.warnings, "success": self.success, "error": self.error,
                "not_run": self.not_run, "interrupted": self.interrupted, "revision": self.revision}


def unchanged_run(source: SourceConfig, store: Store, settings: str, walk: SourceWalk | None = None,
                  open_elsewhere: Callable[[str], bool] | None = None) -> SourceRun | None:
    """Does this source need a run? None when it does; else the outcome of the run that need not happen.

    A source needs no run when its inputs (files and the settings fingerprint) are those of its last
    committed switch, no switch was refused since, and no run of it may be open elsewhere
    (`open_elsewhere(source_id)`: a Dagster run in flight, or a command-line run that a dead process
    left open; that run is then closed by running the source). `walk`: the source's walk, when the
    caller made one just now."""
    from rag_pipeline.core.ingestion.coverage import coverage_report
    from rag_pipeline.core.ingestion.inputs import walk_source

    if open_elsewhere is not None and open_elsewhere(source.source_id):
        return None
    with store.db.session():
        committed = store.staging.committed_inputs(source.source_id)
        refused = store.ledger.last_failure(source.source_id)
    if committed is None or refused is not None:
        return None
    try:
        current = (walk or walk_source(source, store.folder)).fingerprint(settings)
    except (OSError, RuntimeError, DomainError):
        return None  # an unreadable root: the run says why
    if current != committed:
        return None
    with store.db.session():
        coverage = coverage_report(store, source.source_id)
        manifest = store.staging.manifest_rows(source.source_id)
    supported = sum(1 for row in manifest if row["supported"])
    # As a run counts them: `discovered` the supported documents, `skipped` the others.
    counts = {"discovered": supported, "skipped": len(manifest) - supported, "unchanged": supported,
              "queryable": coverage.counts_by_stage.get("queryable", 0)}
    # The checks that depend on the store, evaluated again; freshness and deletions hold by
    # construction (the files are those the committed switch proved).
    checks = {"coverage": coverage.verdict().passed, "no_failed_documents": coverage.failed_documents_verdict("").passed}
    warnings = [] if checks["no_failed_documents"] else ["no_failed_documents"]
    from rag_pipeline.core.ingestion.inputs import revision_of

    return SourceRun(source.source_id, checks["coverage"], counts, coverage.failed, checks, warnings=warnings,
                     revision=revision_of(committed),
                     not_run=f"inputs unchanged since the last switch (fingerprint {current}): nothing to run",
                     skipped=skipped_files(manifest))


def skipped_files(rows: list[dict]) -> list[dict]:
    """`{"doc_id", "reason"}` of every row of a discovery or manifest that discovery skipped."""
    return [{"doc_id": row["doc_id"], "reason": row.get("skip_reason") or "not a supported document"}
            for row in rows if not row["supported"]]


def skipped_by_reason(reasons: Iterable[str | None]) -> dict[str, int]:
    """Skipped files counted by reason, the most frequent first."""
    counts = Counter(reason or "not a supported document" for reason in reasons)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


@contextmanager
def failure_recorded(store: Store, source_id: str, run_id: str) -> Iterator[None]:
    """Keep with the source why a stage of its run failed (`source_runs.last_failure`), as a refused
    switch is kept: what it serves stays, and the next evaluation's `sources` table and the next
    `ingest` see that its latest run did not land. The error goes on as it was."""
    try:
        yield
    except DomainError as error:
        try:
            store.ledger.record_source_run(source_id, None, run_id, failure=str(error))
        except DomainError:
            pass  # the store itself is the fault (busy, full): the run's own failure says so
        raise


def served_state(store: Store, source_id: str, root: Path | None = None) -> str:
    """What the source serves, in a sentence for the on-call person: current, or served from the
    version of its last committed switch because its latest run failed (with the reason) or its
    folder is gone (`root`, the configured one, no longer exists)."""
    record = store.ledger.source_record(source_id)
    last_success = record["last_success_at"] if record else None
    served = (f"served from the version of {last_success:%Y-%m-%d %H:%M} UTC" if last_success
              else "nothing served")
    failure = record["last_failure"] if record else None
    if failure and (last_success is None or (record["last_failure_at"] or last_success) >= last_success):
        return f"{served}; latest run failed: {failure}"
    if root is not None and not Path(root).exists():
        return f"{served}; its folder {root} is gone (no run has failed on it yet)"
    if last_success is None:
        return "nothing served: never ingested"
    return f"current (switched {last_success:%Y-%m-%d %H:%M} UTC)"
