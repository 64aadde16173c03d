"""What a command-line run of a source reports, and the run that need not happen (Dagster-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rag_pipeline.config import SourceConfig
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.inputs import SourceWalk, walk_source
from rag_pipeline.core.storage import Store

# What a run of a source counts, in pipeline order: every outcome carries all of them.
RUN_COUNTS = ("discovered", "skipped", "added", "changed", "unchanged", "unreadable", "deleted", "parsed", "chunked", "embedded",
              "cache_hits", "indexed", "queryable")


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
    # Why no run was needed (inputs unchanged since the last committed switch), when none ran.
    not_run: str | None = None
    # The command was interrupted in this source's run, or before it (it then did not run).
    interrupted: bool = False
    # Files discovery skipped (not documents): `{"doc_id", "reason"}` each.
    skipped: list[dict] = field(default_factory=list)

    def as_json(self) -> dict:
        # Every count, 0 where this outcome has none (a source not run, a busy one): one shape for scripts.
        return {**dict.fromkeys(RUN_COUNTS, 0), **self.counts, "failed": len(self.failures), "failures": self.failures,
                "skipped_files": self.skipped,
                "checks": self.checks, "warnings": self.warnings, "success": self.success, "error": self.error,
                "not_run": self.not_run, "interrupted": self.interrupted}


def unchanged_run(source: SourceConfig, store: Store, settings: str, walk: SourceWalk | None = None) -> SourceRun | None:
    """A run's outcome without running it, when the source's inputs are those of its last committed
    switch and that switch was not refused since; None when it must run. `walk`: the source's
    walk, when the caller made one just now."""
    with store.db.session():
        committed = store.staging.committed_inputs(source.source_id)
        refused = store.ledger.last_failure(source.source_id)
    if committed is None or refused is not None:
        return None
    try:
        current = (walk or walk_source(source)).fingerprint(settings)
    except (OSError, RuntimeError):
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
    return SourceRun(source.source_id, checks["coverage"], counts, coverage.failed, checks, warnings=warnings,
                     not_run=f"inputs unchanged since the last switch (fingerprint {current}): nothing to run",
                     skipped=skipped_files(manifest))


def skipped_files(rows: list[dict]) -> list[dict]:
    """`{"doc_id", "reason"}` of every row of a discovery or manifest that discovery skipped."""
    return [{"doc_id": row["doc_id"], "reason": row.get("skip_reason") or "not a supported document"}
            for row in rows if not row["supported"]]
