"""A golden revision's file: the configured file while it holds that content, else the snapshot
kept in the store when the revision was first evaluated (a revision is frozen; the file moves on)."""

from __future__ import annotations

from pathlib import Path

from rag_pipeline.core.evaluation.golden.cases import GoldenSetError, file_revision
from rag_pipeline.core.evaluation.golden.lines import check_file_size
from rag_pipeline.core.storage import Store


def golden_file_for_revision(golden_set: Path | None, store: Store, revision: str, folder: Path) -> Path:
    """The golden file of a revision: the configured file if it still has that content (its text
    then kept as the revision's snapshot), else the kept snapshot written to `folder`."""
    if golden_set is None:
        raise GoldenSetError("no golden_set configured in the pipeline config")
    path = Path(golden_set)
    if path.is_file() and file_revision(path) == revision:
        check_file_size(path)  # the snapshot reads it whole: a file over the bound is refused first
        store.records.snapshot_golden(revision, str(path), path.read_text(encoding="utf-8"))
        return path
    content = store.records.golden_snapshot(revision)
    if content is None:
        raise GoldenSetError(
            f"golden-set revision {revision} is neither the current content of {path} "
            f"(now {file_revision(path) if path.is_file() else 'missing'}) nor a kept snapshot"
        )
    frozen = folder / f"{revision}.jsonl"
    frozen.parent.mkdir(parents=True, exist_ok=True)
    frozen.write_text(content, encoding="utf-8")
    return frozen
