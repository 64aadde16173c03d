"""`golden triage` and `golden accept` on a real DuckDB store of four ingested pages: reviewed values are parsed strictly,
holdout cases are never named, and every reviewer of an item is recorded."""

from __future__ import annotations

import json

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, RetrievalConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.evaluation.golden.cases import GoldenSetError
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.triage import accept_reviewed, build_queue
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

HOLDOUT_QUESTION = "which ferry crosses the fjord at midnight"
GOLDEN = [
    {"id": "d-1", "question": "how long is parental leave", "reference": "20 weeks.", "gold_docs": ["hb:leave.md"],
     "split": "dev"},
    {"id": "d-2", "question": "when are refunds paid out", "reference": "Within 14 days.", "gold_docs": ["hb:refunds.md"],
     "split": "dev"},
    {"id": "hc-003", "question": HOLDOUT_QUESTION, "reference": "The night ferry.", "gold_docs": ["hb:ferry.md"],
     "split": "holdout"},
]


PAGES = {
    "leave.md": "# Parental leave\n\nEvery new parent gets 20 weeks of paid leave.\n",
    "refunds.md": "# Refunds\n\nRefunds are paid out within 14 days.\n",
    "ferry.md": "# Night ferry\n\nThe night ferry crosses the fjord at midnight.\n",
    "bikes.md": "# Bikes\n\nThe basement has a bike storage room.\n",
}


@pytest.fixture
def store(tmp_path, embedder):
    """A real DuckDB store with the four pages ingested as source `hb`."""
    store = duckdb_store(tmp_path / "index.duckdb")
    source = SourceConfig(name="hb", path=write_tree(tmp_path / "hb", PAGES))
    ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "test-triage")
    return store


@pytest.fixture
def golden(tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in GOLDEN))
    return path


@pytest.fixture(scope="module")
def embedder():
    return HashingEmbedder(EmbeddingConfig(kind="hashing"))


def _item(n: int, question: str, **review) -> dict:
    return {"item_id": f"item{n:08d}", "origin": "user_report", "question": question, "evidence": {},
            "filters": {"tenant": None, "roles": []}, "reference": "reviewed reference", "gold_docs": ["hb:bikes.md"],
            "slice": "from_production", "split": "dev", "answerable": True, "reviewer": "ana", "decision": "accept",
            **review}


def _reviewed(tmp_path, name: str, items: list[dict]):
    path = tmp_path / f"reviewed-{name}.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def _accept(tmp_path, golden, embedder, store, *files):
    return accept_reviewed(list(files), golden, store, embedder, ["hb"])


def test_booleans_in_reviewed_items_are_parsed_strictly(tmp_path, golden, embedder, store):
    unanswerable = _item(1, "can i bring my dog to the office", answerable="false", slice="unanswerable")
    del unanswerable["gold_docs"]
    items = [unanswerable, _item(2, "is there a bike storage room", answerable="Yes"),
             _item(3, "how long is parental leave", duplicate_ok="false"), _item(4, "who waters the plants",
                                                                                 decision="Reject")]
    result = _accept(tmp_path, golden, embedder, store, _reviewed(tmp_path, "ana", items))
    assert not result.incomplete, "an unanswerable item needs no gold_docs"
    assert result.rejected == ["item00000004"]
    assert [d["item_id"] for d in result.duplicates] == ["item00000003"], "duplicate_ok 'false' is not true"
    cases = {c.id: c for c in load_golden_set(golden).cases}
    assert (cases["tri-item00000001"].answerable, cases["tri-item00000001"].gold_docs) == (False, ())
    assert cases["tri-item00000002"].answerable is True


@pytest.mark.parametrize(("field", "value"), [("answerable", "maybe"), ("answerable", 1), ("duplicate_ok", "sure"),
                                              ("decision", "approved")])
def test_a_value_that_is_no_boolean_is_refused_with_its_line(tmp_path, golden, embedder, store, field, value):
    path = _reviewed(tmp_path, "ana", [_item(1, "is there a bike storage room"),
                                       _item(2, "who waters the plants", **{field: value})])
    before = golden.read_text()
    with pytest.raises(GoldenSetError) as excinfo:
        _accept(tmp_path, golden, embedder, store, path)
    message = str(excinfo.value)
    assert f"reviewed-ana.jsonl line 2 (item item00000002): field '{field}': {json.dumps(value)}" in message
    assert ('write true or false (or the strings "true", "false", "yes", "no")' in message if field != "decision"
            else "is not one of accept, reject" in message)
    assert golden.read_text() == before


