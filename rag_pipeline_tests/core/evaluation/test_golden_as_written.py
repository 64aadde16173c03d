"""The golden format as teams write it first: paths for gold documents, unanswerable cases without a
reference, one error a line, no hidden holdout, and files that are too big refused early."""

import json
import tracemalloc
from collections import Counter

import pytest

from rag_pipeline.core.bounded import InputTooLargeError
from rag_pipeline.core.evaluation.golden import lines as golden_lines
from rag_pipeline.core.evaluation.golden import validation as golden_validation
from rag_pipeline.core.evaluation.golden.cases import GoldenSetError, default_split
from rag_pipeline.core.evaluation.golden.validation import load_golden_set

# What the ledger of a team's docs site holds: the source `starlette` has its root at `docs/`.
KNOWN = {
    "starlette:middleware.md": None,
    "starlette:routing.md": None,
    "starlette:guide/testclient.md": None,
    "starlette:reference/testclient.md": None,
    "starlette:img/logo.png": "unsupported file type '.png'",
    "blog:2024/release-notes.md": None,
}
SERVED = {doc_id: "h" for doc_id, skipped in KNOWN.items() if skipped is None}


def _write(tmp_path, records, name="golden.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _case(case_id, gold, **extra):
    return {"id": case_id, "question": f"question {case_id}?", "reference": "an answer.", "gold_docs": gold, **extra}


def test_paths_from_the_source_root_or_the_repository_resolve_to_document_ids(tmp_path):
    path = _write(tmp_path, [
        _case("a", ["docs/middleware.md"]),  # relative to the repository (the source's root is docs/)
        _case("b", ["routing.md"]),  # relative to the source's root
        _case("c", ["./docs/guide/testclient.md"], gold_spans=[{"doc_id": "./docs/guide/testclient.md", "lines": [3, 9]}]),
        _case("d", ["starlette:middleware.md"], forbidden_docs=["blog/2024/release-notes.md"]),
    ])
    golden = load_golden_set(path, served_hashes=SERVED, known_documents=KNOWN)
    by_id = {c.id: c for c in golden.cases}
    assert by_id["a"].gold_docs == ("starlette:middleware.md",)
    assert by_id["b"].gold_docs == ("starlette:routing.md",)
    assert by_id["c"].gold_docs == ("starlette:guide/testclient.md",)
    assert by_id["c"].gold_spans[0].doc_id == "starlette:guide/testclient.md"
    assert by_id["d"].forbidden_docs == ("blog:2024/release-notes.md",)
    assert golden.resolved["docs/middleware.md"] == "starlette:middleware.md"
    assert "4 document path(s) resolved to ids (e.g. docs/middleware.md -> starlette:middleware.md)" in golden.summary()
    assert not golden.stale, "resolved ids are checked against the index like written ones"


def test_a_miss_says_did_you_mean_and_every_problem_has_its_own_line(tmp_path):
    path = _write(tmp_path, [
        _case("a", ["docs/middlware.md"]),  # a typo in a path
        _case("b", ["starlette:routeing.md"]),  # a typo in an id of a known source
        _case("c", ["testclient.md"]),  # two documents have this name
        _case("d", ["starlette:img/logo.png"]),
        {"id": "e", "question": "q?", "gold_docs": ["routing.md"]},  # answerable without a reference
    ])
    with pytest.raises(GoldenSetError) as excinfo:
        load_golden_set(path, served_hashes=SERVED, known_documents=KNOWN)
    lines = str(excinfo.value).split("\n")
    assert lines[0].endswith("golden.jsonl has 5 problem(s):")
    assert lines[1] == ("  golden.jsonl line 1 (a): field 'gold_docs': 'docs/middlware.md' is not a document any source "
                        "has ever held; did you mean `starlette:middleware.md`?")
    assert lines[2] == ("  golden.jsonl line 2 (b): field 'gold_docs': 'starlette:routeing.md' is not a document any "
                        "source has ever held; did you mean `starlette:routing.md`?")
    assert lines[3].startswith("  golden.jsonl line 3 (c): field 'gold_docs': 'testclient.md': ambiguous: 2 documents "
                               "named testclient.md")
    assert "line 4 (d): field 'gold_docs': 'starlette:img/logo.png' is not a document (skipped at discovery" in lines[4]
    assert lines[5] == ("  golden.jsonl line 5 (e): field 'reference': missing or empty (only an unanswerable case "
                        "may leave it out)")
    # No escaped newline, no Python class path: the text a person reads.
    assert "\\n" not in str(excinfo.value) and "GoldenSetError" not in str(excinfo.value)


def test_an_id_of_a_known_source_is_never_read_as_a_path(tmp_path):
    """`starlette:old/middleware.md` ends in a document's relative path, but it was written as an
    id: resolving it by its tail would silently label another document."""
    path = _write(tmp_path, [_case("a", ["starlette:old/middleware.md"])])
    with pytest.raises(GoldenSetError, match="'starlette:old/middleware.md' is not a document any source has ever held"):
        load_golden_set(path, served_hashes=SERVED, known_documents=KNOWN)


def test_unanswerable_cases_need_no_reference_and_no_gold(tmp_path):
    path = _write(tmp_path, [_case("a", ["routing.md"]),
                             {"id": "u", "question": "What is the office wifi password?", "answerable": False}])
    golden = load_golden_set(path, served_hashes=SERVED, known_documents=KNOWN)
    unanswerable = golden.cases[1]
    assert not unanswerable.answerable and unanswerable.reference == "" and unanswerable.gold_docs == ()


def test_a_default_split_is_never_holdout(tmp_path):
    shares = Counter(default_split(f"case-{i}") for i in range(4000))
    assert shares["holdout"] == 0
    assert 0.72 < shares["dev"] / 4000 < 0.78 and 0.22 < shares["validation"] / 4000 < 0.28
    path = _write(tmp_path, [_case(f"q{i}", ["routing.md"]) for i in range(27)] + [_case("h", ["routing.md"], split="holdout")])
    golden = load_golden_set(path, known_documents=KNOWN)
    assert [c.id for c in golden.cases if c.split == "holdout"] == ["h"], "only a case marked holdout is held out"
    assert "split (27 cases, from the id's hash: dev or validation, never holdout)" in golden.summary()


def test_a_line_over_its_bound_is_an_error_of_that_line_and_the_rest_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(golden_lines, "MAX_GOLDEN_LINE_BYTES", 2000)
    path = tmp_path / "golden.jsonl"
    huge = json.dumps(_case("big", ["routing.md"], reference="x" * 50_000))
    path.write_text(json.dumps(_case("a", ["routing.md"])) + "\n" + huge + "\n" + json.dumps(_case("c", ["nope.md"])) + "\n")
    with pytest.raises(GoldenSetError) as excinfo:
        load_golden_set(path, known_documents=KNOWN)
    message = str(excinfo.value)
    assert "golden.jsonl line 2: line longer than 2,000 bytes: refused unread" in message
    assert "golden.jsonl line 3 (c): field 'gold_docs': 'nope.md'" in message, "the lines after it are still checked"


def test_a_file_over_its_bound_is_refused_before_it_is_parsed(tmp_path):
    """A golden file of a million lines (70 MB): refused from its size, naming the file and the bound."""
    path = tmp_path / "golden.jsonl"
    line = (json.dumps(_case("c", ["routing.md"])) + "\n").encode()
    with path.open("wb") as handle:
        for _ in range(10):
            handle.write(line * 100_000)
    assert path.stat().st_size > golden_lines.MAX_GOLDEN_FILE_BYTES
    with pytest.raises(InputTooLargeError) as excinfo:
        load_golden_set(path, known_documents=KNOWN)
    assert str(path) in str(excinfo.value) and f"{golden_lines.MAX_GOLDEN_FILE_BYTES:,}-byte bound" in str(excinfo.value)


def test_too_many_cases_are_refused_at_the_line_past_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(golden_validation, "MAX_GOLDEN_CASES", 50)
    path = _write(tmp_path, [_case(f"q{i}", ["routing.md"]) for i in range(80)])
    with pytest.raises(InputTooLargeError, match=r"golden.jsonl line 51: more than 50 cases"):
        load_golden_set(path, known_documents=KNOWN)


def test_problems_listed_stop_at_their_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(golden_validation, "MAX_REPORTED_PROBLEMS", 5)
    path = _write(tmp_path, [_case(f"q{i}", ["nope.md"]) for i in range(40)])
    with pytest.raises(GoldenSetError) as excinfo:
        load_golden_set(path, known_documents=KNOWN)
    assert "has 5 problem(s) before checking stopped at golden.jsonl line 6" in str(excinfo.value)
    assert str(excinfo.value).count("\n") == 5


def test_a_long_file_is_read_in_bounded_memory(tmp_path):
    """A million lines (comments around two cases), read a line at a time: memory stays small."""
    path = tmp_path / "golden.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps(_case("a", ["routing.md"])) + "\n")
        handle.write("# a comment line\n" * 1_000_000)
        handle.write(json.dumps(_case("b", ["routing.md"])) + "\n")
    tracemalloc.start()
    try:
        golden = load_golden_set(path, known_documents=KNOWN)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [c.id for c in golden.cases] == ["a", "b"] and golden.cases[1].line == 1_000_002
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a {path.stat().st_size / 1e6:.0f} MB file"
