"""`rag-pipeline search`: what retrieval returns for one question, with its trace."""

from __future__ import annotations

import argparse

from rag_pipeline.cli.common import configured_store, load_args, print_json
from rag_pipeline.core.render import printable


def cmd_search(args: argparse.Namespace) -> int:
    """What retrieval returns for one question, with the trace: the first look at a failed case."""
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.models import SearchFilters
    from rag_pipeline.core.retrieval.retriever import Retriever

    config, _ = load_args(args)
    store = configured_store(config, read_only=True)
    retriever = Retriever(store, make_embedder(config.embedding), config.retrieval)
    statuses = tuple(args.status.split(",")) if args.status else ("published",)
    filters = SearchFilters(tenant=args.tenant, roles=tuple(r for r in (args.roles or "").split(",") if r), statuses=statuses)
    result = retriever.search(args.query, filters, args.mode, args.k)
    if args.json:
        print_json(result.trace(depth=args.k))
        return 0
    print(f"query: {args.query!r}  mode: {result.mode}  tenant: {filters.tenant}  roles: {list(filters.roles)}")
    for hit in result.hits:
        where = " > ".join(hit.heading_path) or hit.title
        lines = f" lines {hit.line_start}-{hit.line_end}" if hit.line_start else ""
        print(f"{hit.rank:>3}. {hit.score:.4f}  {printable(hit.doc_id)}{lines}  [{printable(where)}]")
        print("      " + printable(" ".join(hit.text.split())[:160]))
    for stage, hits in result.candidates.items():
        print(f"  {stage}: " + ", ".join(f"{printable(h.doc_id)}#{h.rank}" for h in hits[:5]))
    print("  latency ms: " + ", ".join(f"{k} {v:.1f}" for k, v in result.latency_ms.items()))
    print(f"  context: {result.context_tokens} words")
    return 0
