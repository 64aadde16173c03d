"""Run files in and out: TREC runs and qrels for trec_eval-style tools, and other systems' rankings.

Out (`write_trec_run`, `write_qrels`): one line per ranked document, `qid Q0 docid rank score tag`,
and one per gold document, `qid 0 docid 1`. The score is the retrieval score of the document (its
best chunk's), made strictly decreasing down the ranking where two are equal, too close for a
32-bit float to tell apart (pytrec_eval reads scores so), or a deeper search's document scores
above one before it: such a score is set to the 32-bit float just under the one before (about
6e-8 of it lower), so that a tool that sorts by score, as trec_eval does, reads the ranking the
metrics were computed on. The tag names the evaluation (its id holds the golden revision, suite,
mode and config fingerprint).

In (`read_run`), another system's ranking of the golden questions, either
- a TREC run: `qid Q0 docid rank score tag`, ranked as trec_eval ranks it (score descending, ties by
  document id descending); or
- JSON Lines: one object per case, `id` (or `case_id`, `qid`, `query_id`; or the `question`
  itself, matched to a golden question), the ranked documents in `ranked_docs` (or `doc_ids`,
  `documents`, `retrieved`, `contexts_ids`) as ids or objects with `doc_id` / `id` and `score`,
  optionally `scores`, `answer`, `abstained`, `latency_ms` and `tag` (the system's name).

The run's tags (the TREC tag column, the JSONL `tag` fields) say whose run it is: they are kept
(the first MAX_RUN_TAGS distinct ones, with the count of all) and named with the run file in the
report and on the terminal.

Document references in a run are resolved like golden references (doc_refs.py): ids as they are,
paths relative to a source's root or the repository to ids. Reading is streamed and bounded: a
file over MAX_RUN_FILE_BYTES is refused, a line over MAX_RUN_LINE_BYTES is an error of that line,
and only the first MAX_RUN_DEPTH documents of a case are kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag_pipeline.core.evaluation.golden.cases import GoldenCase, GoldenSetError
from rag_pipeline.core.evaluation.golden.doc_refs import Resolver
from rag_pipeline.core.evaluation.golden.lines import bounded_lines

MAX_RUN_FILE_BYTES = 512 * 1024 * 1024
MAX_RUN_LINE_BYTES = 4 * 1024 * 1024
# Documents kept per case: the metrics look at 100 (Recall@100).
MAX_RUN_DEPTH = 100
MAX_RUN_PROBLEMS = 20
MAX_RUN_TAGS = 5
# Distinct tags counted at most (a run with a tag per line must not hold them all in memory).
MAX_COUNTED_TAGS = 1000
_ID_KEYS = ("id", "case_id", "qid", "query_id")
_RANKING_KEYS = ("ranked_docs", "doc_ids", "documents", "retrieved", "contexts_ids")


class RunFileError(GoldenSetError):
    """A run file that cannot be scored; the message names the file, the line and what to do."""


# ---- out ---------------------------------------------------------------------------------------


def decreasing_scores(scores: Sequence[float | None], length: int) -> list[float]:
    """Scores for `length` ranked documents that strictly decrease, also when read as 32-bit floats:
    each as given unless it is not below the one before in 32 bits (then the 32-bit float just under
    it); a missing score is rank-derived."""
    out: list[float] = []
    for rank in range(length):
        score = scores[rank] if rank < len(scores) and scores[rank] is not None else None
        if score is None or not math.isfinite(score):
            score = float(length - rank) if not out else out[-1] - 1.0
        if out and np.float32(score) >= np.float32(out[-1]):
            score = float(np.nextafter(np.float32(out[-1]), np.float32(-np.inf)))
        out.append(float(score))
    return out


def write_trec_run(rankings: Iterable[tuple[str, Sequence[str], Sequence[float] | None]], out: Path, tag: str) -> Path:
    """`qid Q0 docid rank score tag` for every (case id, ranked documents, scores or None) ranking."""
    tag = "".join(tag.split()) or "rag_pipeline"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for case_id, docs, scores in rankings:
            for rank, (doc_id, score) in enumerate(zip(docs, decreasing_scores(scores or [], len(docs))), start=1):
                handle.write(f"{case_id} Q0 {doc_id} {rank} {score!r} {tag}\n")
    return out


def write_qrels(cases: Iterable[GoldenCase], out: Path) -> Path:
    """`qid 0 docid 1` for every gold document of every answerable case (the run's judgements)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for case in cases:
            for doc_id in case.gold_docs:
                handle.write(f"{case.id} 0 {doc_id} 1\n")
    return out


# ---- in ----------------------------------------------------------------------------------------


@dataclass
class ExternalRun:
    """Another system's rankings of the golden cases, read from a run file."""

    path: Path
    format: str
    rankings: dict[str, list[tuple[str, float | None]]] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)
    abstained: dict[str, bool] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    # Queries of the run that are no golden case (ignored), and document references kept as written.
    unknown_queries: list[str] = field(default_factory=list)
    unresolved_docs: dict[str, str] = field(default_factory=dict)
    # The run's distinct tags in the order met (the first MAX_RUN_TAGS) and how many there were
    # (up to MAX_COUNTED_TAGS).
    tags: list[str] = field(default_factory=list)
    tag_count: int = 0
    seen_tags: set[str] = field(default_factory=set, repr=False)

    def add_tag(self, tag: object) -> None:
        if (isinstance(tag, str) and tag.strip() and tag.strip() not in self.seen_tags
                and len(self.seen_tags) < MAX_COUNTED_TAGS):
            self.seen_tags.add(tag.strip())
            self.tag_count += 1
            if len(self.tags) < MAX_RUN_TAGS:
                self.tags.append(tag.strip())

    def identity(self) -> dict:
        """Whose run this is: the file's name, its format and its tags (stored with the evaluation)."""
        return {"file": self.path.name, "format": self.format, "tags": list(self.tags), "tag_count": self.tag_count}

    def summary(self, cases: Sequence[GoldenCase]) -> str:
        missing = [c.id for c in cases if c.id not in self.rankings and c.id not in self.abstained]
        parts = [f"run {describe_run(self.identity())}: {len(self.rankings)} of {len(cases)} cases ranked"]
        if missing:
            parts.append(f"{len(missing)} case(s) absent from the run, scored as retrieving nothing (e.g. {missing[0]})")
        if self.unknown_queries:
            parts.append(f"{len(self.unknown_queries)} query id(s) not in the golden set, ignored (e.g. "
                         f"{self.unknown_queries[0]})")
        if self.unresolved_docs:
            ref, why = next(iter(self.unresolved_docs.items()))
            parts.append(f"{len(self.unresolved_docs)} document reference(s) match no known document and count as "
                         f"not relevant (e.g. {ref}: {why})")
        if self.answers:
            parts.append(f"{len(self.answers)} answer(s) kept with the traces")
        return " | ".join(parts)