def test_holdout_cases_are_never_named_but_still_hold_duplicates_back(tmp_path, golden, embedder, store):
    reports = tmp_path / "reports.jsonl"
    reports.write_text(json.dumps({"question": HOLDOUT_QUESTION}) + "\n")
    retriever = Retriever(store, embedder, RetrievalConfig())
    [queued] = build_queue(store, load_golden_set(golden), retriever, embedder, reports=reports)
    assert sorted(n["case_id"] for n in queued["nearest_golden"]) == ["d-1", "d-2"], "no holdout case as a neighbour"
    # Accepted only if it were no copy of the holdout case: held back, even with duplicate_ok, and not named.
    item = _item(1, HOLDOUT_QUESTION, duplicate_ok=True)
    result = _accept(tmp_path, golden, embedder, store, _reviewed(tmp_path, "ana", [item]))
    assert result.duplicates == [{"item_id": "item00000001", "of": None, "similarity": None}]
    summary = result.summary()
    assert "near duplicate of a holdout case: item item00000001 is held back" in summary
    assert "hc-003" not in summary and HOLDOUT_QUESTION not in summary
    assert [c.id for c in load_golden_set(golden).cases] == ["d-1", "d-2", "hc-003"]


def test_every_reviewer_is_recorded_and_differing_references_are_a_disagreement(tmp_path, golden, embedder, store):
    agreed = _item(1, "is there a bike storage room")
    differ = _item(2, "who waters the plants")
    ana = _reviewed(tmp_path, "ana", [agreed, differ])
    ben = _reviewed(tmp_path, "ben", [{**agreed, "reviewer": "ben", "reference": "  reviewed\nreference "},
                                      {**differ, "reviewer": "ben", "reference": "The office manager."}])
    result = _accept(tmp_path, golden, embedder, store, ana, ben)
    assert result.accepted == ["tri-item00000001"]
    assert result.disagreements == [{"item_id": "item00000002", "reviewers": ["ana", "ben"], "fields": ["reference"]}]
    assert result.agreement_by_slice == {"from_production": (2, 1)}
    assert "to reconcile: item item00000002 (reference differ between ana, ben)" in result.summary()
    line = golden.read_text().splitlines()[-1]
    case = json.loads(line)
    assert case["reviewed"]["reviewed_by"] == ["ana", "ben"] and "reviewed by ana, ben on" in case["provenance"]
    [change] = store.records.golden_changes()
    assert change["changed_by"] == "ana, ben"


def test_an_invalid_accepted_item_is_named_in_the_file_it_would_join(tmp_path, golden, embedder, store):
    path = _reviewed(tmp_path, "ana", [_item(1, "is there a bike storage room", gold_docs=["hb:no-such-page.md"])])
    before = golden.read_text()
    with pytest.raises(GoldenSetError) as excinfo:
        _accept(tmp_path, golden, embedder, store, path)
    message = str(excinfo.value)
    assert f"{golden} (as accepting would write it)" in message and "(tri-item00000001)" in message
    assert "hb:no-such-page.md" in message and f"correct the reviewed items ({path})" in message
    assert golden.read_text() == before


@pytest.mark.parametrize(("field", "ana", "ben"), [
    ("split", "dev", "holdout"),
    ("gold_spans", [], [{"doc_id": "hb:bikes.md", "heading": "Bikes"}]),
    ("prohibited_claims", [], ["Bikes may be parked in the lobby."]),
])
def test_reviewers_must_agree_on_split_spans_and_prohibited_claims(tmp_path, golden, embedder, store, field, ana, ben):
    item = _item(1, "is there a bike storage room")
    result = _accept(tmp_path, golden, embedder, store, _reviewed(tmp_path, "ana", [{**item, field: ana}]),
                     _reviewed(tmp_path, "ben", [{**item, field: ben, "reviewer": "ben"}]))
    assert result.disagreements == [{"item_id": "item00000001", "reviewers": ["ana", "ben"], "fields": [field]}]
    assert not result.accepted


def test_accept_defaults_what_the_loader_defaults_and_lists_undecided_items(tmp_path, golden, embedder, store):
    items = [_item(1, "where do I leave my bike", split="", slice=""),  # the loader would default both
             _item(2, "is the night ferry on strike", answerable=False, gold_docs=[], reference="", split=""),
             _item(3, "who waters the plants", decision=""),  # nobody decided it yet
             _item(4, "is there a sauna", decision=None)]
    result = _accept(tmp_path, golden, embedder, store, _reviewed(tmp_path, "ana", items))
    assert result.accepted == ["tri-item00000001", "tri-item00000002"] and not result.incomplete
    assert result.undecided == ["item00000003", "item00000004"]
    assert "undecided: 2 item(s) without a decision (accept | reject), left in the queue: item00000003, item00000004" \
        in result.summary()
    cases = {c.id: c for c in load_golden_set(golden).cases}
    from rag_pipeline.core.evaluation.golden.cases import default_split

    bike = cases["tri-item00000001"]
    assert bike.slice == "general" and bike.split == default_split(bike.id) != "holdout"
    assert not cases["tri-item00000002"].answerable and cases["tri-item00000002"].reference == ""
