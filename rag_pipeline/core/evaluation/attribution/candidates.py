"""The candidate causes of one case's move, in the order they are tried, each with the one change its
counterfactual undoes.

Changes that touch every case come first, as they explain everything: the case's own labels, each
recorded setting that differs, the model. Then the gold document's own fate (deleted, its text, its
chunks, who may see it). Then the documents that rank above the gold and changed: for a fall, the
new or changed ones above it now, the highest first; for a rise, those above it in the baseline
that changed or left. Last, a few other changed documents: in hybrid and BM25 retrieval a document
moves the others' scores without ranking above the gold itself (BM25's collection statistics, the
fused ranks). Documents are not tried when the model changed: a document's earlier rows hold the
earlier model's vectors, which cannot be searched beside the new ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rag_pipeline.core.evaluation.attribution.causes import (
    CONFIG_CHANGED,
    GOLD_CHANGED,
    GOLD_DELETED,
    GOLD_RECHUNKED,
    GOLDEN_CHANGED,
    MODEL_CHANGED,
    OUTRANKED,
    Cause,
)
from rag_pipeline.core.evaluation.attribution.evidence import (
    ACCESS,
    CHUNKS,
    EMBEDDING,
    PARSER,
    TEXT,
    Differences,
    Measured,
    labels_changed,
)

# Changed documents tried beyond those ranked above the gold, and candidates tried per case at most.
MAX_OTHER_DOCUMENTS = 4
MAX_CANDIDATES = 12


@dataclass(frozen=True)
class Undo:
    """One change a counterfactual undoes: `labels` (the case's baseline labels), `setting` (a key at
    its baseline value), `model` (the baseline's embedder) or `document` (served as in the baseline)."""

    kind: str
    key: str = ""

    def words(self, baseline_value: object = None) -> str:
        if self.kind == "labels":
            return "the case replayed with its labels of the baseline's golden revision"
        if self.kind == "setting" and chunking_section(self.key):
            return (f"replayed with the chunks the baseline's {self.key} made (documents whose text did not change "
                    "served in their baseline version)")
        if self.kind == "setting":
            return f"replayed with {self.key} = {baseline_value!r} (the baseline's value)"
        if self.kind == "model":
            return "replayed with the baseline's embedder (the index embedded again where it differs)"
        return f"replayed with {self.key} served as in the baseline"


def chunking_section(key: str) -> str | None:
    """`chunking` or `sources.<id>.chunking` for a key of a chunking section, else None."""
    parts = key.split(".")
    if parts[0] == "chunking":
        return "chunking"
    if len(parts) > 2 and parts[0] == "sources" and parts[2] == "chunking":
        return ".".join(parts[:3])
    return None


@dataclass(frozen=True)
class Candidate:
    cause: Cause
    undo: Undo


def candidates(base: Measured, cand: Measured, diff: Differences, scored_fields: Sequence[str],
               fell: bool) -> list[Candidate]:
    """The candidate causes of one case's move (`fell`: its metric fell, else rose), in the order
    they are tried."""
    found: list[Candidate] = []
    labels = labels_changed(base.case, cand.case, scored_fields)
    if labels:
        found.append(Candidate(Cause(GOLDEN_CHANGED, None, "; ".join(labels)), Undo("labels")))
    sections: dict[str, list[str]] = {}
    for key, (old, new) in diff.settings.items():
        if key.startswith(EMBEDDING):
            continue
        # A chunking section's keys are undone together (the baseline's chunks), so they are one candidate.
        section = chunking_section(key) or key
        sections.setdefault(section, []).append(f"{key}: {old!r} -> {new!r}")
    found += [Candidate(Cause(CONFIG_CHANGED, None, "; ".join(said)), Undo("setting", section))
              for section, said in sections.items()]
    if diff.model is not None:
        keys = [f"{k}: {old!r} -> {new!r}" for k, (old, new) in diff.settings.items() if k.startswith(EMBEDDING)]
        detail = f"embedder {diff.model[0]} -> {diff.model[1]}" + (f" ({'; '.join(keys)})" if keys else "")
        found.append(Candidate(Cause(MODEL_CHANGED, None, detail), Undo("model")))
        return found[:MAX_CANDIDATES]
    golds = sorted(set(base.case.gold_docs) | set(cand.case.gold_docs))
    found += [Candidate(_gold_cause(doc, diff), Undo("document", doc)) for doc in golds if doc in diff.changed]
    tried = set(golds)
    others: list[Candidate] = []
    for doc, detail in _above_the_gold(base, cand, diff, fell):
        if doc not in tried:
            tried.add(doc)
            others.append(Candidate(Cause(OUTRANKED, doc, detail), Undo("document", doc)))
    for doc in _others(base, cand, diff, tried)[:MAX_OTHER_DOCUMENTS]:
        others.append(Candidate(Cause(OUTRANKED, doc, _indirect(doc, base, cand, diff)), Undo("document", doc)))
    # After a parser upgrade every document is in another version, most searched as before: those
    # go last, or they would fill the candidates ahead of the one document whose chunks changed.
    found += sorted(others, key=lambda c: diff.searched_alike(c.cause.doc))
    return found[:MAX_CANDIDATES]


def _gold_cause(doc: str, diff: Differences) -> Cause:
    before, after = diff.changed[doc]
    if after is None:
        state = diff.baseline.states.get(doc.split(":", 1)[0])
        return Cause(GOLD_DELETED, doc, f"served in the baseline's index state {state.state_id if state else '?'}, "
                                        "not served now")
    if before is None:
        return Cause(GOLD_CHANGED, doc, "not served in the baseline's index state; served now")
    what = diff.what_changed(doc)
    if what is None:
        return Cause(GOLD_CHANGED, doc, "served in another version; the baseline's rows of it were not kept, so what "
                                        "changed is not known")
    old, new = diff.infos[before], diff.infos[after]
    if what == TEXT:
        return Cause(GOLD_CHANGED, doc, "its text changed; " + changed_sections(diff, doc))
    if what == ACCESS:
        fields = [f"{k} {old.access[k]!r} -> {new.access[k]!r}" for k in old.access if old.access[k] != new.access[k]]
        return Cause(GOLD_CHANGED, doc, "its text is the same; who may see it or whether it is current changed: "
                                        + "; ".join(fields))
    parser = f"; parser {old.parser_version} -> {new.parser_version}" if old.parser_version != new.parser_version else ""
    if what == CHUNKS:
        return Cause(GOLD_RECHUNKED, doc, f"the same text (content hash {new.content_hash[:12]}), other chunks: "
                                          f"{len(old.chunks)} -> {len(new.chunks)}{parser}")
    if what == PARSER:
        return Cause(GOLD_RECHUNKED, doc, f"the same text and chunks{parser}")
    return Cause(GOLD_RECHUNKED, doc, "the same text and chunks; other rows (line numbers, titles or vectors)")


def changed_sections(diff: Differences, doc: str) -> str:
    """The sections (heading paths) of a document whose text differs between its two versions."""
    before, after = diff.changed[doc]
    old, new = diff.infos[before], diff.infos[after]

    def by_section(chunks) -> dict[tuple[str, ...], set[str]]:
        out: dict[tuple[str, ...], set[str]] = {}
        for chunk in chunks:
            out.setdefault(chunk.heading_path, set()).add(chunk.text_hash)
        return out

    a, b = by_section(old.chunks), by_section(new.chunks)
    changed = [section_name(p) for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]
    return "sections changed: " + ("; ".join(changed) if changed else "none (the text moved between sections)")


def section_name(path: Sequence[str]) -> str:
    return " > ".join(path) if path else "(before the first heading)"


def _above(measured: Measured) -> list[str]:
    """The documents ranked above the case's first gold document (all ranked when none is found)."""
    rank = measured.first_gold_rank
    return measured.ranking[: rank - 1] if rank else list(measured.ranking)


def _above_the_gold(base: Measured, cand: Measured, diff: Differences, fell: bool) -> list[tuple[str, str]]:
    """(document, detail) of the changed documents above the gold: for a fall, those above it now
    (new or changed), then those above it in the baseline; for a rise, the other way round."""
    now = [(d, _outranks_now(d, i + 1, cand, diff)) for i, d in enumerate(_above(cand))
           if d in diff.changed and diff.changed[d][1] is not None]
    before = [(d, _outranked_before(d, i + 1, base, diff)) for i, d in enumerate(_above(base)) if d in diff.changed]
    return now + before if fell else before + now


def _outranks_now(doc: str, rank: int, cand: Measured, diff: Differences) -> str:
    gold = cand.first_gold_rank or "not in the top 100"
    if diff.changed[doc][0] is None:
        return f"a new document, ranked {rank} above the gold (first gold rank {gold})"
    return f"changed ({diff.what_changed(doc) or 'its rows'}), ranked {rank} above the gold (first gold rank {gold})"


def _outranked_before(doc: str, rank: int, base: Measured, diff: Differences) -> str:
    gone = "no longer served" if diff.changed[doc][1] is None else f"changed ({diff.what_changed(doc) or 'its rows'})"
    return f"ranked {rank} above the gold in the baseline (first gold rank {base.first_gold_rank}); {gone}"


def _others(base: Measured, cand: Measured, diff: Differences, tried: set[str]) -> list[str]:
    """Changed documents not yet tried: those in either ranking first, in rank order, then the rest;
    those searched as before (`Differences.searched_alike`) after all the others."""
    ranked = [d for d in dict.fromkeys([*cand.ranking, *base.ranking]) if d in diff.changed and d not in tried]
    every = ranked + sorted(d for d in diff.changed if d not in tried and d not in set(ranked))
    return sorted(every, key=diff.searched_alike)


def _indirect(doc: str, base: Measured, cand: Measured, diff: Differences) -> str:
    passed = [d for d in _above(cand) if d not in set(_above(base))]
    who = f"{passed[0]} now ranks above the gold" if passed else "the gold's rank moved"
    before, after = diff.changed[doc]
    what = "new" if before is None else "no longer served" if after is None else f"changed ({diff.what_changed(doc)})"
    return (f"{who}; {doc} ({what}) does not rank above the gold itself: its change moved the other documents' "
            "scores and ranks (BM25's collection statistics, the fused ranks)")
