"""Why it moved, measured: single changes of every kind injected into a real corpus with its golden set,
each run baseline -> change -> evaluation -> attribution, and the cause found for every case that
moved compared with the change injected. Written to docs/performance.md with `--page`.

    python benchmarks/attribution.py [--dataset ../shared/datasets/beir-scifact] [--per-kind 50] [--docs 1500]
                                     [--work DIR] [--page]

The corpus: BEIR SciFact's 300 test queries with their judged abstracts, and other abstracts drawn
with a fixed seed up to `--docs` documents (one BEIR source, each abstract one chunk, as BEIR
sources are chunked); the golden set: the project's own import of the queries and qrels. The
embedder: the hashing one, in hybrid mode (BM25 and dense fused): what is measured is whether the
cause found is the change made, which does not depend on what the vectors mean, and the model and
chunking kinds embed the corpus again at every injection, which the real model could not do 100
times in an affordable run on two cores.

The changes, one at a time, from the same baseline (promoted once), each undone before the next:

- `gold_deleted`: a judged abstract removed from the corpus file.
- `gold_changed`: a judged abstract edited: the words of its query removed from its title and text.
- `gold_rechunked`: a parser upgrade that reads one judged abstract otherwise, its bytes unchanged:
  its title no longer read, or its text cut after half its sentences. The product re-chunks a
  document whose bytes did not change only when the run sees its chunking settings (per source: the
  config has no per-path override) or its parser's version change, and a chunking change re-chunks
  the whole source (that is `config_changed`). So the benchmark stands in for the new parser: the
  BEIR reader under a new version string, whose output differs for that one record; every stage
  after it (re-parsing the source, chunking, embedding, the switch) is the product's own, and every
  other document is served in a new version with the same chunks.
- `outranked`: a new abstract (or an unjudged one edited) that states a query's question.
- `config_changed`: one retrieval setting (k1, b, rrf_k, a fusion weight, candidates, the mode), or
  the source's chunking, changed in the config.
- `model_changed`: the embedder's dimension changed (its identity with it), the corpus embedded again.
- `golden_changed`: one case's gold document replaced, in a new golden revision, by a document that
  ranked 2 to 20 for it.

The truth for each case that moved: the injected kind for a case whose own labels, gold document,
settings or model changed; for a case whose gold document did not change but that moved with a
changed document, `outranked` naming that document (it outranks the gold, no longer does, or moved
the others' scores). Correct: the cause's kind and document (or setting key) are those.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from performance_page import machine_load, write_section  # noqa: E402

from rag_pipeline.api import duckdb_store, import_beir, ingest_source, make_embedder  # noqa: E402
from rag_pipeline.config import (  # noqa: E402
    ChunkingConfig,
    EmbeddingConfig,
    PipelineConfig,
    RetrievalConfig,
    SourceConfig,
)
from rag_pipeline.core.evaluation.attribution.attribute import explain  # noqa: E402
from rag_pipeline.core.evaluation.attribution.causes import RECOVERY_TOLERANCE, UNEXPLAINED  # noqa: E402
from rag_pipeline.core.evaluation.evaluate import run_golden_evaluation  # noqa: E402
from rag_pipeline.core.evaluation.golden.beir import read_qrels  # noqa: E402
from rag_pipeline.core.evaluation.golden.cases import file_revision  # noqa: E402
from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision  # noqa: E402
from rag_pipeline.core.ingestion import parsing  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

SOURCE = "scifact"
HEADLINE = ("recall_at_5", "mrr_at_10", "ndcg_at_10")
KINDS = ("gold_deleted", "gold_changed", "gold_rechunked", "outranked", "config_changed", "model_changed",
         "golden_changed")
# Injections tried per kind at most, to find `--per-kind` that moved at least one case.
MAX_TRIES = 4


@dataclass
class Tally:
    """One kind's injections and what attribution said of the cases they moved."""

    tried: int = 0
    effective: int = 0
    moved: int = 0
    correct: int = 0
    unexplained: int = 0
    unproven: int = 0
    seconds: list[float] = field(default_factory=list)
    wrong: Counter = field(default_factory=Counter)


