"""Evaluation suites: the full golden set (nightly, releases) or a fast subset for pull requests.

The `pr` suite is deterministic and stratified by slice: each slice keeps a share of the subset
proportional to its size (at least one case), and within a slice the cases whose sha256(case id)
is smallest. A case's place depends on its id only, so adding cases to the golden set moves few
others in or out. Holdout cases never enter it: pull requests are where prompts and retrievers
are tuned, and holdout must stay unseen by tuning.

A suite is part of an evaluation's identity, with its size (`pr-30`): the gate compares a `pr`
evaluation only with a baseline promoted on the same suite and size, never with a full one nor
with a subset of another size (their aggregates would be over other cases).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import replace

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.golden.cases import GoldenSet

FULL = "full"
PR = "pr"
SUITES = (FULL, PR)


def _rank_key(case_id: str) -> str:
    return hashlib.sha256(case_id.encode("utf-8")).hexdigest()


def suite_identity(suite: str, size: int) -> str:
    """The suite as evaluations record it: `full`, or `pr-<size>`."""
    return FULL if suite == FULL else f"{suite}-{size}"


def select_suite(golden: GoldenSet, suite: str, size: int) -> GoldenSet:
    """The golden set restricted to `suite` (`full` returns it unchanged)."""
    if suite == FULL:
        return golden
    if suite != PR:
        raise InputError(f"unknown suite {suite!r}; use one of {', '.join(SUITES)}")
    if size < 1:
        raise InputError(f"the pr suite needs a size of at least 1 (evaluation.pr_subset_size), got {size}")
    eligible = [c for c in golden.cases if c.split != "holdout"]
    by_slice: dict[str, list] = defaultdict(list)
    for case in eligible:
        by_slice[case.slice].append(case)
    quota = {name: min(len(cases), max(1, round(size * len(cases) / max(len(eligible), 1))))
             for name, cases in by_slice.items()}
    chosen = {c.id for name, cases in by_slice.items() for c in sorted(cases, key=lambda c: _rank_key(c.id))[: quota[name]]}
    # Cases keep the file's order, so traces and reports read like the full suite's.
    return replace(golden, cases=[c for c in golden.cases if c.id in chosen])