def describe_run(identity: Mapping) -> str:
    """`run.trec (TREC, tag vendor-x)`: whose run an evaluation scored, from `ExternalRun.identity()`."""
    tags = list(identity.get("tags") or [])
    more = int(identity.get("tag_count") or len(tags)) - len(tags)
    named = ("tag " if len(tags) == 1 else "tags ") + ", ".join(tags) + (f" and {more} more" if more > 0 else "")
    kind = {"trec": "TREC", "jsonl": "JSON Lines"}.get(str(identity.get("format")), str(identity.get("format")))
    return f"{identity.get('file')} ({kind}, {named if tags else 'no tag'})"


def read_run(path: Path | str, cases: Sequence[GoldenCase], resolver: Resolver | None = None) -> ExternalRun:
    """Read a TREC or JSONL run of the golden cases (see the module docstring); RunFileError names
    every bad line (up to MAX_RUN_PROBLEMS)."""
    path = Path(path)
    if not path.is_file():
        raise RunFileError(f"run file {path} does not exist")
    lines = bounded_lines(path, MAX_RUN_LINE_BYTES, MAX_RUN_FILE_BYTES, what="run file")
    first = None
    buffered = []
    for item in lines:
        buffered.append(item)
        if item[1] is not None and item[1].strip():
            first = item[1].lstrip()
            break
    if first is None:
        raise RunFileError(f"run file {path} holds no ranking")
    every = _chain(buffered, lines)
    run = ExternalRun(path, "jsonl" if first.startswith("{") else "trec")
    problems: list[str] = []
    reader = _read_jsonl if run.format == "jsonl" else _read_trec
    reader(every, run, cases, problems)
    if problems:
        raise RunFileError(f"run file {path} has {len(problems)} problem(s)"
                           + (" (the first ones)" if len(problems) >= MAX_RUN_PROBLEMS else "") + ":\n  "
                           + "\n  ".join(problems))
    _resolve(run, resolver)
    return run


