"""What differs between a baseline and a candidate evaluation, read from the store: each case's labels,
values and ranking, the recorded settings, the embedder, and each document's version in the index
state each evaluation measured (`IndexStates`), with what a changed version changed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rag_pipeline.config import settings_diff
from rag_pipeline.core.evaluation.golden.cases import GoldenCase
from rag_pipeline.core.evaluation.golden.lines import golden_lines
from rag_pipeline.core.evaluation.golden.validation import validate_cases
from rag_pipeline.core.evaluation.scoring import metrics
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.states import IndexState, StateError
from rag_pipeline.core.storage.versions import VersionInfo

# Settings that decide abstention or answers, never a retrieval metric: not a cause of a case's move.
NOT_RETRIEVAL = ("answers.", "retrieval.no_result_threshold", "retrieval.abstention", "retrieval.k")
EMBEDDING = "embedding."
# What a changed version changed, in the order a reader cares: its text, its chunks, who may see it,
# only the parser's version (a parser upgrade parses every document again, most into the same
# chunks), or only the rest of its rows (vectors of another model).
TEXT, CHUNKS, ACCESS, PARSER, ROWS = "text", "chunks", "access", "parser", "rows"
# A document in another version with these is searched as before: its text, chunks and who may see it
# are the same, so it cannot have moved a case (unless its vectors were made by another model).
SEARCHED_ALIKE = (PARSER, ROWS)


@dataclass(frozen=True)
class Measured:
    """One case in one evaluation: its labels, its value of every retrieval metric, its ranking."""

    case: GoldenCase
    values: dict[str, float]
    first_gold_rank: int | None
    ranking: list[str]
    scored: bool


def measured_cases(store: Store, eval_id: str, cases: Mapping[str, GoldenCase]) -> dict[str, Measured]:
    """Case id -> the case as the evaluation measured it, for answerable cases with gold documents.
    A case scored apart (stale labels: a gold document deleted) gets the values its ranking scores,
    so that a deleted gold document shows as the fall it is."""
    record = store.records.evaluation_record(eval_id)
    report_k = record.get("report_k", 5)
    out = {}
    for row in store.records.case_rows(eval_id):
        case = cases.get(row["case_id"])
        if case is None or not case.answerable or not case.gold_docs:
            continue
        ranking = list(row["ranked_docs"] or [])
        values = record["cases"].get(case.id)
        scored = bool(values)
        if not scored:
            values = metrics.query_metrics(ranking, {d: 1.0 for d in case.gold_docs}, extra_cutoffs=(report_k,))
        out[case.id] = Measured(case, dict(values), row["first_gold_rank"], ranking, scored)
    return out


def moved(baseline: Mapping[str, Measured], candidate: Mapping[str, Measured], headline: Sequence[str],
          tolerance: float = 1e-9) -> list[tuple[str, str]]:
    """(case id, metric) of each case in both whose headline metrics moved: the one that moved most
    (the first in `headline` among equals)."""
    out = []
    for case_id in sorted(set(baseline) & set(candidate)):
        b, c = baseline[case_id].values, candidate[case_id].values
        deltas = [(abs(c[m] - b[m]), -i, m) for i, m in enumerate(headline) if m in b and m in c]
        if deltas and max(deltas)[0] > tolerance:
            out.append((case_id, max(deltas)[2]))
    return out


def golden_cases(store: Store, revision: str) -> dict[str, GoldenCase] | None:
    """The cases of a golden revision from its kept text (None when it is not kept). Lines the loader
    refused when that revision was evaluated are left out here too."""
    text = store.records.golden_snapshot(revision)
    if text is None:
        return None
    records = [(f"golden revision {revision} line {line.number}", line.number, line.record)
               for line in golden_lines(text) if line.record is not None]
    cases, _ = validate_cases(records, store.ledger.document_history() or None)
    return {c.id: c for c in cases}


@dataclass
class Served:
    """The document versions an evaluation's index served: source -> doc id -> version, for each
    source whose state is known."""

    states: dict[str, IndexState]
    documents: dict[str, dict[str, str]]
    unknown: list[str] = field(default_factory=list)

    def version(self, doc_id: str) -> str | None:
        return self.documents.get(doc_id.split(":", 1)[0], {}).get(doc_id)

    def knows(self, doc_id: str) -> bool:
        return doc_id.split(":", 1)[0] not in self.unknown


def served_by(store: Store, summary: Mapping) -> Served:
    """The states an evaluation measured: those it recorded (`served_states`), or, for an evaluation
    recorded before states were, the latest state that served its manifest hash."""
    states, unknown = {}, []
    for source_id, manifest_hash in sorted((summary.get("index_state") or {}).items()):
        state = None
        recorded = (summary.get("served_states") or {}).get(source_id)
        try:
            state = store.states.get(recorded) if recorded else store.states.by_manifest(source_id, manifest_hash)
        except StateError:
            state = None
        if state is None:
            unknown.append(source_id)
        else:
            states[source_id] = state
    return Served(states, {s: store.states.documents(state) for s, state in states.items()}, unknown)


@dataclass
class Differences:
    """Everything that differs between the two evaluations."""

    baseline: Served
    candidate: Served
    settings: dict[str, list]  # key -> [baseline, candidate], retrieval-relevant keys only
    model: tuple[str, str] | None  # (baseline, candidate) embedder identity, when they differ
    changed: dict[str, tuple[str | None, str | None]]  # doc id -> (baseline version, candidate version)
    infos: dict[str, VersionInfo]
    # what_changed's answers: asked for every changed document of every case that moved.
    _what: dict[str, str | None] = field(default_factory=dict, repr=False)

    def what_changed(self, doc_id: str) -> str | None:
        """`TEXT`, `CHUNKS`, `ACCESS`, `PARSER` or `ROWS` for a document in another version on both
        sides; None for one new, deleted or unchanged."""
        if doc_id not in self._what:
            self._what[doc_id] = self._compare(doc_id)
        return self._what[doc_id]

    def _compare(self, doc_id: str) -> str | None:
        before, after = self.changed.get(doc_id, (None, None))
        old, new = self.infos.get(before or ""), self.infos.get(after or "")
        if old is None or new is None:
            return None
        if old.content_hash != new.content_hash:
            return TEXT
        if [(c.heading_path, c.text_hash) for c in old.chunks] != [(c.heading_path, c.text_hash) for c in new.chunks]:
            return CHUNKS
        if old.access != new.access:
            return ACCESS
        return PARSER if old.parser_version != new.parser_version else ROWS

    def searched_alike(self, doc_id: str) -> bool:
        """A document in another version whose text, chunks and access are those of the baseline."""
        return self.what_changed(doc_id) in SEARCHED_ALIKE

    def source_chunking_keys(self) -> set[str]:
        """Sources that chunk their own way on either side (`sources.<id>.chunking.*`)."""
        return {key.split(".")[1] for key in self.settings if key.startswith("sources.")}


def differences(store: Store, baseline: Mapping, candidate: Mapping) -> Differences:
    """What differs between two evaluation summaries (their documents' versions described only where
    they differ)."""
    before, after = served_by(store, baseline), served_by(store, candidate)
    diff = {}
    if baseline.get("settings") and candidate.get("settings"):
        own = {k.split(".")[1] for k in [*baseline["settings"], *candidate["settings"]] if k.startswith("sources.")}
        diff = {key: pair for key, pair in settings_diff(_effective(baseline["settings"], own),
                                                         _effective(candidate["settings"], own)).items()
                if not key.startswith(NOT_RETRIEVAL)}
    model = None
    if baseline.get("embedding") and candidate.get("embedding") and baseline["embedding"] != candidate["embedding"]:
        model = (baseline["embedding"], candidate["embedding"])
    changed: dict[str, tuple[str | None, str | None]] = {}
    for source_id in sorted(set(before.documents) | set(after.documents)):
        if source_id in before.unknown or source_id in after.unknown:
            continue
        old, new = before.documents.get(source_id, {}), after.documents.get(source_id, {})
        changed |= {d: (old.get(d), new.get(d)) for d in set(old) | set(new) if old.get(d) != new.get(d)}
    versions = [v for pair in changed.values() for v in pair if v]
    return Differences(before, after, diff, model, changed, store.versions.describe(versions))


def _effective(settings: Mapping[str, object], sources: set[str]) -> dict[str, object]:
    """The settings with each of `sources`' chunking spelled out: a source recorded without a chunking
    of its own chunked as the pipeline did (`chunking.*`)."""
    out = dict(settings)
    for source_id in sources:
        for key, value in settings.items():
            if key.startswith("chunking."):
                out.setdefault(f"sources.{source_id}.{key}", value)
    return out


def labels_changed(before: GoldenCase, after: GoldenCase, fields: Sequence[str]) -> list[str]:
    """The scored fields of a case that differ between two revisions, each said in a few words."""
    said = []
    for name in fields:
        old, new = getattr(before, name), getattr(after, name)
        if old == new:
            continue
        if name in ("gold_docs", "forbidden_docs", "roles"):
            said.append(f"{name} {', '.join(old) or '(none)'} -> {', '.join(new) or '(none)'}")
        elif name == "question":
            said.append(f"question {json.dumps(old)} -> {json.dumps(new)}")
        else:
            said.append(f"{name} changed")
    return said
