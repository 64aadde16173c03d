"""Weak questions grouped into topics, and each topic's label.

Topics: agglomerative clustering (SciPy's `linkage`) of the questions' embeddings with average
linkage on cosine distance, cut at `distance`: two groups join while their questions are, on
average, closer than that (strictly). No number of topics is assumed: a day may hold none, one or
twenty.

The cut is not a distance set by hand (what "close" means differs by model and corpus: a distance
that keeps one model's topics whole splits another's into pairs). It is calibrated on the golden
set (`calibrated_distance`): the `quantile` of the cosine distances between every pair of its
answerable questions. Those questions sample what users ask of this corpus, embedded by this
model, and most pairs of them are on different subjects: a group of the day's questions is one
topic when its questions are, on average, as close to one another as only that small share of
golden pairs are. Wide topics (a corpus whose questions all look alike) get a wide cut, tight
ones a tight cut, with no constant that knows the model's scale.

Labels: class-based TF-IDF (as BERTopic's c-TF-IDF). Each topic's questions form one class and the
day's other questions one more; a term's weight in a class is

    w(t, c) = tf(t, c) / words(c) * log(1 + A / f(t))

with tf(t, c) its count in the class, words(c) the class's word count, A the mean words per class
and f(t) its count over all classes: frequent in the topic, rare in the rest of the day. Terms are
the content words of `topic_text`, at least two characters, starting with a letter, and not on the
retrieval's stop-word list.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.scoring.metrics import nearest_rank
from rag_pipeline.core.monitoring.drift import topic_text
from rag_pipeline.core.retrieval.lexical import STOP_WORDS
from rag_pipeline.core.vectors import normalise_rows

_TERM = re.compile(r"\b[^\W\d_][\w\-]+\b")


def cosine_distances(vectors: np.ndarray) -> np.ndarray:
    """1 - cosine between every pair of rows (a zero row is at distance 1 from everything)."""
    unit = normalise_rows(np.asarray(vectors, dtype=np.float64))
    return np.clip(1.0 - unit @ unit.T, 0.0, 2.0)


def calibrated_distance(vectors: np.ndarray, quantile: float) -> float:
    """The nearest-rank `quantile` of the cosine distances between every pair of rows (the golden
    set's answerable questions): the cut that `topics` groups a day's questions at."""
    if len(vectors) < 2:
        raise InputError(f"the golden set has {len(vectors)} answerable case(s) outside holdout: coverage gaps "
                         "calibrate their topic cut on the distances between those questions and need at least "
                         "2 (add answerable cases to the golden set)")
    pairs = cosine_distances(vectors)[np.triu_indices(len(vectors), k=1)]
    # Selected in place rather than sorted as Python floats: a golden set of thousands of cases has millions of pairs.
    position = nearest_rank(len(pairs), quantile)
    return float(np.partition(pairs, position)[position])


def topics(vectors: np.ndarray, distance: float) -> list[int]:
    """A topic number for every row, numbered from 0 in order of first appearance."""
    if len(vectors) == 0:
        return []
    if len(vectors) == 1:
        return [0]
    # SciPy's cluster module imports in a fraction of scikit-learn's time (a monitoring run pays it).
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    distances = cosine_distances(vectors)
    np.fill_diagonal(distances, 0.0)
    merges = linkage(squareform(distances, checks=False), method="average")
    # fcluster keeps merges at or under t; groups join only while strictly closer than `distance`.
    labels = fcluster(merges, t=np.nextafter(distance, -np.inf), criterion="distance")
    # Renumbered by first appearance: the library's numbers are not part of its contract.
    order: dict[int, int] = {}
    return [order.setdefault(int(label), len(order)) for label in labels]


def distinctive_terms(groups: Sequence[Sequence[str]], others: Sequence[str], n: int = 3) -> list[list[str]]:
    """The `n` terms of highest c-TF-IDF weight of each group of questions against the other questions
    (function words and English stop words left out); an empty list for a group of stop words only."""
    classes = [Counter(_terms(group)) for group in groups] + [Counter(_terms(others))]
    terms = sorted(set().union(*classes))
    if not terms:  # every word is a stop word
        return [[] for _ in groups]
    counts = np.array([[cls[t] for t in terms] for cls in classes], dtype=float)
    words = counts.sum(axis=1, keepdims=True)
    frequency = counts.sum(axis=0)
    mean_words = words.mean()
    weights = counts / np.where(words == 0, 1, words) * np.log1p(mean_words / frequency)
    labels = []
    for row in weights[: len(groups)]:
        # Ties by term, so that the label does not depend on the order the terms were met.
        ranked = sorted((-w, t) for w, t in zip(row, terms) if w > 0)
        labels.append([t for _, t in ranked[:n]])
    return labels


def _terms(questions: Iterable[str]) -> list[str]:
    return [t for q in questions for t in _TERM.findall(topic_text(q)) if t not in STOP_WORDS]