def _chain(first: list, rest: Iterable) -> Iterable:
    yield from first
    yield from rest


def _problem(problems: list[str], path: Path, number: int, text: str) -> bool:
    """Record a problem; True when enough are listed to stop reading."""
    problems.append(f"{path.name} line {number}: {text}")
    return len(problems) >= MAX_RUN_PROBLEMS


def _text_lines(lines, path: Path, problems: list[str]) -> Iterator[tuple[int, str]]:
    """The lines that hold text, numbered; an unreadable one is a problem, and reading stops
    once enough problems are listed."""
    for number, text, error in lines:
        if error is not None:
            if _problem(problems, path, number, error):
                return
        elif text.strip():
            yield number, text


def _read_trec(lines, run: ExternalRun, cases: Sequence[GoldenCase], problems: list[str]) -> None:
    known = {c.id for c in cases}
    scored: dict[str, dict[str, float]] = {}
    unknown: dict[str, None] = {}
    for number, text in _text_lines(lines, run.path, problems):
        fields = text.split()
        if len(fields) != 6:
            if _problem(problems, run.path, number, f"expected 6 fields `qid Q0 docid rank score tag`, got {len(fields)}"):
                return
            continue
        qid, _, doc_id, _, score_text, tag = fields
        run.add_tag(tag)
        try:
            score = float(score_text)
        except ValueError:
            if _problem(problems, run.path, number, f"score {score_text!r} is not a number"):
                return
            continue
        if not math.isfinite(score):
            if _problem(problems, run.path, number, f"score {score_text!r} is not a finite number"):
                return
            continue
        if qid not in known:
            unknown.setdefault(qid)
            continue
        docs = scored.setdefault(qid, {})
        docs[doc_id] = max(score, docs.get(doc_id, -math.inf))
    run.unknown_queries = list(unknown)
    for qid, docs in scored.items():
        # trec_eval's order: score descending, ties by document id descending.
        ranked = sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)[:MAX_RUN_DEPTH]
        run.rankings[qid] = [(d, s) for d, s in ranked]


