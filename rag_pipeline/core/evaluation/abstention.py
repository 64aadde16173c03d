"""Abstention that knows: a small, fitted model of "the corpus cannot answer this question".

One best-score threshold sees one signal. This model combines several, each computed per
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

The model, with label y = 1 for answerable and 0 for "the corpus cannot answer":

    p(answerable | x) = sigmoid(b + sum_j w_j * (x_j - mu_j) / s_j)

mu_j and s_j are the mean and standard deviation of feature j on the fit split; a missing value
counts as mu_j (standardised 0). The model keeps the subset of features it was fitted on:

1. available: not missing (NaN) from every fit case, not constant there;
2. screened: its fit-split AUC (the chance that an answerable case has a higher value than an
   unanswerable one, ties half), oriented by its `DIRECTION`, exceeds 0.5 by at least `min_z`
   standard errors (Hanley-McNeil's null SE, sqrt((n1 + n0 + 1) / (12 n1 n0))). With weak,
   correlated signals and few fit cases, features without evidence of their own only let the
   fit chase noise, and collinear ones flip sign between samples. When none passes, the single
   feature with the highest oriented AUC is kept and `fitted_on["evidence"]` is False (the
   evaluation then keeps its single no-result threshold);
3. signed: after a fit, a feature whose weight points against its direction is dropped and the
   fit repeated.

w and b minimise the class-balanced, L2-penalised log loss

    L(w, b) = sum_i c_i * [-y_i log p_i - (1 - y_i) log(1 - p_i)] + (l2 / 2) * |w|^2,
    c_i = 1 / (2 * n_{y_i})   (each class weighs one half; the intercept is not penalised),

by Newton's method with step halving, from w = 0, b = 0: no randomness, the same data gives the
same model. The decision: abstain when p < threshold, the threshold chosen on the fit split to
maximise balanced accuracy (midpoints between adjacent fit scores; ties go to the one nearest
0.5, the balanced-loss boundary).

Scoring convention (`table`): the 2x2 of (answerable, unanswerable) x (answered, abstained);
abstain rate = abstained unanswerable / unanswerable, false abstention = abstained answerable /
answerable, balanced accuracy = (abstain rate + (1 - false abstention)) / 2. `curve` sweeps the
threshold and gives both rates at every distinct score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rag_pipeline.core.evaluation.answers import rank_sentences, split_sentences
from rag_pipeline.core.models import Hit
from rag_pipeline.core.retrieval.lexical import analyze

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
MODEL_VERSION = 1

# Words that make a question a question, not what it is about (stemmed like the index's terms).
_QUESTION_WORDS = frozenset(analyze(
    "what which who whom whose when where why how do does did done can could would should shall may might "
    "must am have has had i me my we us our you your name kind type many much"
))

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


def _content_terms(question: str) -> list[str]:
    return [t for t in dict.fromkeys(analyze(question)) if t not in _QUESTION_WORDS]


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
    terms = _content_terms(question)
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


def _matrix(features: Sequence[Mapping[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[float(f.get(n, math.nan)) for n in names] for f in features], dtype=float).reshape(len(features), len(names))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def balanced_loss(X: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, l2: float) -> float:
    """L(w, b) of the module docstring on standardised features X (no NaN)."""
    z = b + X @ w
    weights = _class_weights(y)
    # log(1 + e^z) - y z is the log loss of a logistic prediction, stable for any z.
    return float(np.sum(weights * (np.logaddexp(0.0, z) - y * z)) + 0.5 * l2 * w @ w)


def balanced_gradient(X: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, l2: float) -> np.ndarray:
    """dL/d(b, w), intercept first."""
    residual = _class_weights(y) * (_sigmoid(b + X @ w) - y)
    return np.concatenate([[residual.sum()], X.T @ residual + l2 * w])


def _class_weights(y: np.ndarray) -> np.ndarray:
    positives = y.sum()
    return np.where(y == 1, 0.5 / positives, 0.5 / (len(y) - positives))


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float, max_iter: int = 100, tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """(w, b) minimising the balanced, L2-penalised log loss by Newton's method with step halving."""
    n, d = X.shape
    A = np.hstack([np.ones((n, 1)), X])
    theta = np.zeros(d + 1)
    weights = _class_weights(y)
    penalty = np.diag([0.0] + [l2] * d)
    loss = balanced_loss(X, y, theta[1:], theta[0], l2)
    for _ in range(max_iter):
        gradient = balanced_gradient(X, y, theta[1:], theta[0], l2)
        if np.max(np.abs(gradient)) < tol:
            break
        p = _sigmoid(A @ theta)
        hessian = A.T @ (A * (weights * p * (1 - p))[:, None]) + penalty
        step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        scale = 1.0
        while scale > 1e-10:
            candidate = theta - scale * step
            new_loss = balanced_loss(X, y, candidate[1:], candidate[0], l2)
            if new_loss <= loss + 1e-15:
                break
            scale /= 2
        else:
            break
        theta, loss = candidate, new_loss
    return theta[1:], float(theta[0])


