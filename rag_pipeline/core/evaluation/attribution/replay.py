"""Counterfactual replays: cases searched again as the evaluation searched them (their own caller
filters, the same mode and depth, documents ranked the same way), with one change undone, inside
`Store.scratch()`: a transaction that is always rolled back, so nothing of it is ever served."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from rag_pipeline.config import EmbeddingConfig, RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.evaluation.attribution.candidates import Undo, chunking_section
from rag_pipeline.core.evaluation.attribution.evidence import CHUNKS, EMBEDDING, SEARCHED_ALIKE, Differences
from rag_pipeline.core.evaluation.golden.cases import GoldenCase
from rag_pipeline.core.evaluation.scoring import metrics
from rag_pipeline.core.evaluation.scoring.ranking import EVAL_DEPTH, case_filters, ranked_documents
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.states import IndexState, StateError

RETRIEVAL = "retrieval."


class Untestable(Exception):
    """The counterfactual cannot be made; the message says why."""


@dataclass(frozen=True)
class Replayed:
    """A case as the replay measured it: its metrics, its first gold document's rank, and for each
    gold document found, the chunk that ranked it (id, heading path)."""

    values: dict[str, float]
    first_gold_rank: int | None
    gold_chunks: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)


@dataclass
class Setup:
    """What the candidate evaluation ran with, and what differs from the baseline."""

    store: Store
    embedder: Embedder
    retrieval: RetrievalConfig
    mode: str
    report_k: int
    diff: Differences
    baseline_settings: Mapping[str, object]
    # Builds an embedder from settings (the baseline's, for a model that changed).
    embedder_for: Callable[[EmbeddingConfig], Embedder]
    # Sources whose served state moved on since the candidate was evaluated: served as it was first.
    drifted: dict[str, IndexState] = field(default_factory=dict)


def replay(setup: Setup, undo: Undo, cases: Sequence[GoldenCase]) -> list[Replayed]:
    """Each case replayed with `undo` undone (raises Untestable when it cannot be)."""
    try:
        with setup.store.scratch() as view:
            for source_id, state in setup.drifted.items():
                view.states.restore(source_id, state)
            embedder, retrieval, mode = _undone(setup, view, undo)
            return search(view, embedder, retrieval, mode, cases, setup.report_k)
    except StateError as error:
        raise Untestable(str(error)) from error


def search(store: Store, embedder: Embedder, retrieval: RetrievalConfig, mode: str, cases: Sequence[GoldenCase],
           report_k: int) -> list[Replayed]:
    """The cases searched and scored as `evaluate` searches and scores them."""
    retriever = Retriever(store, embedder, retrieval)
    questions, filters = [c.question for c in cases], [case_filters(c) for c in cases]
    results = retriever.search_many(questions, filters, mode, EVAL_DEPTH)
    rankings = ranked_documents(retriever, questions, filters, results, mode)
    out = []
    for case, result, ranking in zip(cases, results, rankings, strict=True):
        docs = [d for d, _ in ranking]
        relevant = {d: 1.0 for d in case.gold_docs}
        chunks: dict[str, tuple[str, tuple[str, ...]]] = {}
        for hit in result.hits:
            if hit.doc_id in relevant and hit.doc_id not in chunks:
                chunks[hit.doc_id] = (hit.chunk_id, tuple(hit.heading_path))
        out.append(Replayed(metrics.query_metrics(docs, relevant, extra_cutoffs=(report_k,)),
                            metrics.first_relevant_rank(docs, relevant), chunks))
    return out


def _undone(setup: Setup, view: Store, undo: Undo) -> tuple[Embedder, RetrievalConfig, str]:
    """Undo one change in `view`; the embedder, retrieval settings and mode to replay with."""
    if undo.kind == "labels":  # the caller replays the baseline's case: nothing else differs
        return setup.embedder, setup.retrieval, setup.mode
    if undo.kind == "document":
        source_id = undo.key.split(":", 1)[0]
        view.versions.serve(source_id, {undo.key: setup.diff.changed[undo.key][0]})
        return setup.embedder, setup.retrieval, setup.mode
    if undo.kind == "model":
        return _without_model_change(setup, view), setup.retrieval, setup.mode
    old = setup.baseline_settings.get(undo.key)
    if undo.key.startswith(RETRIEVAL):
        name = undo.key[len(RETRIEVAL):]
        try:
            retrieval = RetrievalConfig(**{**setup.retrieval.model_dump(), name: old})
        except (ValidationError, TypeError) as error:
            raise Untestable(f"the baseline's {undo.key} ({old!r}) is not a valid value here: {error}") from error
        return setup.embedder, retrieval, str(old) if name == "mode" else setup.mode
    if chunking_section(undo.key):
        _serve_earlier_chunks(setup, view, undo.key)
        return setup.embedder, setup.retrieval, setup.mode
    raise Untestable(f"no replay undoes {undo.key}")


def _serve_earlier_chunks(setup: Setup, view: Store, key: str) -> None:
    """Documents chunked again (same text, other chunks) served with their baseline chunks: the
    chunking of the baseline, where the text did not change. `sources.<id>.chunking` concerns that
    source; `chunking` the sources that chunk as the pipeline does."""
    diff = setup.diff
    own = diff.source_chunking_keys()
    sources = {key.split(".")[1]} if key.startswith("sources.") else None
    wanted: dict[str, dict[str, str | None]] = {}
    for doc, (before, _) in diff.changed.items():
        source_id = doc.split(":", 1)[0]
        if (source_id in sources if sources is not None else source_id not in own) and diff.what_changed(doc) == CHUNKS:
            wanted.setdefault(source_id, {})[doc] = before
    if not wanted:
        raise Untestable(f"no document was chunked again under {key}")
    for source_id, versions in sorted(wanted.items()):
        view.versions.serve(source_id, versions)


def _without_model_change(setup: Setup, view: Store) -> Embedder:
    """The baseline's embedder, over an index whose vectors it made: documents whose text and chunks
    did not change served in their baseline version (their rows hold its vectors), every other chunk
    embedded again by it."""
    fields = {k[len(EMBEDDING):]: v for k, v in setup.baseline_settings.items() if k.startswith(EMBEDDING)}
    identity = setup.diff.model[0] if setup.diff.model else ""
    try:
        embedder = setup.embedder_for(EmbeddingConfig(**fields))
    except (ValidationError, TypeError, OSError, ValueError) as error:
        raise Untestable(f"the baseline's embedder cannot be built here: {error}") from error
    if embedder.identity != identity:
        raise Untestable(f"the baseline's embedder cannot be built again: its settings make {embedder.identity}, "
                         f"it was {identity} (the model's files changed under the same name)")
    by_source: dict[str, dict[str, str | None]] = {}
    for doc, (before, after) in setup.diff.changed.items():
        if before and after and setup.diff.what_changed(doc) in SEARCHED_ALIKE:
            by_source.setdefault(doc.split(":", 1)[0], {})[doc] = before
    for source_id, versions in sorted(by_source.items()):
        view.versions.serve(source_id, versions)
    rest = view.versions.chunks_not_embedded_by(identity)
    if rest:
        view.versions.replace_vectors([(c, s) for c, s, _ in rest], identity, embedder.encode([t for _, _, t in rest]))
    return embedder