def _read_jsonl(lines, run: ExternalRun, cases: Sequence[GoldenCase], problems: list[str]) -> None:
    by_id = {c.id for c in cases}
    by_question: dict[str, list[str]] = {}
    for case in cases:
        by_question.setdefault(" ".join(case.question.lower().split()), []).append(case.id)
    for number, text in _text_lines(lines, run.path, problems):
        try:
            record = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            if _problem(problems, run.path, number, f"invalid JSON ({getattr(exc, 'msg', 'nested too deeply')})"):
                return
            continue
        if not isinstance(record, dict):
            if _problem(problems, run.path, number, f"expected a JSON object, got {type(record).__name__}"):
                return
            continue
        case_id, why = _case_of(record, by_id, by_question)
        if case_id is None:
            if why is not None and _problem(problems, run.path, number, why):
                return
            if why is None:
                run.unknown_queries.append(str(next((record[k] for k in _ID_KEYS if k in record), record.get("question"))))
            continue
        ranking, why = _ranking_of(record)
        if why is not None:
            if _problem(problems, run.path, number, f"case {case_id!r}: {why}"):
                return
            continue
        if case_id in run.rankings:
            if _problem(problems, run.path, number, f"case {case_id!r} ranked twice"):
                return
            continue
        run.rankings[case_id] = ranking[:MAX_RUN_DEPTH]
        run.add_tag(record.get("tag"))
        if isinstance(record.get("answer"), str) and record["answer"].strip():
            run.answers[case_id] = record["answer"]
        if isinstance(record.get("abstained"), bool):
            run.abstained[case_id] = record["abstained"]
        latency = record.get("latency_ms")
        if isinstance(latency, (int, float)) and not isinstance(latency, bool) and math.isfinite(latency):
            run.latency_ms[case_id] = float(latency)


def _case_of(record: Mapping, by_id: set[str], by_question: Mapping[str, list[str]]) -> tuple[str | None, str | None]:
    """(golden case id, None); (None, None) for a query that is no golden case; (None, why) for a bad
    record, or a question several cases ask (as different callers: the id must say which)."""
    for key in _ID_KEYS:
        if key in record:
            value = record[key]
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                return None, f"field {key!r}: must be a case id (a string)"
            return (str(value), None) if str(value) in by_id else (None, None)
    question = record.get("question") or record.get("query")
    if isinstance(question, str):
        found = by_question.get(" ".join(question.lower().split()), [])
        if len(found) > 1:
            return None, f"the question of {len(found)} cases ({', '.join(found[:3])}): give the case's `id`"
        return (found[0], None) if found else (None, None)
    return None, f"no case id ({' / '.join(_ID_KEYS)}) and no question"


def _ranking_of(record: Mapping) -> tuple[list[tuple[str, float | None]], str | None]:
    key = next((k for k in _RANKING_KEYS if k in record), None)
    if key is None:
        return [], None if record.get("abstained") is True else f"no ranked documents ({' / '.join(_RANKING_KEYS)})"
    items = record[key]
    if not isinstance(items, list):
        return [], f"field {key!r}: must be a list of document ids"
    scores = record.get("scores")
    if scores is not None and (not isinstance(scores, list) or len(scores) != len(items)):
        return [], "field 'scores': must be a list as long as the ranked documents"
    ranking: list[tuple[str, float | None]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        doc_id, score = item, scores[index] if scores is not None else None
        if isinstance(item, dict):
            doc_id, score = item.get("doc_id", item.get("id")), item.get("score", score)
        if not isinstance(doc_id, str) or not doc_id.strip():
            return [], f"field {key!r}[{index}]: must be a document id (a string)"
        if score is not None and (not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score)):
            return [], f"field {key!r}[{index}]: score {json.dumps(score)} is not a finite number"
        if doc_id not in seen:  # a document counts once, at its first rank
            seen.add(doc_id)
            ranking.append((doc_id.strip(), None if score is None else float(score)))
    return ranking, None


def _resolve(run: ExternalRun, resolver: Resolver | None) -> None:
    """Document references to ids where they are paths; what matches nothing is kept as written."""
    if resolver is None or not resolver.documents:
        return
    cache: dict[str, str] = {}
    for case_id, ranking in run.rankings.items():
        resolved: list[tuple[str, float | None]] = []
        seen: set[str] = set()
        for ref, score in ranking:
            if ref not in cache:
                doc_id, how = resolver.document_id(ref)
                cache[ref] = doc_id or ref
                if doc_id is None:
                    run.unresolved_docs[ref] = how
            doc_id = cache[ref]
            if doc_id not in seen:
                seen.add(doc_id)
                resolved.append((doc_id, score))
        run.rankings[case_id] = resolved
