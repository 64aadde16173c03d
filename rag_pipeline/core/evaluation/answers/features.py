"""Features of "can the corpus answer this question?", computed from what retrieval returned.

One best-score threshold sees one signal; the abstention model (`abstention.py`) combines several, each computed per
question from what retrieval returned and from the evidence the extractive generator finds
(`question_features`); every feature is generic (no corpus, id or text of a data set in it):

- `dense_best`: best dense cosine; `dense_gap`: best minus second-best document cosine;
- `bm25_best`: log1p(best BM25 score / number of query terms), so that long questions, whose
  BM25 sums run over more terms, are comparable with short ones; `bm25_gap`: (best - second) / best;
- `top_doc_agrees`: 1 when dense and BM25 rank the same document first;
  `top_docs_overlap`: share of dense's top-5 documents that are also in BM25's top 5;
- `top_chunk_coverage`: share of the question's content terms (stemmed, without stop words and
  question words such as what/how/does) found in the first chunk of the context;
  `context_coverage`: the same over all the context chunks; `top_chunk_terms`: their count
  in the first chunk;
- `sentence_coverage`: share of the question's content terms in the best sentence, the one the
  extractive generator puts first (`answers.rank_sentences`);
- `answer_type_found` / `answer_type_missing`: the question asks for a kind of answer (how
  many/much -> a number; when/what year -> a date or duration; who -> a name; where -> a place,
  by English wh-word patterns) and the best sentence does / does not hold one that is not
  already in the question; both 0 when the question asks for no recognised kind;
- `sentence_cosine`: the best cosine between the question and one sentence of the first context
  chunk, by the retrieval's own embedder (`add_sentence_cosines`); a chunk's cosine is diluted by
  its other sentences, a sentence's is not.

A feature is NaN when the retrieval mode did not compute its signal (no dense list and no
sentence cosine in bm25 mode, no BM25 list in dense mode); a retrieval that ran and found
nothing gives zeros.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from rag_pipeline.core.evaluation.answers.generators import rank_sentences, split_sentences
from rag_pipeline.core.models import Hit
from rag_pipeline.core.retrieval.lexical import analyze, content_terms

FEATURES = (
    "dense_best", "dense_gap", "bm25_best", "bm25_gap", "top_doc_agrees", "top_docs_overlap",
    "top_chunk_coverage", "top_chunk_terms", "context_coverage", "sentence_coverage",
    "answer_type_found", "answer_type_missing", "sentence_cosine",
)


# The direction each feature is expected to point: +1 when a higher value is evidence that the
# corpus can answer, -1 when it is evidence that it cannot. Fitting keeps only features whose
# fit-split evidence agrees with their direction (`screen`), and never a weight against it.
DIRECTION = {name: 1.0 for name in FEATURES} | {"answer_type_missing": -1.0}


AGREEMENT_DEPTH = 5


# Answer types by English wh-patterns, the first that matches wins (so "how many" beats "how").
_TYPE_PATTERNS = (
    ("number", re.compile(r"\bhow (?:many|much|long|old|far|big|large|high|tall|often|fast|deep|wide|heavy)\b"
                          r"|\bwhat (?:percentage|percent|number|amount|proportion|share|fraction)\b")),
    ("date", re.compile(r"\bwhen\b|\b(?:what|which) (?:year|years|date|day|month|time|century|decade|period|era)\b")),
    ("person", re.compile(r"\bwho(?:m|se)?\b|\b(?:what|which) (?:person|people|man|woman)\b")),
    ("place", re.compile(r"\bwhere\b|\b(?:what|which) (?:country|city|state|place|region|continent|town|location)\b")),
)


_NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
                 "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand "
                 "million billion trillion dozen half quarter single double twice").split()


_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?%?|\b(?:" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


_MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday")


_DATE = re.compile(
    r"\b(?:1\d{3}|20\d{2})s?\b|\b\d{1,2}(?:st|nd|rd|th)\b|\b\d{1,2}:\d{2}\b|\b(?:" + "|".join(_MONTHS.split()) + r")\b"
    r"|\b(?:century|centuries|decade|decades|bc|ad|bce|ce|ago|today|yesterday|tomorrow|daily|weekly|monthly|yearly|annually)\b"
    r"|(?:\d+|\b(?:" + "|".join(_NUMBER_WORDS) + r"))\s*(?:-\s*)?(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?)\b",
    re.IGNORECASE,
)


_CAPITALISED = re.compile(r"(?<![\w'])[A-Z][\w'-]*")


def answer_type(question: str) -> str | None:
    """The kind of answer a question asks for: number, date, person, place, or None."""
    text = " ".join(question.lower().split())
    return next((kind for kind, pattern in _TYPE_PATTERNS if pattern.search(text)), None)


def _names(text: str, skip: set[str]) -> list[str]:
    """Capitalised words of a text not at a sentence start and not in `skip` (lower-cased)."""
    names = []
    for match in _CAPITALISED.finditer(text):
        before = text[: match.start()].rstrip()
        if not before or before[-1] in ".!?:\"'(":
            continue
        if match.group().lower() not in skip:
            names.append(match.group())
    return names


def has_answer_type(kind: str, sentence: str, question: str) -> bool:
    """Does `sentence` hold an answer of `kind` that is not already part of the question?"""
    asked = {w.lower() for w in re.findall(r"[\w'-]+", question)}
    if kind == "number":
        return any(m.group().lower().rstrip("%") not in asked for m in _NUMBER.finditer(sentence))
    if kind == "date":
        return any(m.group().lower() not in asked for m in _DATE.finditer(sentence))
    return bool(_names(sentence, asked))


def _documents(hits: Sequence[Hit], depth: int) -> list[tuple[str, float]]:
    best: dict[str, float] = {}
    for hit in hits:
        best.setdefault(hit.doc_id, hit.score)
        if len(best) == depth:
            break
    return list(best.items())


def _share(terms: Sequence[str], text_terms: set[str]) -> float:
    return sum(1 for t in terms if t in text_terms) / len(terms) if terms else 0.0


def question_features(question: str, candidates: Mapping[str, Sequence[Hit]], context: Sequence[Hit]) -> dict[str, float]:
    """The features of one question (see the module docstring): `candidates` are a retrieval
    result's per-retriever lists (`RetrievalResult.candidates`: "dense" and/or "bm25"),
    `context` the chunks handed to the generator, best first."""
    nan = float("nan")
    features = dict.fromkeys(FEATURES, nan)
    dense = candidates.get("dense")
    bm25 = candidates.get("bm25")
    if dense is not None:
        docs = _documents(dense, 2)
        features["dense_best"] = docs[0][1] if docs else 0.0
        features["dense_gap"] = docs[0][1] - docs[1][1] if len(docs) > 1 else (docs[0][1] if docs else 0.0)
    if bm25 is not None:
        docs = _documents(bm25, 2)
        best = docs[0][1] if docs else 0.0
        features["bm25_best"] = math.log1p(max(best, 0.0) / max(len(analyze(question)), 1))
        features["bm25_gap"] = (best - docs[1][1]) / best if len(docs) > 1 and best > 0 else (1.0 if best > 0 else 0.0)
    if dense is not None and bm25 is not None:
        top_dense = [d for d, _ in _documents(dense, AGREEMENT_DEPTH)]
        top_bm25 = [d for d, _ in _documents(bm25, AGREEMENT_DEPTH)]
        features["top_doc_agrees"] = float(bool(top_dense and top_bm25) and top_dense[0] == top_bm25[0])
        width = max(len(top_dense), len(top_bm25))
        features["top_docs_overlap"] = len(set(top_dense) & set(top_bm25)) / width if width else 0.0
    terms = content_terms(question)
    top_terms = set(analyze(context[0].text)) if context else set()
    features["top_chunk_coverage"] = _share(terms, top_terms)
    features["top_chunk_terms"] = float(sum(1 for t in terms if t in top_terms))
    features["context_coverage"] = _share(terms, {t for hit in context for t in analyze(hit.text)})
    ranked = rank_sentences(question, context)
    sentence = ranked[0][3] if ranked else ""
    features["sentence_coverage"] = _share(terms, set(analyze(sentence)))
    kind = answer_type(question)
    found = kind is not None and bool(sentence) and has_answer_type(kind, sentence, question)
    features["answer_type_found"] = float(found)
    features["answer_type_missing"] = float(kind is not None and not found)
    return features


def _sentences(context: Sequence[Hit]) -> list[str]:
    return split_sentences(context[0].text) if context else []


def add_sentence_cosines(questions: Sequence[str], contexts: Sequence[Sequence[Hit]],
                         features: Sequence[dict[str, float]], encode) -> None:
    """Fill `sentence_cosine` of each question's features in place: the best cosine between the
    question and a sentence of its first context chunk; `encode(texts) -> vectors` is the
    retrieval's embedder (every text encoded once, in one batch). Questions whose features have
    no `dense_best` (bm25 mode) keep NaN: their retrieval used no embedder."""
    wanted = [i for i, f in enumerate(features) if not math.isnan(f.get("dense_best", math.nan))]
    texts = list(dict.fromkeys([questions[i] for i in wanted] + [s for i in wanted for s in _sentences(contexts[i])]))
    if not texts:
        return
    vectors = np.asarray(encode(texts), dtype=float)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    row = {t: vectors[j] for j, t in enumerate(texts)}
    for i in wanted:
        sentences = _sentences(contexts[i])
        features[i]["sentence_cosine"] = max((float(row[questions[i]] @ row[s]) for s in sentences), default=0.0)


def features_for_results(questions: Sequence[str], results: Sequence, context_k: int, encode=None) -> list[dict[str, float]]:
    """The features of a batch of retrieval results (`RetrievalResult`-like: `candidates` and
    `hits`), each with its top `context_k` hits as the context; sentence cosines when `encode`."""
    contexts = [list(r.hits[:context_k]) for r in results]
    features = [question_features(q, r.candidates, c) for q, r, c in zip(questions, results, contexts, strict=True)]
    if encode is not None:
        add_sentence_cosines(questions, contexts, features, encode)
    return features
