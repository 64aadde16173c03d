"""`release-holdout` reads a golden file as the loader does, and writes one the loader reads."""

import json

import pytest

from rag_pipeline.core.evaluation.golden.holdout import HoldoutError, release_from_holdout
from rag_pipeline.core.evaluation.golden.validation import load_golden_set


def _case(case_id: str, split: str) -> str:
    return json.dumps({"id": case_id, "question": f"{case_id}?", "reference": "r.", "gold_docs": ["hb:leave.md"],
                       "split": split})


def test_a_release_keeps_comments_and_reads_a_byte_order_mark(tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_text("\ufeff# reviewed 2024-05\n" + _case("h1", "holdout") + "\n" + _case("d1", "dev") + "\n",
                    encoding="utf-8")
    old, new = release_from_holdout(path, ["h1"])
    assert old != new
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# reviewed 2024-05" and lines[2] == _case("d1", "dev")
    assert {c.id: c.split for c in load_golden_set(path).cases} == {"h1": "validation", "d1": "dev"}


def test_a_release_refuses_a_line_the_loader_refuses(tmp_path):
    path = tmp_path / "golden.jsonl"
    text = _case("h1", "holdout") + "\n{oops\n"
    path.write_text(text)
    with pytest.raises(HoldoutError, match=r"golden.jsonl line 2: invalid JSON .*nothing was changed"):
        release_from_holdout(path, ["h1"])
    assert path.read_text() == text
