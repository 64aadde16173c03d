"""Gold spans: whether a retrieved chunk covers one, and the share of a case's spans covered.

Gold is tied to documents and their lines or headings, never to chunk ids, so a change of chunker
is scored fairly.
"""

from __future__ import annotations

from collections.abc import Sequence

from rag_pipeline.core.evaluation.golden.cases import GoldSpan
from rag_pipeline.core.models import Hit


def span_hit(span: GoldSpan, hit: Hit) -> bool:
    """A chunk covers a gold span when it is in the span's document and their lines overlap, or,
    for spans without lines, when one heading path is a prefix of the other."""
    if hit.doc_id != span.doc_id:
        return False
    if span.lines and hit.line_start is not None and hit.line_end is not None:
        return hit.line_start <= span.lines[1] and span.lines[0] <= hit.line_end
    if span.heading_path:
        shorter = min(len(span.heading_path), len(hit.heading_path))
        return shorter > 0 and tuple(span.heading_path[:shorter]) == tuple(hit.heading_path[:shorter])
    return True


def span_recall(spans: Sequence[GoldSpan], hits: Sequence[Hit], k: int) -> float:
    """Share of gold spans covered by at least one of the top-k chunks."""
    return sum(1 for s in spans if any(span_hit(s, h) for h in hits[:k])) / len(spans)
