"""The golden set's cases: what a case holds, its split and slice defaults, and the set's summary."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.verdicts import Table, Verdict, listed

SPLITS = ("dev", "validation", "holdout")
DEFAULT_SLICE = "general"
# Cumulative shares of the hash-assigned split: dev below 75, validation above; never holdout.
_SPLIT_SHARES = (("dev", 75), ("validation", 100))
_DEFAULT_RULES = {"split": "from the id's hash: dev or validation, never holdout", "slice": DEFAULT_SLICE}
# Booleans in files people fill by hand or export from spreadsheets (reviewed queue items, imports).
_BOOLEAN_WORDS = {"true": True, "yes": True, "false": False, "no": False}
BOOLEAN_VALUES = 'true or false (or the strings "true", "false", "yes", "no")'


def default_split(case_id: str) -> str:
    """The split of a case that names none: 75% dev / 25% validation by the id's sha256 (never holdout)."""
    n = int(hashlib.sha256(case_id.encode("utf-8")).hexdigest()[:8], 16) % 100
    return next(name for name, upper in _SPLIT_SHARES if n < upper)


class GoldenSetError(InputError):
    """The golden set file is invalid; the message lists every problem with its line and field."""


def parse_boolean(value: object) -> bool | None:
    """A JSON boolean, or one of the strings true / false / yes / no (any case); None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _BOOLEAN_WORDS.get(value.strip().lower())
    return None


@dataclass(frozen=True)
class GoldSpan:
    doc_id: str
    heading_path: tuple[str, ...] = ()
    lines: tuple[int, int] | None = None
    content_hash: str | None = None


@dataclass(frozen=True)
class GoldenCase:
    id: str
    question: str
    reference: str
    gold_docs: tuple[str, ...]
    slice: str
    split: str
    weight: float = 1.0
    tenant: str | None = None
    roles: tuple[str, ...] = ()
    answerable: bool = True
    gold_spans: tuple[GoldSpan, ...] = ()
    forbidden_docs: tuple[str, ...] = ()
    prohibited_claims: tuple[str, ...] = ()
    provenance: str = ""
    line: int = 0


@dataclass
class GoldenSet:
    path: Path
    revision: str
    cases: list[GoldenCase]
    stale: dict[str, list[str]] = field(default_factory=dict)
    # Field -> number of cases that did not name it and got the documented default.
    defaults_applied: dict[str, int] = field(default_factory=dict)
    # Document references written as paths -> the document ids they resolved to.
    resolved: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """e.g. `loaded 126 cases | slices: billing 34, policy 41 | weight 3 on 18 | holdout 20`,
        then `defaults applied: split (36 cases, from the id's hash), slice (36 cases: general)`
        when some cases left those fields out."""
        slices = Counter(c.slice for c in self.cases)
        weights = Counter(c.weight for c in self.cases if c.weight != 1)
        splits = Counter(c.split for c in self.cases)
        parts = [f"loaded {len(self.cases)} cases", "slices: " + ", ".join(f"{s} {n}" for s, n in sorted(slices.items()))]
        if weights:
            parts.append(", ".join(f"weight {_num(w)} on {n}" for w, n in sorted(weights.items())))
        parts.append(", ".join(f"{s} {splits[s]}" for s in SPLITS if splits[s]))
        if self.stale:
            parts.append(f"stale labels on {len(self.stale)} cases")
        if self.resolved:
            first = next(iter(self.resolved.items()))
            parts.append(f"{len(self.resolved)} document path(s) resolved to ids (e.g. {first[0]} -> {first[1]})")
        if self.defaults_applied:
            parts.append("defaults applied: " + ", ".join(
                f"{name} ({n} cases{', ' if name == 'split' else ': '}{_DEFAULT_RULES[name]})"
                for name, n in self.defaults_applied.items()))
        return " | ".join(parts)

    def labels_verdict(self) -> Verdict:
        """`golden_labels_current` (WARN): every gold document indexed, every pinned span unchanged."""
        rows = [{"case": case_id, "problem": "; ".join(problems)} for case_id, problems in self.stale.items()]
        summary = ("every gold document is indexed and every pinned span unchanged" if not self.stale else
                   f"{len(self.stale)} stale case(s), scored apart: " + listed([f"{r['case']}: {r['problem']}" for r in rows], 3))
        return Verdict(not self.stale, summary, {"stale_cases": len(self.stale), "cases": len(self.cases)},
                       {"stale": Table(rows, ["case", "problem"])})


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def file_revision(path: Path) -> str:
    """The golden-set revision: the first 12 hex digits of the file's sha256 (read in blocks)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:12]