def best_threshold(scores: Sequence[float], answerable: Sequence[bool], prefer: float = 0.5) -> float:
    """The threshold (abstain when score < t) that maximises balanced accuracy on these cases:
    midpoints between adjacent distinct scores and both ends; ties go to the one nearest `prefer`."""
    values = sorted(set(float(s) for s in scores))
    candidates = [values[0] - 1e-9] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 1e-9]
    labels = list(answerable)

    def accuracy(t: float) -> float:
        return balanced_accuracy(two_by_two(labels, [s < t for s in scores]))

    return max(candidates, key=lambda t: (round(accuracy(t), 12), -abs(t - prefer), -t))


@dataclass
class AbstentionModel:
    """A fitted logistic model of answerability (see the module docstring) and its threshold."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    intercept: float
    threshold: float
    l2: float
    fitted_on: dict

    def score(self, features: Mapping[str, float]) -> float:
        """p(answerable | features); a missing feature counts as its fit-split mean."""
        return float(self.scores([features])[0])

    def scores(self, features: Sequence[Mapping[str, float]]) -> np.ndarray:
        X = _matrix(features, self.features)
        Z = (X - np.array(self.mean)) / np.array(self.scale)
        Z = np.where(np.isfinite(Z), Z, 0.0)
        return _sigmoid(self.intercept + Z @ np.array(self.weights))

    def abstain(self, features: Mapping[str, float]) -> bool:
        """The decision: the corpus cannot answer (p(answerable) under the threshold)."""
        return self.score(features) < self.threshold

    def as_json(self) -> dict:
        return {"kind": "logistic", "version": MODEL_VERSION, "features": list(self.features), "mean": list(self.mean),
                "scale": list(self.scale), "weights": list(self.weights), "intercept": self.intercept,
                "threshold": self.threshold, "l2": self.l2, "fitted_on": dict(self.fitted_on)}

    @classmethod
    def from_json(cls, data: Mapping) -> AbstentionModel:
        if data.get("kind") != "logistic" or data.get("version") != MODEL_VERSION:
            raise ValueError(f"not an abstention model of version {MODEL_VERSION}: kind {data.get('kind')!r}, "
                             f"version {data.get('version')!r}")
        return cls(tuple(data["features"]), tuple(map(float, data["mean"])), tuple(map(float, data["scale"])),
                   tuple(map(float, data["weights"])), float(data["intercept"]), float(data["threshold"]),
                   float(data["l2"]), dict(data.get("fitted_on") or {}))


def oriented_auc(values: Sequence[float], answerable: Sequence[bool], direction: float = 1.0) -> tuple[float, float]:
    """(AUC of `direction * values` for answerable over unanswerable, ties half; its z against 0.5
    by the null standard error sqrt((n1 + n0 + 1) / (12 n1 n0))), over the cases with a value."""
    pairs = [(direction * v, a) for v, a in zip(values, answerable) if math.isfinite(v)]
    pos = np.array([v for v, a in pairs if a])
    neg = np.array([v for v, a in pairs if not a])
    if not len(pos) or not len(neg):
        return math.nan, math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    auc = float(greater / (len(pos) * len(neg)))
    return auc, (auc - 0.5) / math.sqrt((len(pos) + len(neg) + 1) / (12 * len(pos) * len(neg)))


def fit(features: Sequence[Mapping[str, float]], answerable: Sequence[bool], l2: float = 1.0,
        names: Sequence[str] = FEATURES, min_z: float | None = 2.0) -> AbstentionModel:
    """Fit the model on these cases (both kinds needed): keep the available, screened features
    (`min_z=None`: no screening), standardise, Newton, drop wrong-signed weights, threshold."""
    y = np.array([1.0 if a else 0.0 for a in answerable])
    if len(y) != len(features) or y.sum() == 0 or y.sum() == len(y):
        raise ValueError("fitting an abstention model needs answerable and unanswerable cases, one label per case")
    names = list(names)
    X = _matrix(features, names)
    labels = [bool(v) for v in y]
    stats: dict[str, tuple[float, float, float, float]] = {}  # name -> (mean, scale, oriented AUC, z)
    for j, name in enumerate(names):
        column = X[:, j][np.isfinite(X[:, j])]
        if len(column) and float(column.std()) > 1e-12:
            auc, z = oriented_auc(X[:, j].tolist(), labels, DIRECTION.get(name, 1.0))
            stats[name] = (float(column.mean()), float(column.std()), auc, z)
    if min_z is None:
        kept = list(stats)
    else:
        kept = [n for n in stats if math.isfinite(stats[n][3]) and stats[n][3] >= min_z]
        ranked = sorted((n for n in stats if math.isfinite(stats[n][2])), key=lambda n: (-stats[n][2], names.index(n)))
        kept = kept or ranked[:1]
    while True:
        columns = [names.index(n) for n in kept]
        mean = np.array([stats[n][0] for n in kept])
        scale = np.array([stats[n][1] for n in kept])
        Z = (X[:, columns] - mean) / scale if kept else np.zeros((len(y), 0))
        Z = np.where(np.isfinite(Z), Z, 0.0)
        w, b = fit_logistic(Z, y, l2)
        wrong = [n for n, wj in zip(kept, w) if wj * DIRECTION.get(n, 1.0) < 0]
        if not wrong:
            break
        kept.remove(min(wrong, key=lambda n: w[kept.index(n)] * DIRECTION.get(n, 1.0)))
    scores = _sigmoid(b + Z @ w)
    threshold = best_threshold(scores.tolist(), labels)
    fitted_on = {"cases": len(y), "answerable": int(y.sum()), "unanswerable": int(len(y) - y.sum()), "min_z": min_z,
                 "evidence": min_z is None or any(math.isfinite(v[3]) and v[3] >= min_z for v in stats.values()),
                 "screening": {n: {"auc": round(v[2], 4), "z": round(v[3], 3)} for n, v in stats.items()}}
    return AbstentionModel(tuple(kept), tuple(stats[n][0] for n in kept), tuple(stats[n][1] for n in kept),
                           tuple(map(float, w)), b, float(threshold), l2, fitted_on)


def two_by_two(answerable: Sequence[bool], abstained: Sequence[bool]) -> dict[str, float]:
    """The 2x2 counts of (answerable, abstained) pairs with the rates of the module docstring."""
    table = {"answered_answerable": 0, "abstained_answerable": 0, "answered_unanswerable": 0, "abstained_unanswerable": 0}
    for a, s in zip(answerable, abstained, strict=True):
        table[("abstained" if s else "answered") + ("_answerable" if a else "_unanswerable")] += 1
    n_answerable = table["answered_answerable"] + table["abstained_answerable"]
    n_unanswerable = table["answered_unanswerable"] + table["abstained_unanswerable"]
    abstain_rate = table["abstained_unanswerable"] / n_unanswerable if n_unanswerable else math.nan
    false_abstain = table["abstained_answerable"] / n_answerable if n_answerable else math.nan
    return {**table, "abstain_rate": abstain_rate, "false_abstain_rate": false_abstain,
            "balanced_accuracy": (abstain_rate + 1 - false_abstain) / 2}


def balanced_accuracy(table: Mapping[str, float]) -> float:
    return float(table["balanced_accuracy"])


def table(model: AbstentionModel, features: Sequence[Mapping[str, float]], answerable: Sequence[bool]) -> dict[str, float]:
    """The model's 2x2 on these cases, its abstain and false-abstention rates and balanced accuracy."""
    return two_by_two(list(answerable), [model.abstain(f) for f in features])


