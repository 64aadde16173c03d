"""Abstention that knows: a small, fitted model of "the corpus cannot answer this question",
and how an evaluation decides abstention (the fitted model, or the single no-result threshold).

The features are `abstention_features.py`'s. The model, with label y = 1 for answerable and 0
for "the corpus cannot answer":

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rag_pipeline.core.evaluation.answers.features import DIRECTION, FEATURES, features_for_results
from rag_pipeline.core.evaluation.golden.holdout import withheld

if TYPE_CHECKING:
    from rag_pipeline.core.retrieval.retriever import RetrievalResult, Retriever


MODEL_VERSION = 1


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


# The abstention model is fitted on the dev split only when it has this many cases of each kind;
# else the single no-result threshold decides.
MIN_ABSTENTION_FIT_CASES = 5


FIT_SPLIT = "dev"


# Thresholds on p(answerable) at which the summary's curve is drawn: a fixed grid, so that the
# stored curve shows no single case's score.
CURVE_GRID = tuple(i / 40 for i in range(41))


def calibrate_threshold(results: Sequence) -> tuple[float, str]:
    """The best-score floor that best separates answerable from unanswerable dev cases.

    Picks the midpoint between adjacent best scores that maximises accuracy (answerable cases at
    or above it, unanswerable below) on the dev split; falls back to the dev and validation cases
    when dev lacks one of the two kinds, and to 0 (never abstain) when they have no unanswerable
    case. Holdout cases never tune it: their figures would then measure the fit.
    """
    tunable = [r for r in results if not withheld(r.case)]
    for pool_name, pool in (("dev split", [r for r in tunable if r.case.split == "dev"]),
                            ("dev and validation splits", tunable)):
        points = [(r.best_score, r.case.answerable) for r in pool if r.best_score is not None]
        if any(a for _, a in points) and any(not a for _, a in points):
            break
    else:
        return 0.0, "no unanswerable case outside holdout: never abstain"
    scores = sorted({s for s, _ in points})
    candidates = [scores[0] - 1e-9] + [(a + b) / 2 for a, b in zip(scores, scores[1:])] + [scores[-1] + 1e-9]

    def accuracy(t: float) -> float:
        return sum(1 for s, a in points if (s >= t) == a) / len(points)

    best = max(candidates, key=lambda t: (accuracy(t), -t))
    return float(best), f"calibrated on the {pool_name}"


def fit_abstention(
    rows: Sequence, results: Sequence[RetrievalResult], retriever: Retriever, context_k: int,
    configured: bool, method: str = "model",
) -> tuple[AbstentionModel | None, list[dict[str, float]] | None, str]:
    """(model, features of every case, how abstention is decided): the abstention model
    (`abstention.py`) fitted on the dev split when it holds at least MIN_ABSTENTION_FIT_CASES
    answerable and as many unanswerable cases, no threshold is configured and some feature shows
    evidence there; else (None, None, why the single no-result threshold decides)."""
    if configured:
        return None, None, "the configured no-result threshold"
    if method == "threshold":
        return None, None, "the no-result threshold (retrieval.abstention: threshold)"
    fit_rows = [i for i, r in enumerate(rows) if r.case.split == FIT_SPLIT]
    answerable = sum(1 for i in fit_rows if rows[i].case.answerable)
    unanswerable = len(fit_rows) - answerable
    if min(answerable, unanswerable) < MIN_ABSTENTION_FIT_CASES:
        return None, None, (f"the no-result threshold (the {FIT_SPLIT} split has {answerable} answerable and "
                            f"{unanswerable} unanswerable cases; the abstention model needs "
                            f"{MIN_ABSTENTION_FIT_CASES} of each)")
    features = features_for_results([r.case.question for r in rows], results, context_k,
                                               retriever.embedder.encode)
    model = fit([features[i] for i in fit_rows], [rows[i].case.answerable for i in fit_rows])
    if not model.fitted_on["evidence"]:
        return None, None, (f"the no-result threshold (no feature separates the {FIT_SPLIT} split's answerable from "
                            f"its unanswerable cases by {model.fitted_on['min_z']} standard errors)")
    return model, features, (f"abstention model fitted on the {FIT_SPLIT} split ({answerable} answerable, "
                             f"{unanswerable} unanswerable; features {', '.join(model.features)})")


def abstention_summary(
    rows: Sequence, decided: Sequence[bool], model: AbstentionModel | None, scores, threshold: float, how: str,
) -> dict:
    """The abstention figures of `rows` (results with `case` and `best_score`) and the decision
    taken for each (`decided`): the 2x2 per split (with rates and balanced accuracy), the held-out
    2x2 (every split but the fit split) beside the single threshold's, and the held-out curve
    (abstain rate on unanswerable against false abstention on answerable) with its area."""
    answerable = [r.case.answerable for r in rows]
    by_threshold = [r.best_score is None or r.best_score < threshold for r in rows]
    held = [i for i, r in enumerate(rows) if r.case.split != FIT_SPLIT]
    if model is not None:
        values, grid = [float(s) for s in scores], list(CURVE_GRID)
    else:
        values = [r.best_score if r.best_score is not None else -math.inf for r in rows]
        finite = [v for v in values if math.isfinite(v)] or [0.0]
        low, high = min(finite), max(finite)
        grid = [low + (high - low) * i / 40 for i in range(41)] + [math.nextafter(high, math.inf)]
    points = curve_from_scores([values[i] for i in held], [answerable[i] for i in held], grid)
    splits = sorted({r.case.split for r in rows})
    return {
        "method": "model" if model is not None else "threshold",
        "how": how,
        "fit_split": FIT_SPLIT,
        "model": model.as_json() if model is not None else None,
        "by_split": {s: two_by_two([answerable[i] for i, r in enumerate(rows) if r.case.split == s],
                                              [decided[i] for i, r in enumerate(rows) if r.case.split == s])
                     for s in splits},
        "held_out": two_by_two([answerable[i] for i in held], [decided[i] for i in held]),
        "held_out_single_threshold": two_by_two([answerable[i] for i in held], [by_threshold[i] for i in held]),
        "held_out_curve": points,
        "held_out_curve_area": area_under_curve(points),
    }
