"""Why each case moved: the cases whose headline metric changed against the baseline, their
candidate causes tried in order by counterfactual replays (cases that wait for the same change are
replayed together, in one scratch transaction), the first that recovers claimed, and the findings
kept with the evaluation (`Records.save_case_changes`).

An evaluation with no baseline costs nothing; one in which no case moved, a read of the two
evaluations' stored case rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rag_pipeline.config import EmbeddingConfig, RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder, make_embedder
from rag_pipeline.core.evaluation.attribution.candidates import (
    Candidate,
    Undo,
    candidates,
    changed_sections,
    section_name,
)
from rag_pipeline.core.evaluation.attribution.causes import (
    GOLD_CHANGED,
    UNEXPLAINED,
    CaseChange,
    CaseChanges,
    Cause,
    Tried,
    recovered,
)
from rag_pipeline.core.evaluation.attribution.evidence import (
    TEXT,
    Differences,
    Measured,
    differences,
    golden_cases,
    measured_cases,
    moved,
)
from rag_pipeline.core.evaluation.attribution.replay import RETRIEVAL, Replayed, Setup, Untestable, replay
from rag_pipeline.core.evaluation.gating.baselines import SCORED_FIELDS
from rag_pipeline.core.evaluation.golden.holdout import withheld
from rag_pipeline.core.evaluation.scoring.metrics import query_metrics
from rag_pipeline.core.evaluation.scoring.results import EvalResult
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.states import StateError

# The metrics a replay can measure: those of a document ranking (not spans, not answers).
REPLAYABLE = frozenset(query_metrics(["d"], {"d": 1.0}, extra_cutoffs=tuple(range(1, 101))))


def explain(store: Store, result: EvalResult, baseline_id: str | None, embedder: Embedder, headline: Sequence[str],
            embedder_for: Callable[[EmbeddingConfig], Embedder] = make_embedder) -> CaseChanges | None:
    """Why the cases of `result` moved against `baseline_id` (None: no baseline, nothing to explain),
    kept with the evaluation and returned."""
    if baseline_id is None or baseline_id == result.eval_id:
        return None
    changes = attribute(store, result, baseline_id, embedder, headline, embedder_for)
    store.records.save_case_changes(result.eval_id, baseline_id, [c.as_json() for c in changes.changes])
    return changes


def attribute(store: Store, result: EvalResult, baseline_id: str, embedder: Embedder, headline: Sequence[str],
              embedder_for: Callable[[EmbeddingConfig], Embedder] = make_embedder) -> CaseChanges:
    """Every case of `result` whose headline metric moved against the baseline evaluation, with its cause."""
    baseline = store.records.evaluation_summary(baseline_id)
    candidate = store.records.evaluation_summary(result.eval_id)
    cand_cases = {r.case.id: r.case for r in result.cases}
    notes: list[str] = []
    base_cases = cand_cases if baseline["revision"] == result.revision else golden_cases(store, baseline["revision"])
    if base_cases is None:
        notes.append(f"the text of golden revision {baseline['revision']} is not kept: labels were not compared")
        base_cases = cand_cases
    before, after = measured_cases(store, baseline_id, base_cases), measured_cases(store, result.eval_id, cand_cases)
    moving = moved(before, after, [m for m in headline if m in REPLAYABLE])
    shown = [(case_id, metric) for case_id, metric in moving if not withheld(after[case_id].case)]
    if not shown:
        return CaseChanges(baseline_id, [], len(moving) - len(shown), tuple(notes))
    diff = differences(store, baseline, candidate)
    notes += _limits(baseline, diff)
    setup = Setup(store, embedder, _retrieval(candidate, result.mode), result.mode, result.report_k, diff,
                  baseline.get("settings") or {}, embedder_for, _drifted(store, candidate, notes))
    work = [_Work(case_id, metric, before[case_id], after[case_id], diff) for case_id, metric in shown]
    _search_causes(setup, work)
    changes = sorted((w.finding() for w in work),
                     key=lambda c: (not c.fell, c.delta if c.fell else -c.delta, c.case_id))
    return CaseChanges(baseline_id, changes, len(moving) - len(shown), tuple(notes))


@dataclass
class _Work:
    """One moved case on its way through its candidates."""

    case_id: str
    metric: str
    base: Measured
    cand: Measured
    diff: Differences
    tried: list[Tried] = field(default_factory=list)
    claimed: tuple[Candidate, Tried, Replayed] | None = None
    queue: list[Candidate] = field(init=False)

    def __post_init__(self) -> None:
        self.queue = candidates(self.base, self.cand, self.diff, SCORED_FIELDS, self.fell)

    @property
    def fell(self) -> bool:
        return self.cand.values[self.metric] < self.base.values[self.metric]

    @property
    def next(self) -> Candidate | None:
        return None if self.claimed or len(self.tried) >= len(self.queue) else self.queue[len(self.tried)]

    def record(self, candidate: Candidate, undone: str, replayed: Replayed | None, why_not: str) -> None:
        if replayed is None:
            self.tried.append(Tried(candidate.cause, undone, untestable=why_not))
            return
        value = replayed.values.get(self.metric)
        back = recovered(value, replayed.first_gold_rank, self.base.values[self.metric], self.base.first_gold_rank,
                         self.cand.first_gold_rank)
        tried = Tried(candidate.cause, undone, value, replayed.first_gold_rank, back)
        self.tried.append(tried)
        if back:
            self.claimed = (candidate, tried, replayed)

    def finding(self) -> CaseChange:
        common = dict(case_id=self.case_id, slice=self.cand.case.slice, metric=self.metric,
                      baseline=self.base.values[self.metric], candidate=self.cand.values[self.metric],
                      baseline_rank=self.base.first_gold_rank, candidate_rank=self.cand.first_gold_rank,
                      scored=self.base.scored and self.cand.scored, tried=tuple(self.tried))
        if self.claimed is None:
            listed = "; ".join(f"{t.cause.kind}{' ' + t.cause.doc if t.cause.doc else ''} "
                               + (f"(untestable: {t.untestable})" if t.untestable else f"({t.metric:.4g})")
                               for t in self.tried)
            detail = ("no single change undone brings it back; tried: " + listed if self.tried
                      else "nothing recorded differs between the two evaluations for this case")
            return CaseChange(**common, cause=Cause(UNEXPLAINED, None, detail), counterfactual=None)
        candidate, tried, replayed = self.claimed
        cause = _refined(candidate.cause, replayed, self.diff)
        return CaseChange(**common, cause=cause, counterfactual=Tried(cause, tried.undone, tried.metric,
                                                                      tried.first_gold_rank, True))


def _search_causes(setup: Setup, work: Sequence[_Work]) -> None:
    """Round after round, every case not yet explained tries its next candidate; cases waiting for
    the same change are replayed together."""
    while True:
        groups: dict[Undo, list[_Work]] = {}
        for w in work:
            if w.next is not None:
                groups.setdefault(w.next.undo, []).append(w)
        if not groups:
            return
        for undo, waiting in groups.items():
            undone = undo.words(setup.baseline_settings.get(undo.key))
            cases = [w.base.case if undo.kind == "labels" else w.cand.case for w in waiting]
            try:
                replays: Sequence[Replayed | None] = replay(setup, undo, cases)
                why_not = ""
            except Untestable as error:
                replays, why_not = [None] * len(waiting), str(error)
            for w, replayed in zip(waiting, replays, strict=True):
                w.record(w.next, undone, replayed, why_not)


def _refined(cause: Cause, replayed: Replayed, diff: Differences) -> Cause:
    """A changed gold document's cause, naming the section that answered the case in the baseline
    version (the chunk that ranked it in the replay) and whether its text is still there."""
    if cause.kind != GOLD_CHANGED or cause.doc is None or diff.what_changed(cause.doc) != TEXT:
        return cause
    found = replayed.gold_chunks.get(cause.doc)
    before, after = diff.changed[cause.doc]
    if found is None:
        return cause
    old = {c.chunk_id: c for c in diff.infos[before].chunks}.get(found[0])
    if old is None:
        return cause
    still = old.text_hash in {c.text_hash for c in diff.infos[after].chunks}
    where = f"the section that answered it in the baseline, '{section_name(old.heading_path)}', "
    where += "is unchanged (the text changed elsewhere)" if still else "lost that text"
    return Cause(cause.kind, cause.doc, f"{where}; {changed_sections(diff, cause.doc)}")


def _retrieval(summary: dict, mode: str) -> RetrievalConfig:
    """The retrieval settings the evaluation recorded (the defaults for any it did not)."""
    recorded = {k[len(RETRIEVAL):]: v for k, v in (summary.get("settings") or {}).items() if k.startswith(RETRIEVAL)}
    return RetrievalConfig(**{**recorded, "mode": mode})


def _drifted(store: Store, candidate: dict, notes: list[str]) -> dict:
    """Sources whose served state moved on since the candidate was evaluated (then replayed on the
    state it measured)."""
    drifted = {}
    for source_id, state_id in (candidate.get("served_states") or {}).items():
        latest = store.states.latest(source_id)
        if latest is None or latest.state_id != state_id:
            try:
                drifted[source_id] = store.states.get(state_id)
            except StateError:
                notes.append(f"{source_id}'s state {state_id} measured by the evaluation is not kept: replays use "
                             "what it serves now")
    return drifted


def _limits(baseline: dict, diff: Differences) -> list[str]:
    notes = [f"the baseline's index state of {s} is not kept: its documents were not compared"
             for s in diff.baseline.unknown]
    if not baseline.get("settings"):
        notes.append("the baseline recorded no settings (evaluated before they were recorded): settings were not compared")
    if diff.model is not None:
        notes.append("the model changed: documents were not tried one by one (their earlier rows hold the earlier "
                     "model's vectors)")
    return notes
