"""Holdout stays held out: its cases count in every aggregate, and appear nowhere else.

A holdout case's question, reference, answer and retrieved texts are never written to a report,
a stored trace, Dagster metadata or a log; its row in the store keeps the metrics and ranking the
gate needs (paired comparisons over cases), with the trace replaced by `WITHHELD_TRACE`. Moving a
case out of holdout is an explicit command (`rag-pipeline golden release-holdout`) that writes a
new golden revision and records who moved which case, when and why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.golden.cases import default_split, file_revision
from rag_pipeline.core.evaluation.golden.lines import read_golden_lines

HOLDOUT = "holdout"
WITHHELD_TRACE = {"withheld": "holdout case: counted in the aggregates, its text and trace are not shown"}
WITHHELD_QUESTION = "(a holdout case: text withheld)"


def withheld(case) -> bool:
    """Whether a golden case's text must stay out of reports, traces, metadata and logs."""
    return case.split == HOLDOUT


class HoldoutError(InputError):
    """A release names a case that is not in the file or not in holdout."""


def release_from_holdout(golden_path: Path, case_ids: Sequence[str], to_split: str = "validation") -> tuple[str, str]:
    """Rewrite the golden file with these holdout cases moved to `to_split`; (old, new revision).

    Every other line is kept as it was (comments too; a byte-order mark is dropped), so the diff
    shows only the moved cases."""
    if to_split == HOLDOUT:
        raise HoldoutError("a release moves cases out of holdout: choose dev or validation")
    wanted = set(case_ids)
    old_revision = file_revision(golden_path)
    found: set[str] = set()
    out = []
    # The loader's own line reader: comments and a BOM are read alike, so the new file loads.
    for line in read_golden_lines(golden_path):
        if line.error is not None:
            raise HoldoutError(f"{golden_path} line {line.number}: {line.error}; fix the line, nothing was changed")
        raw, text = line.record, line.text
        if raw is not None and raw.get("id") in wanted:
            # A case without a split is in the one its id's hash gives it (golden.default_split).
            split = raw.get("split") or default_split(raw["id"])
            if split != HOLDOUT:
                raise HoldoutError(f"{golden_path} line {line.number}: case {raw['id']!r} is in split {split!r}, "
                                   "not holdout; nothing was changed")
            raw["split"] = to_split
            found.add(raw["id"])
            text = json.dumps(raw, ensure_ascii=False) + ("\n" if text.endswith("\n") else "")
        out.append(text)
    missing = sorted(wanted - found)
    if missing:
        raise HoldoutError(f"{golden_path}: no case {', '.join(map(repr, missing))}; nothing was changed")
    golden_path.write_text("".join(out), encoding="utf-8")
    return old_revision, file_revision(golden_path)