class Bench:
    def __init__(self, dataset: Path, work: Path, docs: int, seed: int = 7) -> None:
        self.work = work
        self.rng = random.Random(seed)
        qrels = read_qrels(dataset / "qrels" / "test.tsv")
        records = [json.loads(line) for line in (dataset / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
                   if line.strip()]
        gold = {d for judged in qrels.values() for d in judged}
        others = sorted(r["_id"] for r in records if r["_id"] not in gold)
        chosen = gold | set(self.rng.sample(others, max(0, docs - len(gold))))
        self.records = {r["_id"]: r for r in records if r["_id"] in chosen}
        self.corpus = work / "corpus" / "corpus.jsonl"
        self.corpus.parent.mkdir(parents=True)
        self.write_corpus(self.records)
        self.golden = work / "golden.jsonl"
        import_beir(dataset, SOURCE, self.golden)
        self.golden_text = self.golden.read_text(encoding="utf-8")
        self.cases = {c["id"]: c for c in map(json.loads, self.golden_text.splitlines())}
        self.source = SourceConfig(name=SOURCE, path=self.corpus, kind="beir")
        self.config = PipelineConfig(sources=(self.source,), embedding=EmbeddingConfig(kind="hashing"))
        self.embedder = make_embedder(self.config.embedding)
        self.store = duckdb_store(work / "index.duckdb")
        self.last: datetime | None = None
        self.ingest()
        self.base = self.evaluate()
        self.store.records.promote(self.base.revision, self.base.eval_id, "benchmark baseline")
        self.ranked = {r.case.id: r.ranked_docs for r in self.base.cases}

    # ---- the pipeline, as the asset runs it -------------------------------------------------------

    def write_corpus(self, records: dict) -> None:
        self.corpus.write_text("".join(json.dumps(r) + "\n" for r in records.values()), encoding="utf-8")

    def ingest(self, embedder=None, source: SourceConfig | None = None) -> None:
        source = source or self.source
        ingest_source(source, self.store, embedder or self.embedder, source.effective_chunking(self.config.chunking),
                      self.config.lifecycle, "bench")

    def evaluate(self, config: PipelineConfig | None = None, embedder=None):
        config = config or self.config
        while self.last is not None and datetime.now(UTC).replace(microsecond=0, tzinfo=None) <= self.last:
            time.sleep(0.05)  # an evaluation's id holds its second
        path = golden_file_for_revision(self.golden, self.store, file_revision(self.golden), self.work / "revisions")
        _, result = run_golden_evaluation(path, self.store, embedder or self.embedder, config.retrieval,
                                          config.retrieval_fingerprint(), config.source_ids,
                                          settings=config.retrieval_settings())
        self.last = result.created_at.replace(microsecond=0)
        return result

    def attribute(self, result, embedder=None) -> tuple[list, float]:
        started = time.perf_counter()
        changes = explain(self.store, result, self.base.eval_id, embedder or self.embedder, HEADLINE)
        return changes.changes, time.perf_counter() - started

    # ---- the injections: (label, truth for a case) and the undo ----------------------------------

    def gold_docs(self) -> list[str]:
        docs = sorted({d.split(":", 1)[1] for c in self.cases.values() for d in c["gold_docs"]})
        self.rng.shuffle(docs)
        return docs

    def doc_truth(self, kind: str, doc: str):
        doc_id = f"{SOURCE}:{doc}"

        def truth(case_id: str) -> tuple[str, str]:
            own = doc_id in self.cases[case_id]["gold_docs"]
            return (kind, doc_id) if own else ("outranked", doc_id)
        return truth

    def inject(self, kind: str, n: int):
        """The n-th injection of a kind: yields once the changed evaluation, then undoes the change."""
        return getattr(self, f"_{kind}")(n)

    def _gold_deleted(self, n: int):
        doc = self._gold_order[n]
        self.write_corpus({k: v for k, v in self.records.items() if k != doc})
        self.ingest()
        yield self.evaluate(), self.doc_truth("gold_deleted", doc), None
        self.write_corpus(self.records)
        self.ingest()

    def _gold_changed(self, n: int):
        doc = self._gold_order[n]
        words = {w.lower() for c in self.cases.values() if f"{SOURCE}:{doc}" in c["gold_docs"]
                 for w in re.findall(r"\w+", c["question"])}
        edited = {**self.records[doc]}
        for key in ("title", "text"):
            edited[key] = " ".join(w for w in edited[key].split() if re.sub(r"\W", "", w).lower() not in words) or "-"
        self.write_corpus({**self.records, doc: edited})
        self.ingest()
        yield self.evaluate(), self.doc_truth("gold_changed", doc), None
        self.write_corpus(self.records)
        self.ingest()

    def _gold_rechunked(self, n: int):
        doc, doc_id = self._gold_order[n], f"{SOURCE}:{self._gold_order[n]}"
        with _upgraded_parser(doc_id, n):
            self.ingest()
            yield self.evaluate(), self.doc_truth("gold_rechunked", doc), None
        self.ingest()

    def _outranked(self, n: int):
        case = self.cases[self._case_order[n]]
        judged = {d.split(":", 1)[1] for c in self.cases.values() for d in c["gold_docs"]}
        filler = self.records[self.rng.choice(sorted(set(self.records) - judged))]
        if n % 2 == 0:  # a new abstract
            doc = f"injected-{n}"
            record = {"_id": doc, "title": case["question"], "text": f"{case['question']} {filler['text'][:300]}"}
        else:  # an unjudged abstract edited to state the question
            doc = filler["_id"]
            record = {**filler, "text": f"{case['question']} {filler['text']}"}
        self.write_corpus({**self.records, doc: record})
        self.ingest()
        doc_id = f"{SOURCE}:{doc}"
        yield self.evaluate(), (lambda case_id: ("outranked", doc_id)), None
        self.write_corpus(self.records)
        self.ingest()

    def _config_changed(self, n: int):
        key, value = self._settings[n]
        if key == "chunking":
            source = self.source.model_copy(update={"chunking": value})
            config = self.config.model_copy(update={"sources": (source,)})
            self.ingest(source=source)
            result = self.evaluate(config)
            yield result, (lambda case_id: ("config_changed", f"sources.{SOURCE}.chunking")), None
            self.ingest()
            return
        config = self.config.model_copy(update={"retrieval": RetrievalConfig(**{key: value})})
        yield self.evaluate(config), (lambda case_id: ("config_changed", f"retrieval.{key}")), None

    def _model_changed(self, n: int):
        embedding = EmbeddingConfig(kind="hashing", dimension=self._dimensions[n])
        embedder = make_embedder(embedding)
        self.ingest(embedder)
        config = self.config.model_copy(update={"embedding": embedding})
        yield self.evaluate(config, embedder), (lambda case_id: ("model_changed", None)), embedder
        self.ingest()

    def _golden_changed(self, n: int):
        case_id = self._case_order[n]
        case = self.cases[case_id]
        ranked = [d for d in self.ranked[case_id][1:20] if d not in case["gold_docs"]] or [
            d for d in self.ranked[case_id] if d not in case["gold_docs"]]
        lines = [json.dumps({**c, "gold_docs": [ranked[0]]}) if c["id"] == case_id else json.dumps(c)
                 for c in self.cases.values()]
        self.golden.write_text("\n".join(lines) + "\n", encoding="utf-8")
        yield self.evaluate(), (lambda moved_id: ("golden_changed", None) if moved_id == case_id else ("none", None)), None
        self.golden.write_text(self.golden_text, encoding="utf-8")

    def plan(self, per_kind: int) -> None:
        """The order injections are drawn in (a fixed seed)."""
        self._gold_order = self.gold_docs()
        self._case_order = sorted(self.cases)
        self.rng.shuffle(self._case_order)
        settings = ([("bm25_k1", v) for v in (0.3, 0.5, 0.7, 1.2, 1.5, 2.0, 3.0)]
                    + [("bm25_b", v) for v in (0.0, 0.2, 0.3, 0.6, 0.75, 0.9, 1.0)]
                    + [("rrf_k", v) for v in (1, 2, 5, 10, 20, 30, 100, 200, 500)]
                    + [("dense_weight", v) for v in (0.0, 0.25, 0.5, 0.75, 1.5, 2.0, 4.0)]
                    + [("bm25_weight", v) for v in (0.0, 0.25, 0.5, 0.75, 1.5, 2.0, 4.0)]
                    + [("candidates", v) for v in (200, 400)] + [("mode", "bm25"), ("mode", "dense")]
                    + [("chunking", ChunkingConfig(strategy="fixed", max_tokens=t, overlap_tokens=o, min_tokens=0,
                                                   breadcrumbs=False, merge_thin=False))
                       for t in (24, 32, 48, 64, 96, 128, 200) for o in (0, 8)])
        self.rng.shuffle(settings)
        self._settings = settings
        self._dimensions = [d for d in range(32, 1200, 16) if d != self.config.embedding.dimension]
        self.rng.shuffle(self._dimensions)


@contextmanager
def _upgraded_parser(doc_id: str, n: int) -> Iterator[None]:
    """Within the block, the BEIR reader is a parser upgrade that reads one record otherwise: its version
    string is new (so the run parses the whole source again, as after any parser upgrade) and its output
    differs for `doc_id` alone, whose bytes are unchanged: its title no longer read (even `n`), or its text
    cut after the first half of its sentences (odd `n`). The stages after the parser are the product's."""
    read, version = parsing._parse_beir_record, parsing.BEIR_PARSER

    def upgraded(item):
        parsed = read(item)  # under the new version string, read at call time
        if item.doc_id != doc_id:
            return parsed
        title = [e for e in parsed.elements if e.category == "Title"]
        body = [e for e in parsed.elements if e.category != "Title"]
        if n % 2 == 0 and title and body:
            elements = [replace(e, ordinal=i, heading_path=()) for i, e in enumerate(body)]
        else:
            elements = [*title, *(replace(e, text=_first_half(e.text)) for e in body)]
        return replace(parsed, elements=tuple(elements))

    parsing._parse_beir_record, parsing.BEIR_PARSER = upgraded, f"{version}; upgraded {n}"
    try:
        yield
    finally:
        parsing._parse_beir_record, parsing.BEIR_PARSER = read, version


def _first_half(text: str) -> str:
    """The first half of a text's sentences (of its words, for a single sentence)."""
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    pieces = sentences if len(sentences) > 1 else text.split()
    return " ".join(pieces[: max(1, len(pieces) // 2)])


def judge(change, truth) -> str:
    """`correct`, `unexplained` or what was said instead."""
    kind, target = truth(change.case_id)
    cause = change.cause
    if cause.kind == UNEXPLAINED:
        return "unexplained"
    if cause.kind != kind:
        return f"{cause.kind} for {kind}"
    if kind == "config_changed":
        return "correct" if cause.detail.startswith(target) else f"{cause.detail.split(':')[0]} for {target}"
    return "correct" if cause.doc == target else f"{cause.kind} {cause.doc} for {target}"


def proven(change) -> bool:
    """A claimed cause's counterfactual brings the case back (its value, or its first gold rank)."""
    proof = change.counterfactual
    if proof is None or not proof.recovered or proof.metric is None:
        return False
    return (abs(proof.metric - change.baseline) <= RECOVERY_TOLERANCE
            or (proof.first_gold_rank == change.baseline_rank and change.baseline_rank != change.candidate_rank))


def run(bench: Bench, per_kind: int, log, kinds: tuple[str, ...] = KINDS) -> dict[str, Tally]:
    bench.plan(per_kind)
    tallies = {}
    for kind in kinds:
        tally = tallies[kind] = Tally()
        n = 0
        while tally.effective < per_kind and tally.tried < per_kind * MAX_TRIES:
            steps = bench.inject(kind, n)
            n += 1
            try:
                result, truth, embedder = next(steps)
            except IndexError:  # no more targets of this kind
                break
            tally.tried += 1
            changes, seconds = bench.attribute(result, embedder)
            for _ in steps:  # undo the change
                pass
            if not changes:
                continue
            tally.effective += 1
            tally.seconds.append(seconds)
            for change in changes:
                tally.moved += 1
                verdict = judge(change, truth)
                tally.correct += verdict == "correct"
                tally.unexplained += verdict == "unexplained"
                if verdict not in ("correct", "unexplained"):
                    tally.wrong[f"{change.cause.kind} for {truth(change.case_id)[0]}"] += 1
                if verdict != "correct":
                    log(f"  {kind}: case {change.case_id} {verdict}: {change.cause.detail[:300]}")
                tally.unproven += change.cause.kind != UNEXPLAINED and not proven(change)
            log(f"{kind} #{tally.effective} ({n} tried): {len(changes)} case(s) moved, "
                f"{tally.correct}/{tally.moved} correct so far, attribution {seconds:.1f} s")
    return tallies


def render(tallies: dict[str, Tally], bench: Bench, minutes: float) -> str:
    rows = []
    total = Tally()
    for kind, t in tallies.items():
        rows.append(f"| `{kind}` | {t.effective} of {t.tried} | {t.moved} | {_share(t.correct, t.moved)} | "
                    f"{_share(t.unexplained, t.moved)} | {t.unproven} | {_median(t.seconds)} |")
        for name in ("tried", "effective", "moved", "correct", "unexplained", "unproven"):
            setattr(total, name, getattr(total, name) + getattr(t, name))
        total.seconds += t.seconds
        total.wrong.update(t.wrong)
    wrong = "; ".join(f"{what} ({n})" for what, n in total.wrong.most_common(8)) or "none"
    return f"""BEIR SciFact: the 300 test queries and {len(bench.records):,} abstracts (every judged one, the others drawn
with a fixed seed), one BEIR source (each abstract one chunk), the hashing embedder, hybrid retrieval;
the golden set imported from the qrels. One baseline evaluated and promoted, then each change alone:
injected, ingested, evaluated, attributed (`core/evaluation/attribution/`), undone. A case is counted
when one of the gate's headline metrics ({', '.join(HEADLINE)}) moved; its truth is the change injected
(`outranked` naming the changed document for a case whose gold did not change). The kinds and the
injections are described in `benchmarks/attribution.py`. {minutes:.0f} minutes in all.

| change injected | injections that moved a case (of tried) | cases moved | top-1 cause correct | unexplained | causes claimed whose counterfactual does not recover | attribution, median per injection |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}
| **all** | **{total.effective} of {total.tried}** | **{total.moved}** | **{_share(total.correct, total.moved)}** | **{_share(total.unexplained, total.moved)}** | **{total.unproven}** | {_median(total.seconds)} |

Wrong causes (claimed, proven by their replay, but not the change injected): {wrong}.
"""


def _share(part: int, whole: int) -> str:
    return f"{part} ({part / whole:.1%})" if whole else "–"


def _median(values: list[float]) -> str:
    if not values:
        return "–"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "datasets" / "beir-scifact")
    parser.add_argument("--per-kind", type=int, default=50, help="injections that moved a case, per kind")
    parser.add_argument("--docs", type=int, default=1500, help="abstracts in the corpus (every judged one included)")
    parser.add_argument("--work", type=Path, help="a folder for the store (default: a temporary one)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="the kinds to inject, comma-separated (a subset "
                        "is printed only, never written to the page)")
    parser.add_argument("--page", action="store_true", help="write the section of docs/performance.md "
                        "(without it: print only)")
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"--kinds: unknown kind(s) {', '.join(sorted(unknown))}; the kinds are {', '.join(KINDS)}")
    started, load_at_start = time.monotonic(), os.getloadavg()

    def log(line: str) -> None:
        print(f"[{(time.monotonic() - started) / 60:5.1f} min] {line}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        bench = Bench(args.dataset, work, args.docs)
        log(f"baseline {bench.base.eval_id}: {len(bench.records)} abstracts, {len(bench.cases)} cases")
        tallies = run(bench, args.per_kind, log, kinds)
        body = render(tallies, bench, (time.monotonic() - started) / 60).rstrip() + "\n\n" + machine_load(load_at_start)
        bench.store.close()
    print(body)
    if args.page and kinds == KINDS:
        write_section("Why it moved: causes of a case's move, proven by replays", body)
    unproven = sum(t.unproven for t in tallies.values())
    return 0 if unproven == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
