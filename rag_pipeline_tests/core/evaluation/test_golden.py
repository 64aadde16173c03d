import json

import pytest

from rag_pipeline.core.evaluation.golden.cases import GoldenSetError, file_revision
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline_tests.conftest import SAMPLE_CONFIG


def _case(**overrides):
    case = {"id": "c1", "question": "How long is parental leave?", "reference": "20 weeks.",
            "gold_docs": ["hb:leave.md"], "slice": "exact_fact", "split": "dev", "answerable": True}
    case.update(overrides)
    return json.dumps(case)


def _write(tmp_path, lines):
    path = tmp_path / "golden.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: invalid JSON"),
        (_case(id="c1"), "field 'id': duplicate id 'c1' (first on line 1)"),
        (_case(id="c2", question="  "), "field 'question': missing or empty"),
        (_case(id="c2", question="\u200b \ufeff"), "field 'question': missing or empty"),  # only invisible characters
        (_case(id="c2", reference=""), "field 'reference': missing or empty (only an unanswerable case may leave it out)"),
        (_case(id="c2", reference=["20 weeks"]), "field 'reference': must be a string, not a list"),
        (_case(id="c2", colour="red"), "field 'colour': not a field of a golden case; check the spelling"),
        (_case(id="c2", gold_docs=[]), "field 'gold_docs': an answerable case needs at least one gold document"),
        (_case(id="c2", answerable=False), "field 'gold_docs': an unanswerable case must have no gold documents"),
        (_case(id="c2", split="train"), "field 'split': 'train' is not one of dev, validation, holdout"),
        (_case(id="c2", weight=0), "field 'weight'"),
        (_case(id="c2", gold_spans=[{"doc_id": "hb:other.md"}]), "not among the case's gold_docs"),
        # json.dumps writes NaN and Infinity, and json.loads reads them: weighted metrics would be nan.
        (_case(id="c2", weight=float("nan")), "field 'weight': must be a finite positive number, not NaN"),
        (_case(id="c2", weight=float("inf")), "field 'weight': must be a finite positive number, not Infinity"),
        (_case(id="c2", tenant=5), "field 'tenant': must be a tenant name (a string), not 5"),
        (_case(id="c2", roles=[1, None]), "field 'roles': must be a list of role names (strings), not [1, null]"),
        (_case(id="c2", forbidden_docs="hb:x.md"), 'field \'forbidden_docs\': must be a list of document ids (strings), '
                                                   'not "hb:x.md"'),
        (_case(id=123), "field 'id': must be a string, not a number (123)"),
    ],
)
def test_bad_lines_are_refused_with_line_and_field(tmp_path, line, message):
    path = _write(tmp_path, [_case(), line])
    with pytest.raises(GoldenSetError) as excinfo:
        load_golden_set(path)
    assert message in str(excinfo.value)
    assert "golden.jsonl line 2" in str(excinfo.value)


def test_every_problem_is_listed_at_once(tmp_path):
    path = _write(tmp_path, [_case(), "{oops", _case(id="c3", split="train")])
    with pytest.raises(GoldenSetError, match="2 problem"):
        load_golden_set(path)


def test_stale_labels_are_reported_not_raised(tmp_path):
    path = _write(tmp_path, [_case(), _case(id="c2", gold_docs=["hb:deleted.md", "hb:leave.md"])])
    golden = load_golden_set(path, served_hashes={"hb:leave.md": "h1"})
    assert golden.stale == {"c2": ["hb:deleted.md: not in the index"]}
    assert "stale labels on 1 cases" in golden.summary()
    pinned = _case(id="c3", gold_spans=[{"doc_id": "hb:leave.md", "lines": [3, 5], "content_hash": "h0"}])
    path.write_text(path.read_text() + pinned + "\n")
    golden = load_golden_set(path, served_hashes={"hb:leave.md": "h1"})
    assert golden.stale["c3"] == ["hb:leave.md: changed since its span (lines 3-5) was pinned"]


def test_summary_and_revision(tmp_path):
    path = _write(tmp_path, [_case(), _case(id="c2", slice="policy", weight=3, split="holdout"),
                             _case(id="c3", answerable=False, gold_docs=[], slice="unanswerable")])
    golden = load_golden_set(path)
    assert golden.summary() == (
        "loaded 3 cases | slices: exact_fact 1, policy 1, unanswerable 1 | weight 3 on 1 | dev 2, holdout 1"
    )
    assert golden.revision == file_revision(path) and len(golden.revision) == 12
    path.write_text(path.read_text() + _case(id="c4") + "\n")
    assert file_revision(path) != golden.revision


