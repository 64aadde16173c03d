"""The mass-delete guard over time: the limit holds against the most a source served in a window,
so nightly slices under the limit cannot empty it unasked (DuckDB and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.ingestion.discovery import SourceUnavailableError
from rag_pipeline.core.ingestion.lifecycle import mass_deletion_refusal
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import ManifestDiff
from rag_pipeline.core.storage import utcnow
from rag_pipeline.core.storage.ledger import HighPoint
from rag_pipeline_tests.conftest import BACKENDS, make_store


def _diff(kept: int, deleted: int) -> tuple[ManifestDiff, set[str]]:
    diff = ManifestDiff((), (), tuple(f"s:k{i}" for i in range(kept)), tuple(f"s:d{i}" for i in range(deleted)))
    return diff, {*diff.unchanged, *diff.deleted}


def test_a_slice_under_the_per_run_limit_is_refused_past_the_high_point():
    diff, served = _diff(kept=6, deleted=5)  # 45% of the 11 served now
    assert mass_deletion_refusal("s", diff, served, 0.5) is None
    high = HighPoint(20, datetime(2026, 12, 1, 2, 0))
    reason = mass_deletion_refusal("s", diff, served, 0.5, high, 7)
    assert reason.startswith("source 's' would serve 6 documents, 70% fewer than the 20 it served on 2026-12-01 02:00 UTC "
                             "(the most it served in the last 7 days): 9 went since by runs under the limit, and this run "
                             "would delete 5 more (s:d0, s:d1, s:d2, s:d3, s:d4). Nothing was deleted")
    assert mass_deletion_refusal("s", diff, served, 0.7, high, 7) is None  # 70% is not over a 70% limit
    assert mass_deletion_refusal("s", _diff(kept=11, deleted=0)[0], served, 0.5, high, 7) is None  # deletes nothing


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_high_point_is_what_was_in_force_in_the_window_until_a_run_allowed_past_it(request, backend, tmp_path):
    store = make_store(request, backend, tmp_path)
    assert store.ledger.served_high_point("s", utcnow()) is None
    store.ledger.record_served("s", "r1", 20)
    first = utcnow()
    store.ledger.record_served("s", "r2", 11)
    store.ledger.record_served("other", "r2", 99)
    assert store.ledger.served_high_point("s", first - timedelta(days=7)).served_documents == 20
    # The window starts after the 20 were recorded: what was in force at its start still counts...
    assert store.ledger.served_high_point("s", first).served_documents == 20
    # ...until a later switch replaced it before the window.
    assert store.ledger.served_high_point("s", utcnow() + timedelta(seconds=1)).served_documents == 11
    store.ledger.record_served("s", "r3", 6, mass_delete_allowed=True)
    assert store.ledger.served_high_point("s", first - timedelta(days=7)).served_documents == 6


def _pages(root, count: int) -> None:
    root.mkdir(exist_ok=True)
    for page in root.glob("*.md"):
        page.unlink()
    for i in range(count):
        (root / f"page-{i:02d}.md").write_text(f"# Page {i}\n\nPage number {i} about topic{i} and nothing else.\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_nightly_runs_deleting_45_percent_are_refused_at_the_one_that_crosses_the_limit(request, backend, tmp_path):
    store = make_store(request, backend, tmp_path)
    embedder = make_embedder(EmbeddingConfig(kind="hashing"))
    source = SourceConfig(name="docs", path=tmp_path / "docs")
    lifecycle = LifecycleConfig(max_delete_fraction=0.5)

    def night(pages: int, lifecycle: LifecycleConfig = lifecycle, run: str = "night"):
        _pages(source.path, pages)
        return ingest_source(source, store, embedder, ChunkingConfig(), lifecycle, run)

    def served() -> int:
        return len(store.served.indexed_documents("docs"))

    night(20, run="first")
    assert served() == 20
    night(11)  # 45% deleted: under the limit, against the previous run and the high point
    assert served() == 11
    with pytest.raises(SourceUnavailableError) as refused:
        night(6)  # 45% of 11, but 70% below the 20 of the first run
    message = str(refused.value)
    assert "would serve 6 documents, 70% fewer than the 20 it served on " in message
    assert f"{utcnow():%Y-%m-%d}" in message and "this run would delete 5 more" in message
    assert "lifecycle.allow_mass_delete: true" in message
    assert served() == 11  # nothing was deleted
    allowed = night(6, LifecycleConfig(max_delete_fraction=0.5, allow_mass_delete=True))
    assert served() == 6 and "70% fewer than the 20" in allowed["discovered"].details["mass_delete_allowed"][0]
    night(4)  # the high point counts afresh from the allowed run: 33% of 6
    assert served() == 4
    with pytest.raises(SourceUnavailableError, match="would serve 2 documents, 67% fewer than the 6"):
        night(2)


def test_a_window_of_zero_days_is_the_per_run_limit_only(tmp_path, request):
    store = make_store(request, "duckdb", tmp_path)
    embedder = make_embedder(EmbeddingConfig(kind="hashing"))
    source = SourceConfig(name="docs", path=tmp_path / "docs")
    lifecycle = LifecycleConfig(max_delete_fraction=0.5, mass_delete_window_days=0)
    for pages in (20, 11, 6, 4):
        _pages(source.path, pages)
        ingest_source(source, store, embedder, ChunkingConfig(), lifecycle, f"n{pages}")
    assert len(store.served.indexed_documents("docs")) == 4
