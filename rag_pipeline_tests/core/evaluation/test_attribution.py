"""Why it moved: each kind of change made to a real index (ingested files, the hashing embedder) is
found as the cause of the cases it moved, proven by a replay with that change undone; a cause whose
replay does not recover is never claimed; a case no single undone change brings back is
unexplained, with what was tried. On DuckDB and on PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rag_pipeline.config import (
    ChunkingConfig,
    EmbeddingConfig,
    LifecycleConfig,
    PipelineConfig,
    RetrievalConfig,
    SourceConfig,
)
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.evaluation.attribution import render
from rag_pipeline.core.evaluation.attribution.attribute import explain
from rag_pipeline.core.evaluation.attribution.causes import (
    CONFIG_CHANGED,
    GOLD_CHANGED,
    GOLD_DELETED,
    GOLD_RECHUNKED,
    GOLDEN_CHANGED,
    MODEL_CHANGED,
    OUTRANKED,
    UNEXPLAINED,
)
from rag_pipeline.core.evaluation.evaluate import run_golden_evaluation
from rag_pipeline.core.evaluation.gating.junit import golden_suite
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.report import write_report
from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline_tests.conftest import BACKENDS, make_store, write_tree

HEADLINE = ("recall_at_5", "mrr_at_10", "ndcg_at_10")
PAGES = {
    "refunds.md": "# Refunds\n\nRefunds for annual plans take 14 days after the request.\n\n## Exceptions\n\n"
                  "Monthly plans get no refund after the first week of use.\n",
    "seats.md": "# Seats\n\nEach plan includes 5 seats. Extra seats cost 4 euros a month.\n",
    "sso.md": "# Single sign-on\n\nSingle sign-on uses SAML 2.0 with Okta or Entra ID.\n",
    "export.md": "# Export\n\nExport invoices as a CSV archive from the billing page.\n",
    "limits.md": "# Rate limits\n\nThe Growth plan allows 600 API requests per minute.\n",
    "hardware.md": "# Hardware returns\n\nThe refund window for hardware is 30 days after delivery.\n",
}
# A page of its own source, so that it can be chunked again alone (as a parser change would).
BILLING = {"billing.md": (
    "# Billing\n\n## Invoices\n\nInvoices are sent by email on the first day of each month. Each invoice lists every "
    "seat, every add-on and the taxes of your country, and a PDF copy stays in the account for seven years so that "
    "auditors can read it at any time.\n\n## Taxes\n\nTaxes follow the address of the company that pays. VAT numbers "
    "are checked against the European register when they are entered, and a reverse charge applies to companies "
    "outside the country of the seller in the union.\n\n## Refund window\n\nA refund is possible within 14 days of "
    "the payment.\n")}
CASES = [
    ("window", "refund window days", "billing:billing.md"),
    ("refund-days", "how many days does a refund of an annual plan take", "docs:refunds.md"),
    ("monthly", "refund for monthly plans after the first week", "docs:refunds.md"),
    ("seats", "how many seats does a plan include", "docs:seats.md"),
    ("sso", "single sign-on with SAML and Okta", "docs:sso.md"),
    ("export", "export invoices as a CSV archive", "docs:export.md"),
    ("limits", "API requests per minute on the Growth plan", "docs:limits.md"),
]


class Night:
    """A small index and golden set, evaluated, changed, evaluated again and explained."""

    def __init__(self, request, backend: str, folder: Path, lifecycle: LifecycleConfig = LifecycleConfig()) -> None:
        self.store = make_store(request, backend, folder)
        self.docs = SourceConfig(name="docs", path=write_tree(folder / "docs", PAGES))
        self.billing = SourceConfig(name="billing", path=write_tree(folder / "billing", BILLING))
        self.config = PipelineConfig(sources=(self.docs, self.billing), embedding=EmbeddingConfig(kind="hashing"),
                                     lifecycle=lifecycle)
        self.embedder = make_embedder(self.config.embedding)
        self.golden = folder / "golden.jsonl"
        self.write_golden(CASES)
        self.folder = folder
        self.last: datetime | None = None
        for source in (self.docs, self.billing):
            self.ingest(source)

    def write_golden(self, cases, split: dict[str, str] | None = None) -> None:
        self.golden.write_text("".join(json.dumps({"id": i, "question": q, "reference": "see the page", "gold_docs": [d],
                                                   "split": (split or {}).get(i, "dev")}) + "\n"
                                       for i, q, d in cases))

    def ingest(self, source: SourceConfig, chunking: ChunkingConfig | None = None, embedder=None) -> None:
        ingest_source(source, self.store, embedder or self.embedder, chunking or self.config.chunking,
                      self.config.lifecycle, "night")

    def evaluate(self, config: PipelineConfig | None = None, embedder=None, mode: str | None = None):
        config = config or self.config
        # An evaluation's id holds its second: two in one second would share it.
        while self.last is not None and datetime.now(UTC).replace(microsecond=0, tzinfo=None) <= self.last:
            time.sleep(0.05)
        path = golden_file_for_revision(self.golden, self.store, _revision(self.golden), self.folder / "revisions")
        _, result = run_golden_evaluation(path, self.store, embedder or self.embedder, config.retrieval,
                                          config.retrieval_fingerprint(), config.source_ids, mode,
                                          settings=config.retrieval_settings())
        self.last = result.created_at.replace(microsecond=0)
        return result

    def baseline(self):
        result = self.evaluate()
        self.store.records.promote(result.revision, result.eval_id, "test baseline")
        return result

    def explain(self, candidate, baseline, embedder=None):
        return explain(self.store, candidate, baseline.eval_id, embedder or self.embedder, HEADLINE)

    def served(self) -> list:
        return sorted(self.store.db.rows("SELECT chunk_id, text_hash FROM chunks")) + sorted(
            self.store.db.rows("SELECT doc_id, version FROM documents"))


def _revision(path: Path) -> str:
    from rag_pipeline.core.evaluation.golden.cases import file_revision

    return file_revision(path)


@pytest.fixture(params=BACKENDS)
def night(request, tmp_path):
    night = Night(request, request.param, tmp_path)
    yield night
    night.store.close()


def _by_case(changes) -> dict:
    return {c.case_id: c for c in changes.changes}


def _proven(change) -> None:
    """The claimed cause's replay brings the case back to the baseline's value or rank."""
    proof = change.counterfactual
    assert proof is not None and proof.recovered
    assert proof.metric == pytest.approx(change.baseline, abs=1e-9) or proof.first_gold_rank == change.baseline_rank
    assert change.tried[-1].cause.kind == change.cause.kind and change.tried[-1].recovered


def test_a_deleted_gold_document_is_named_and_serving_it_again_recovers_the_case(night):
    base = night.baseline()
    (night.docs.path / "sso.md").unlink()
    night.ingest(night.docs)
    cand = night.evaluate()
    before = night.served()
    changes = night.explain(cand, base)
    [change] = changes.changes
    assert (change.case_id, change.cause.kind, change.cause.doc) == ("sso", GOLD_DELETED, "docs:sso.md")
    assert (change.baseline, change.candidate, change.candidate_rank) == (1.0, 0.0, None)
    assert not change.scored  # a gold document deleted: the case is stale, scored apart by the gate
    assert "not served now" in change.cause.detail
    _proven(change)
    # The replay ran in a transaction rolled back: what is served is what was served.
    assert night.served() == before
    assert night.store.records.case_changes(cand.eval_id) == [change.as_json()]
    assert changes.unproven == []


def test_a_changed_gold_document_names_the_section_that_lost_the_answer(night):
    base = night.baseline()
    (night.docs.path / "refunds.md").write_text(PAGES["refunds.md"].replace(
        "Monthly plans get no refund after the first week of use.", "Some plans follow other rules; ask support."))
    night.ingest(night.docs)
    change = _by_case(night.explain(night.evaluate(), base))["monthly"]
    assert (change.cause.kind, change.cause.doc) == (GOLD_CHANGED, "docs:refunds.md")
    assert change.fell
    assert "'Refunds > Exceptions', lost that text" in change.cause.detail
    assert "sections changed: Refunds > Exceptions" in change.cause.detail
    _proven(change)


def test_a_gold_document_chunked_again_is_named_and_so_is_what_it_stopped_outranking(night):
    # The same bytes chunked whole, as a parser or chunker change would, with the settings recorded unchanged.
    base = night.baseline()
    night.ingest(night.billing, ChunkingConfig(strategy="whole"))
    found = _by_case(night.explain(night.evaluate(), base))
    window = found["window"]
    assert (window.cause.kind, window.cause.doc, window.fell) == (GOLD_RECHUNKED, "billing:billing.md", True)
    assert "the same text" in window.cause.detail and "other chunks: 2 -> 1" in window.cause.detail
    _proven(window)
    # Another case rose: the billing page that outranked its gold no longer does.
    rose = found["refund-days"]
    assert (rose.cause.kind, rose.cause.doc, rose.fell) == (OUTRANKED, "billing:billing.md", False)
    assert "above the gold in the baseline" in rose.cause.detail
    _proven(rose)


def test_a_new_document_that_outranks_the_gold_is_named(night):
    base = night.baseline()
    (night.docs.path / "plans-faq.md").write_text("# Plans FAQ\n\nHow many seats does a plan include? Plans include seats.\n")
    night.ingest(night.docs)
    change = _by_case(night.explain(night.evaluate(), base))["seats"]
    assert (change.cause.kind, change.cause.doc) == (OUTRANKED, "docs:plans-faq.md")
    assert change.cause.detail.startswith("a new document, ranked 1 above the gold (first gold rank 2)")
    _proven(change)


def test_a_changed_setting_is_named_by_its_key_after_the_keys_that_do_not_recover(night):
    base = night.baseline()
    changed = night.config.model_copy(update={"retrieval": RetrievalConfig(bm25_k1=1.2, dense_weight=0.0)})
    change = _by_case(night.explain(night.evaluate(changed), base))["refund-days"]
    assert (change.cause.kind, change.cause.doc) == (CONFIG_CHANGED, None)
    assert change.cause.detail == "retrieval.dense_weight: 1.0 -> 0.0"
    # bm25_k1 changed too and was tried first: its value undone does not bring the case back.
    assert [(t.cause.detail, t.recovered) for t in change.tried] == [("retrieval.bm25_k1: 0.9 -> 1.2", False),
                                                                      ("retrieval.dense_weight: 1.0 -> 0.0", True)]
    assert change.tried[0].undone == "replayed with retrieval.bm25_k1 = 0.9 (the baseline's value)"
    _proven(change)


def test_a_changed_chunking_key_is_undone_with_the_baseline_chunks(night):
    base = night.baseline()
    whole = night.config.model_copy(update={"chunking": ChunkingConfig(strategy="whole")})
    night.ingest(night.docs, whole.chunking)
    night.ingest(night.billing, whole.chunking)
    changes = night.explain(night.evaluate(whole), base)
    assert changes.changes and {c.cause.detail for c in changes.changes} == {"chunking.strategy: 'sections' -> 'whole'"}
    for change in changes.changes:
        _proven(change)
    assert changes.changes[0].counterfactual.undone.startswith("replayed with the chunks the baseline's chunking made")


def test_the_keys_of_a_chunking_section_are_one_candidate(night):
    # A source's own chunking changes several keys at once: undone together, named together.
    base = night.baseline()
    own = ChunkingConfig(strategy="whole", max_tokens=200)
    billing = night.billing.model_copy(update={"chunking": own})
    changed = night.config.model_copy(update={"sources": (night.docs, billing)})
    night.ingest(billing, own)
    change = _by_case(night.explain(night.evaluate(changed), base))["window"]
    assert change.cause.kind == CONFIG_CHANGED and len(change.tried) == 1
    assert change.cause.detail == ("sources.billing.chunking.max_tokens: 160 -> 200; "
                                   "sources.billing.chunking.strategy: 'sections' -> 'whole'")
    _proven(change)


def test_a_changed_model_is_undone_by_embedding_again_with_the_baseline_model(night):
    base = night.baseline()
    small = night.config.model_copy(update={"embedding": EmbeddingConfig(kind="hashing", dimension=16)})
    embedder = make_embedder(small.embedding)
    for source in (night.docs, night.billing):
        night.ingest(source, embedder=embedder)
    changes = night.explain(night.evaluate(small, embedder), base, embedder)
    assert changes.changes and {c.cause.kind for c in changes.changes} == {MODEL_CHANGED}
    assert "hashing-384:normalize=True -> hashing-16:normalize=True (embedding.dimension: 384 -> 16)" in \
        changes.changes[0].cause.detail
    for change in changes.changes:
        _proven(change)
    assert any("the model changed" in note for note in changes.notes)


def test_changed_labels_in_a_new_golden_revision_are_named(night):
    base = night.baseline()
    night.write_golden([(i, q, "docs:export.md" if i == "seats" else d) for i, q, d in CASES])
    [change] = night.explain(night.evaluate(), base).changes
    assert (change.case_id, change.cause.kind) == ("seats", GOLDEN_CHANGED)
    assert change.cause.detail == "gold_docs docs:seats.md -> docs:export.md"
    _proven(change)


def test_two_changes_at_once_are_unexplained_and_no_cause_is_claimed_without_recovery(night):
    # The gold page loses its answer and a new page outranks it: neither undone alone brings it back.
    base = night.baseline()
    (night.docs.path / "plans-faq.md").write_text("# Plans FAQ\n\nHow many seats does a plan include? Plans include seats.\n")
    (night.docs.path / "seats.md").write_text("# Pricing notes\n\nSee the pricing page for the current numbers.\n")
    night.ingest(night.docs)
    changes = night.explain(night.evaluate(), base)
    change = _by_case(changes)["seats"]
    assert change.cause.kind == UNEXPLAINED and change.counterfactual is None
    assert [(t.cause.kind, t.cause.doc, t.recovered) for t in change.tried] == [
        (GOLD_CHANGED, "docs:seats.md", False), (OUTRANKED, "docs:plans-faq.md", False)]
    assert change.cause.detail.startswith("no single change undone brings it back; tried: gold_changed docs:seats.md (")
    assert change.as_json()["counterfactual"] is None and len(change.as_json()["tried"]) == 2
    # The other case it moved is explained by the new page alone.
    other = _by_case(changes)["refund-days"]
    assert (other.cause.kind, other.cause.doc) == (OUTRANKED, "docs:plans-faq.md")
    _proven(other)
    assert changes.unproven == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_counterfactual_that_cannot_be_made_is_listed_untestable(request, tmp_path, backend):
    # No history kept: the baseline's version of the page cannot be served again.
    night = Night(request, backend, tmp_path, LifecycleConfig(keep_states=0, keep_state_days=0))
    base = night.baseline()
    (night.docs.path / "refunds.md").write_text(PAGES["refunds.md"].replace(
        "Monthly plans get no refund after the first week of use.", "Some plans follow other rules; ask support."))
    night.ingest(night.docs)
    change = _by_case(night.explain(night.evaluate(), base))["monthly"]
    assert change.cause.kind == UNEXPLAINED
    assert change.tried[0].cause.kind == GOLD_CHANGED and "were not kept" in change.tried[0].untestable
    assert "untestable" in change.cause.detail
    night.store.close()


def test_no_baseline_and_nothing_moved(night):
    base = night.baseline()
    # What attribution compares is recorded with every evaluation.
    summary = night.store.records.evaluation_summary(base.eval_id)
    assert summary["served_states"] == {s: night.store.states.latest(s).state_id for s in ("docs", "billing")}
    assert summary["embedding"] == "hashing-384:normalize=True"
    assert summary["settings"]["chunking.max_tokens"] == 160 and summary["settings"]["retrieval.mode"] == "hybrid"
    assert summary["settings"]["embedding.dimension"] == 384 and "embedding.batch_size" not in summary["settings"]
    assert explain(night.store, base, None, night.embedder, HEADLINE) is None
    again = night.evaluate()
    changes = night.explain(again, base)
    assert changes.changes == [] and changes.holdout_moved == 0
    assert night.store.records.case_changes(again.eval_id) == []


def test_a_holdout_case_that_moved_is_counted_and_never_named(night):
    night.write_golden(CASES, split={"sso": "holdout"})
    base = night.baseline()
    (night.docs.path / "sso.md").unlink()
    night.ingest(night.docs)
    changes = night.explain(night.evaluate(), base)
    assert changes.changes == [] and changes.holdout_moved == 1
    assert "sso" not in render.markdown_section([], base.eval_id, changes.holdout_moved)


def test_what_a_person_reads_names_the_cause_in_the_report_and_in_junit(tmp_path, request):
    night = Night(request, "duckdb", tmp_path)
    base = night.baseline()
    (night.docs.path / "sso.md").unlink()
    (night.docs.path / "plans-faq.md").write_text("# Plans FAQ\n\nHow many seats does a plan include? Plans include seats.\n")
    night.ingest(night.docs)
    cand = night.evaluate()
    changes = night.explain(cand, base)
    stored = night.store.records.case_changes(cand.eval_id)
    # Falls, the largest first: sso lost its page, the new page outranks the gold of two cases.
    assert [(c["case_id"], c["cause"]["kind"]) for c in stored] == [
        ("sso", GOLD_DELETED), ("seats", OUTRANKED), ("refund-days", OUTRANKED)]
    section = render.markdown_section(stored, changes.baseline_id, changes.holdout_moved, changes.notes)
    assert section.index("### outranked (2)") < section.index("### gold_deleted (1)")
    assert "docs:plans-faq.md" in section and "served as in the baseline" in section
    report = write_report(cand, night.store, GatePolicy(), tmp_path / "reports", sections=[section])
    assert "## Why cases moved against the baseline" in report.path.read_text()
    assert render.why_line(stored) == "why: 3 case(s) fell (outranked 2: docs:plans-faq.md; gold_deleted 1: docs:sso.md)"
    assert render.text_lines(stored)[0] == "why cases moved against the baseline: 3 case(s) (gold_deleted 1, outranked 2)"
    import xml.etree.ElementTree as ET

    # At k = 1 the case whose gold fell to rank 2 fails, and its failure says why it moved.
    suite = golden_suite(ET.Element("testsuites"), cand.eval_id, night.store.records.case_rows(cand.eval_id), 1,
                         render.junit_messages(stored))
    failures = {c.get("name"): c.find("failure").get("message") for c in suite.findall("testcase")
                if c.find("failure") is not None}
    assert failures["seats"].startswith("no gold document in the top 1 (first at rank 2)")
    assert ("; moved: mrr_at_10 1.0000 -> 0.5000 against the baseline; cause: outranked docs:plans-faq.md (a new "
            "document, ranked 1 above the gold") in failures["seats"]
    assert "with it undone the case replays 1.0000" in failures["seats"]
    night.store.close()
