"""Import of BEIR-format datasets: `corpus.jsonl` becomes a source, queries + qrels a golden set."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rag_pipeline.config import slugify_source_id
from rag_pipeline.core.errors import InputError

BEIR_REFERENCE = "(BEIR dataset: relevance judgements only, no reference answer)"


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """`query-id -> {corpus-id: score}` from a BEIR qrels TSV (header line, tab-separated)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t")
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
            raise InputError(f"{path}: expected a header 'query-id<TAB>corpus-id<TAB>score'")
        for line_number, row in enumerate(reader, start=2):
            if len(row) < 3:
                raise InputError(f"{path} line {line_number}: expected 3 tab-separated columns")
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def import_beir(dataset: Path, name: str, out: Path, split: str = "test") -> int:
    """Write a golden set for a BEIR dataset and, beside it, qrels with our document ids.

    Each judged query becomes one answerable case (slice `beir`, split `dev`); gold documents are
    the judged documents with score > 0, as `<source id>:<corpus id>`.
    """
    source_id = slugify_source_id(name)
    qrels = read_qrels(dataset / "qrels" / f"{split}.tsv")
    queries: dict[str, str] = {}
    with (dataset / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                queries[str(record["_id"])] = record["text"]
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with out.open("w", encoding="utf-8") as golden, out.with_suffix(".qrels").open("w", encoding="utf-8") as trec:
        for query_id, judged in qrels.items():
            gold = [f"{source_id}:{doc}" for doc, score in judged.items() if score > 0]
            if query_id not in queries or not gold:
                continue
            case = {
                "id": query_id, "question": queries[query_id], "reference": BEIR_REFERENCE, "gold_docs": gold,
                "slice": "beir", "split": "dev", "weight": 1, "tenant": None, "roles": [], "answerable": True,
                "provenance": f"BEIR {dataset.name} qrels/{split}.tsv",
            }
            golden.write(json.dumps(case) + "\n")
            for doc, score in judged.items():
                trec.write(f"{query_id} 0 {source_id}:{doc} {score}\n")
            count += 1
    return count
