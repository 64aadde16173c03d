"""After a parser upgrade every document of the source is served in a new version, most with the same
chunks: attribution tells those apart from the one whose chunks changed, and tries that one first."""

from __future__ import annotations

from rag_pipeline.core.evaluation.attribution.candidates import MAX_CANDIDATES, candidates
from rag_pipeline.core.evaluation.attribution.causes import GOLD_RECHUNKED, OUTRANKED
from rag_pipeline.core.evaluation.attribution.evidence import CHUNKS, PARSER, Differences, Measured, Served
from rag_pipeline.core.evaluation.golden.cases import GoldenCase
from rag_pipeline.core.storage.versions import ChunkRow, VersionInfo

OLD, NEW = "beir-jsonl", "beir-jsonl 2"


def _version(doc: str, side: str, parser: str, text_hash: str) -> VersionInfo:
    return VersionInfo(f"{doc}@{side}", doc, "corpus", f"bytes of {doc}", parser, {},
                       (ChunkRow(f"{doc}#0", (), text_hash),))


def _upgrade(docs: list[str], rechunked: str) -> Differences:
    """Every document re-parsed by a new parser version; only `rechunked` got other chunks."""
    infos = {}
    for doc in docs:
        infos[f"{doc}@old"] = _version(doc, "old", OLD, f"text of {doc}")
        infos[f"{doc}@new"] = _version(doc, "new", NEW, f"cut text of {doc}" if doc == rechunked else f"text of {doc}")
    return Differences(Served({}, {}), Served({}, {}), {}, None, {d: (f"{d}@old", f"{d}@new") for d in docs}, infos)


def _case(ranking: list[str], gold_rank: int) -> Measured:
    case = GoldenCase("q1", "a question", "a reference", ("corpus:gold",), "all", "test")
    return Measured(case, {"ndcg_at_10": 0.5}, gold_rank, ranking, True)


def test_documents_with_the_same_chunks_go_after_the_one_the_upgrade_chunked_otherwise():
    # Twenty documents rank above the gold, all re-parsed with the same chunks; the document the upgrade
    # read otherwise ranks below the gold and moved the case through BM25's statistics and the fused ranks.
    above = [f"corpus:d{i:02}" for i in range(20)]
    ranking = [*above, "corpus:gold", "corpus:cut"]
    diff = _upgrade([*above, "corpus:gold", "corpus:cut"], rechunked="corpus:cut")
    assert diff.what_changed("corpus:cut") == CHUNKS
    assert diff.what_changed("corpus:d00") == PARSER and diff.searched_alike("corpus:d00")
    assert not diff.searched_alike("corpus:cut")

    found = candidates(_case(ranking, 20), _case(ranking, 21), diff, ("gold_docs",), fell=True)

    assert len(found) == MAX_CANDIDATES
    gold, first_other = found[0].cause, found[1].cause
    assert (gold.kind, gold.doc) == (GOLD_RECHUNKED, "corpus:gold")
    assert gold.detail == f"the same text and chunks; parser {OLD} -> {NEW}"
    # Without the order, the documents above the gold filled every place and this one was never tried.
    assert (first_other.kind, first_other.doc) == (OUTRANKED, "corpus:cut")
    assert [c.cause.doc for c in found[2:]] == above[: MAX_CANDIDATES - 2]