def curve_from_scores(scores: Sequence[float], answerable: Sequence[bool],
                      thresholds: Sequence[float] | None = None) -> list[dict[str, float]]:
    """At each threshold t (abstain when score < t), ascending: the share of unanswerable cases
    abstained and of answerable cases wrongly abstained. Thresholds: the given ones, or every
    distinct score and one just past the highest (the full curve, from (0, 0) to (1, 1))."""
    values = np.array(scores, dtype=float)
    labels = np.array(list(answerable), dtype=bool)
    if thresholds is None:
        thresholds = sorted(set(values.tolist()))
        if thresholds:
            thresholds.append(float(np.nextafter(thresholds[-1], math.inf)))
    else:
        thresholds = sorted(float(t) for t in thresholds)
    points = []
    for t in thresholds:
        abstained = values < t
        points.append({
            "threshold": t,
            "abstain_rate_unanswerable": float(abstained[~labels].mean()) if (~labels).any() else math.nan,
            "false_abstain_rate_answerable": float(abstained[labels].mean()) if labels.any() else math.nan,
        })
    return points


def curve(model: AbstentionModel, features: Sequence[Mapping[str, float]], answerable: Sequence[bool],
          thresholds: Sequence[float] | None = None) -> list[dict[str, float]]:
    """The model's curve on these cases: `curve_from_scores` of p(answerable) (the model's own
    decision is the point at `model.threshold`)."""
    return curve_from_scores(model.scores(features).tolist(), answerable, thresholds)


def area_under_curve(points: Sequence[Mapping[str, float]]) -> float:
    """Area under (false abstention, abstain rate) by trapezoids: on the full curve, the chance
    that an unanswerable case scores below an answerable one (ties half), 0.5 for a signal that
    knows nothing; on a coarser grid, an approximation of it."""
    xs = [p["false_abstain_rate_answerable"] for p in points]
    ys = [p["abstain_rate_unanswerable"] for p in points]
    if not points or any(math.isnan(v) for v in xs + ys):
        return math.nan
    return float(sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:])))
