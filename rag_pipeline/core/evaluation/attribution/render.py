"""What a person reads about why cases moved: the report's section grouped by cause, the terminal's
short version, the line a gate check and a failure carry, a JUnit message per case, table rows.

Everything here reads the findings as stored (`CaseChange.as_json()`, `Records.case_changes`), so
the command line, the report, Dagster and JUnit say the same. Case ids, document ids and details
come from the golden set and the corpus: markdown goes through the one renderer, which escapes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from rag_pipeline.core.evaluation.attribution.causes import KINDS, UNEXPLAINED
from rag_pipeline.core.render import inline, number, printable, table

COLUMNS = ["case", "slice", "metric", "baseline", "candidate", "cause", "document", "detail", "counterfactual",
           "recovered"]


def counts(changes: Sequence[Mapping]) -> dict[str, int]:
    """Cause kind -> cases, every kind present (0 where none)."""
    found = Counter(c["cause"]["kind"] for c in changes)
    return {kind: found.get(kind, 0) for kind in KINDS}


def rows(changes: Sequence[Mapping]) -> list[dict]:
    """One flat row per case, for tables (Dagster's, markdown's)."""
    return [{"case": c["case_id"], "slice": c["slice"], "metric": c["metric"], "baseline": c["baseline"],
             "candidate": c["candidate"], "cause": c["cause"]["kind"], "document": c["cause"]["doc"] or "",
             "detail": c["cause"]["detail"], "counterfactual": _proof(c),
             "recovered": bool(c["counterfactual"] and c["counterfactual"]["recovered"])}
            for c in changes]


def _proof(change: Mapping) -> str:
    proof = change["counterfactual"]
    if proof is None:
        return f"{len(change['tried'])} candidate(s) tried, none recovers"
    return f"{proof['undone']}: {number(proof['metric'], 4)} (baseline {number(change['baseline'], 4)})"


def _cause_words(change: Mapping) -> str:
    cause = change["cause"]
    return cause["kind"] + (f" {cause['doc']}" if cause["doc"] else "")


def why_line(changes: Sequence[Mapping], limit: int = 3) -> str:
    """`why: 3 fell (gold_deleted 2: docs:a.md; outranked 1: docs:new.md), 1 rose` (plain text), or ''."""
    fell = [c for c in changes if c["delta"] < 0]
    if not changes:
        return ""
    parts = []
    for kind, n in Counter(c["cause"]["kind"] for c in fell or changes).most_common(limit):
        docs = Counter(c["cause"]["doc"] or c["cause"]["detail"].split(";")[0] for c in fell or changes
                       if c["cause"]["kind"] == kind and kind != UNEXPLAINED)
        top = docs.most_common(1)
        parts.append(f"{kind} {n}" + (f": {top[0][0]}" if top else ""))
    rose = len(changes) - len(fell)
    head = f"{len(fell)} case(s) fell" if fell else f"{rose} case(s) rose"
    tail = f", {rose} rose" if fell and rose else ""
    return printable(f"why: {head} ({'; '.join(parts)}){tail}")


def text_lines(changes: Sequence[Mapping], holdout_moved: int = 0, limit: int = 10) -> list[str]:
    """The terminal's short version: the counts by cause and the first cases, falls first."""
    if not changes and not holdout_moved:
        return ["why cases moved: no case's headline metric moved against the baseline"]
    found = [f"{kind} {n}" for kind, n in counts(changes).items() if n]
    lines = [f"why cases moved against the baseline: {len(changes)} case(s) ("
             + ", ".join(found) + ")" + (f"; {holdout_moved} holdout case(s) moved, not named" if holdout_moved else "")]
    for c in changes[:limit]:
        proof = c["counterfactual"]
        replayed = f"; undone, it replays {number(proof['metric'], 4)}" if proof else ""
        lines.append(printable(f"  {c['case_id']} [{c['slice']}] {c['metric']} {number(c['baseline'], 4)} -> "
                               f"{number(c['candidate'], 4)}: {_cause_words(c)} ({c['cause']['detail']}){replayed}"))
    if len(changes) > limit:
        lines.append(f"  ... and {len(changes) - limit} more in the report and in eval --json (case_changes)")
    return lines


def markdown_section(changes: Sequence[Mapping], baseline_id: str, holdout_moved: int = 0,
                     notes: Sequence[str] = ()) -> str:
    """The report's section: the cases that moved against the baseline, grouped by cause, each with
    the counterfactual that proves it."""
    lines = ["## Why cases moved against the baseline", ""]
    if not changes:
        lines.append(f"No case's headline metric moved against the baseline {inline(baseline_id)}."
                     + (f" {holdout_moved} holdout case(s) moved (not named: holdout stays unseen)." if holdout_moved else ""))
        return "\n".join([*lines, *(f"- {inline(n)}" for n in notes), ""])
    fell = sum(1 for c in changes if c["delta"] < 0)
    lines += [f"{len(changes)} case(s) moved against the baseline {inline(baseline_id)}: {fell} fell, "
              f"{len(changes) - fell} rose. Each cause is proven by a counterfactual: the case replayed (its own "
              "filters, the evaluation's mode and depth) with that one change undone, which brings it back to "
              "the baseline's value (or its first gold document back to the baseline's rank). A case no single "
              "undone change brings back is unexplained, with what was tried."
              + (f" {holdout_moved} holdout case(s) moved (not named)." if holdout_moved else ""), ""]
    lines += [f"- {inline(n)}" for n in notes] + ([""] if notes else [])
    grouped = counts(changes)
    order = sorted((k for k, n in grouped.items() if n), key=lambda k: (k == UNEXPLAINED, -grouped[k], KINDS.index(k)))
    for kind in order:
        mine = [c for c in changes if c["cause"]["kind"] == kind]
        lines += [f"### {kind} ({len(mine)})", "",
                  table(rows(mine), ["case", "slice", "metric", "baseline", "candidate", "document", "detail",
                                     "counterfactual"], limit=50), ""]
    return "\n".join(lines)


def junit_messages(changes: Sequence[Mapping]) -> dict[str, str]:
    """Case id -> what a JUnit report says of a case that moved (its cause and proof)."""
    out = {}
    for c in changes:
        proof = c["counterfactual"]
        proven = f"; with it undone the case replays {number(proof['metric'], 4)}" if proof else ""
        out[c["case_id"]] = printable(f"{c['metric']} {number(c['baseline'], 4)} -> {number(c['candidate'], 4)} "
                                      f"against the baseline; cause: {_cause_words(c)} ({c['cause']['detail']}){proven}")
    return out