def test_the_sample_golden_set_is_valid_and_covers_every_slice():
    from rag_pipeline.config import load_config

    config = load_config(SAMPLE_CONFIG)
    golden = load_golden_set(config.golden_set)
    slices = {c.slice for c in golden.cases}
    assert {"exact_fact", "paraphrase", "identifier", "multi_doc", "table_lookup", "superseded", "permissioned",
            "contradiction", "unanswerable"} <= slices
    assert len(golden.cases) >= 60
    denied = [c for c in golden.cases if c.slice == "permissioned" and not c.answerable]
    assert len(denied) >= 4 and all(c.forbidden_docs for c in denied)


KNOWN = {"hb:leave.md": None, "hb:deleted.md": None, "hb:logo.png": "unsupported file type '.png'"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"gold_docs": ["hb:leeve.md"]}, "'hb:leeve.md' is not a document any source has ever held; did you mean `hb:leave.md`?"),
        ({"gold_docs": ["wiki:leave.md"]}, "no source 'wiki' has been ingested"),
        ({"gold_docs": ["hb:logo.png"]}, "'hb:logo.png' is not a document (skipped at discovery: unsupported file type"),
        ({"gold_docs": ["hb:leave.md"], "forbidden_docs": ["hb:nope.md"]}, "field 'forbidden_docs': 'hb:nope.md'"),
    ],
)
def test_ids_no_source_ever_held_are_errors_not_stale(tmp_path, overrides, message):
    path = _write(tmp_path, [_case(), _case(id="c2", **overrides)])
    with pytest.raises(GoldenSetError) as excinfo:
        load_golden_set(path, served_hashes={"hb:leave.md": "h"}, known_documents=KNOWN)
    assert message in str(excinfo.value) and "golden.jsonl line 2 (c2)" in str(excinfo.value)


def test_a_document_deleted_since_stays_stale(tmp_path):
    path = _write(tmp_path, [_case(), _case(id="c2", gold_docs=["hb:deleted.md"])])
    golden = load_golden_set(path, served_hashes={"hb:leave.md": "h"}, known_documents=KNOWN)
    assert golden.stale == {"c2": ["hb:deleted.md: not in the index"]}


def test_prohibited_claims_load_and_a_bad_value_names_its_line(tmp_path):
    path = tmp_path / "golden.jsonl"
    good = {"id": "a", "question": "How long is parental leave?", "reference": "20 weeks", "gold_docs": ["hb:leave.md"],
            "prohibited_claims": ["Parental leave is 24 weeks."]}
    bad = {"id": "b", "question": "Refunds?", "reference": "14 days", "gold_docs": ["hc:refunds.html"],
           "prohibited_claims": "Refunds take 30 days."}
    path.write_text(json.dumps(good) + "\n")
    assert load_golden_set(path).cases[0].prohibited_claims == ("Parental leave is 24 weeks.",)
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(GoldenSetError, match=r"line 2 \(b\): field 'prohibited_claims': must be a list"):
        load_golden_set(path)


def test_a_byte_order_mark_and_comment_lines_are_read_like_any_line(tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_text("\ufeff# curated by the support team\n" + _case() + "\n  # c2 waits for the new policy\n"
                    + _case(id="c2") + "\n", encoding="utf-8")
    golden = load_golden_set(path)
    assert [(c.id, c.line) for c in golden.cases] == [("c1", 2), ("c2", 4)]
    assert golden.revision == file_revision(path), "the revision stays the hash of the file's bytes"


def test_a_line_breaks_only_at_a_newline(tmp_path):
    # json.dumps(ensure_ascii=False), as `golden accept` writes, keeps U+2028 raw; str.splitlines breaks there.
    path = tmp_path / "golden.jsonl"
    path.write_text(json.dumps(json.loads(_case(question="Leave\u2028policy?")), ensure_ascii=False) + "\n",
                    encoding="utf-8")
    assert load_golden_set(path).cases[0].question == "Leave\u2028policy?"
