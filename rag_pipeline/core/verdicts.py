"""A check's verdict as core states it: passed or not, one line, its numbers, its tables.

Every proof the pipeline makes (coverage, deletions, freshness, failed documents, golden labels,
the gate, drift) reports a `Verdict`; the Dagster layer turns each into an asset check result with
one function, so what a check says is decided here, next to the logic, and tested without Dagster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    """Rows for a markdown table (rendered, and escaped, by core/render.py)."""

    rows: Sequence[Mapping]
    columns: Sequence[str]


@dataclass(frozen=True)
class Verdict:
    passed: bool
    # One line for people; ids in it are untrusted text and are escaped where shown.
    summary: str
    numbers: Mapping[str, float | int] = field(default_factory=dict)
    tables: Mapping[str, Table] = field(default_factory=dict)
    # Markdown already built by core from trusted parts and escaped pieces (a gate table, a plot).
    markdown: Mapping[str, str] = field(default_factory=dict)
    # "WARN" where a failure is only a warning although the check is usually an error (no baseline yet).
    severity: str | None = None
    # Words beside the numbers (which proof a switch ran, and why), shown as plain text.
    texts: Mapping[str, str] = field(default_factory=dict)


def listed(ids: Sequence[str], limit: int = 5) -> str:
    """`a, b, c and 4 more`: the first few of a list, for a one-line summary."""
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
