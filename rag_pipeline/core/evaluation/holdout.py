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

from rag_pipeline.core.evaluation.golden import default_split, file_revision

HOLDOUT = "holdout"
WITHHELD_TRACE = {"withheld": "holdout case: counted in the aggregates, its text and trace are not shown"}
WITHHELD_QUESTION = "(a holdout case: text withheld)"


def withheld(case) -> bool:
    """Whether a golden case's text must stay out of reports, traces, metadata and logs."""
    return case.split == HOLDOUT


class HoldoutError(ValueError):
    """A release names a case that is not in the file or not in holdout."""


def release_from_holdout(golden_path: Path, case_ids: Sequence[str], to_split: str = "validation") -> tuple[str, str]:
    """Rewrite the golden file with these holdout cases moved to `to_split`; (old, new revision).

    Every other line is kept byte for byte, so the diff shows only the moved cases."""
    if to_split == HOLDOUT:
        raise HoldoutError("a release moves cases out of holdout: choose dev or validation")
    wanted = set(case_ids)
    old_revision = file_revision(golden_path)
    lines = golden_path.read_text(encoding="utf-8").splitlines(keepends=True)
    found: set[str] = set()
    out = []
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            out.append(line)
            continue
        raw = json.loads(stripped)
        if raw.get("id") in wanted:
            # A case without a split is in the one its id's hash gives it (golden.default_split).
            split = raw.get("split") or default_split(raw["id"])
            if split != HOLDOUT:
                raise HoldoutError(f"{golden_path}:{number}: case {raw['id']!r} is in split {split!r}, not holdout")
            raw["split"] = to_split
            found.add(raw["id"])
            line = json.dumps(raw, ensure_ascii=False) + ("\n" if line.endswith("\n") else "")
        out.append(line)
    missing = sorted(wanted - found)
    if missing:
        raise HoldoutError(f"{golden_path}: no case {', '.join(map(repr, missing))}; nothing was changed")
    golden_path.write_text("".join(out), encoding="utf-8")
    return old_revision, file_revision(golden_path)
