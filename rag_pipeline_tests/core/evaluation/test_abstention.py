"""The abstention model: the logistic fit against a reference optimiser, determinism, the 2x2 and
curve arithmetic, the features, and its use inside the golden evaluation of the sample corpus."""

import functools
import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize

from rag_pipeline.config import AnswersConfig, RetrievalConfig
from rag_pipeline.core.evaluation.answers import abstention
from rag_pipeline.core.evaluation.answers import features as abstention_features
from rag_pipeline.core.evaluation.answers.generators import ExtractiveGenerator, make_generator
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring.ranking import EVAL_DEPTH, case_filters
from rag_pipeline.core.models import Hit
from rag_pipeline.core.retrieval.retriever import Retriever


def _data(n=80, seed=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3 != 0  # 2:1 answerable, so the class weights matter
    signal = y + rng.normal(0, 0.8, n)
    other = 0.5 * y + rng.normal(0, 1.0, n)
    return [{"a": float(s), "b": float(o)} for s, o in zip(signal, other)], y.tolist()


def test_newton_reaches_the_optimum_of_a_reference_optimiser():
    features, y = _data()
    X = abstention._matrix(features, ["a", "b"])
    Z = (X - X.mean(0)) / X.std(0)
    labels = np.array(y, dtype=float)
    w, b = abstention.fit_logistic(Z, labels, l2=0.3)
    gradient = abstention.balanced_gradient(Z, labels, w, b, 0.3)
    assert np.max(np.abs(gradient)) < 1e-9
    reference = minimize(lambda t: abstention.balanced_loss(Z, labels, t[1:], t[0], 0.3), np.zeros(3),
                         jac=lambda t: abstention.balanced_gradient(Z, labels, t[1:], t[0], 0.3),
                         method="BFGS", options={"gtol": 1e-12})
    assert reference.x[0] == pytest.approx(b, abs=1e-6)
    assert reference.x[1:] == pytest.approx(w, abs=1e-6)


def test_the_balanced_loss_weighs_each_class_one_half():
    # One answerable case against three unanswerable ones, no features: the balanced optimum is
    # p = 1/2 (b = 0), where the plain log loss would give p = 1/4.
    w, b = abstention.fit_logistic(np.zeros((4, 0)), np.array([1.0, 0.0, 0.0, 0.0]), l2=1.0)
    assert b == pytest.approx(0.0, abs=1e-9) and w.shape == (0,)


def test_fit_is_deterministic_and_survives_json():
    features, y = _data()
    first, second = abstention.fit(features, y, names=["a", "b"]), abstention.fit(features, y, names=["a", "b"])
    assert first.as_json() == second.as_json()
    stored = json.loads(json.dumps(first.as_json()))
    again = abstention.AbstentionModel.from_json(stored)
    assert again.scores(features).tolist() == first.scores(features).tolist()
    assert [again.abstain(f) for f in features] == [first.abstain(f) for f in features]
    with pytest.raises(ValueError, match="version"):
        abstention.AbstentionModel.from_json({**stored, "version": 99})


def test_the_model_keeps_screened_features_only_and_handles_missing_ones():
    features, y = _data()
    rng = np.random.default_rng(11)
    for f in features:
        f["noise"] = float(rng.normal())
        f["answer_type_missing"] = f["a"]  # expected to count against an answer: it points the other way
        f["dense_best"] = math.nan  # missing everywhere (as in bm25 mode)
    model = abstention.fit(features, y, names=["a", "b", "noise", "answer_type_missing", "dense_best"])
    assert "a" in model.features and "noise" not in model.features
    assert "answer_type_missing" not in model.features and "dense_best" not in model.features
    assert model.fitted_on["evidence"] and model.fitted_on["screening"]["a"]["z"] > 2
    # A missing value counts as the fit mean: the score of a case without "a" is that of a = mean.
    partial = {k: v for k, v in features[0].items() if k != "a"}
    index = model.features.index("a")
    assert model.score(partial) == pytest.approx(model.score({**features[0], "a": model.mean[index]}))
    with pytest.raises(ValueError, match="answerable and unanswerable"):
        abstention.fit(features, [True] * len(features))


def test_without_evidence_the_fit_says_so():
    rng = np.random.default_rng(5)
    features = [{"a": float(rng.normal())} for _ in range(40)]
    model = abstention.fit(features, [i % 2 == 0 for i in range(40)], names=["a"])
    assert not model.fitted_on["evidence"] and len(model.features) <= 1


def test_threshold_maximises_balanced_accuracy_on_the_fit_cases():
    scores = [0.9, 0.8, 0.7, 0.6, 0.2, 0.1, 0.65, 0.3]
    answerable = [True, True, True, True, True, False, False, False]
    t = abstention.best_threshold(scores, answerable)
    # Best: abstain under 0.675 (every unanswerable case; answerable 0.6 and 0.2 lost): BA (1 + 3/5) / 2,
    # above abstaining under 0.45 (unanswerable 0.65 answered): (2/3 + 4/5) / 2.
    assert t == pytest.approx(0.675)
    assert abstention.two_by_two(answerable, [s < t for s in scores])["balanced_accuracy"] == pytest.approx(0.8)


def test_two_by_two_and_curve_arithmetic():
    answerable = [True, True, True, True, False, False]
    table = abstention.two_by_two(answerable, [False, False, False, True, True, False])
    assert table == {"answered_answerable": 3, "abstained_answerable": 1, "answered_unanswerable": 1,
                     "abstained_unanswerable": 1, "abstain_rate": 0.5, "false_abstain_rate": 0.25,
                     "balanced_accuracy": (0.5 + 0.75) / 2}
    scores = [0.9, 0.8, 0.4, 0.3, 0.5, 0.1]
    points = abstention.curve_from_scores(scores, answerable)
    assert [p["threshold"] for p in points][:-1] == [0.1, 0.3, 0.4, 0.5, 0.8, 0.9]
    assert (points[0]["abstain_rate_unanswerable"], points[0]["false_abstain_rate_answerable"]) == (0.0, 0.0)
    assert (points[-1]["abstain_rate_unanswerable"], points[-1]["false_abstain_rate_answerable"]) == (1.0, 1.0)
    at_half = next(p for p in points if p["threshold"] == 0.5)  # abstain: 0.4, 0.3 (answerable), 0.1
    assert at_half == {"threshold": 0.5, "abstain_rate_unanswerable": 0.5, "false_abstain_rate_answerable": 0.5}
    # The area is the Mann-Whitney AUC: answerable above unanswerable in 6 of 8 pairs.
    assert abstention.area_under_curve(points) == pytest.approx(6 / 8)
    assert abstention.oriented_auc(scores, answerable)[0] == pytest.approx(6 / 8)
    grid = abstention.curve_from_scores(scores, answerable, [0.0, 0.5, 1.0])
    assert [p["abstain_rate_unanswerable"] for p in grid] == [0.0, 0.5, 1.0]


def _hit(doc, score, text, rank=1):
    return Hit(f"{doc}#0", doc, score, rank, text=text)


def test_features_of_one_question():
    context = [_hit("leave", 0.8, "Parental leave lasts 20 weeks. It is paid in full."),
               _hit("other", 0.5, "Travel is booked through the portal.", 2)]
    dense = [context[0], context[1]]
    bm25 = [_hit("leave", 7.0, context[0].text), _hit("travel", 3.5, "x", 2)]
    f = abstention_features.question_features("How many weeks does parental leave last?", {"dense": dense, "bm25": bm25}, context)
    assert f["dense_best"] == 0.8 and f["dense_gap"] == pytest.approx(0.3)
    assert f["bm25_gap"] == pytest.approx(0.5) and f["top_doc_agrees"] == 1.0 and f["top_docs_overlap"] == pytest.approx(1 / 2)
    assert f["top_chunk_coverage"] == 1.0 and f["sentence_coverage"] == 1.0  # week, parent, leav, last
    assert f["answer_type_found"] == 1.0 and f["answer_type_missing"] == 0.0  # "20"
    assert math.isnan(f["sentence_cosine"])
    lexical = abstention_features.question_features("Who approves parental leave?", {"bm25": bm25}, context)
    assert math.isnan(lexical["dense_best"]) and math.isnan(lexical["top_doc_agrees"])
    assert lexical["answer_type_missing"] == 1.0  # no name in "Parental leave lasts 20 weeks."
    nothing = abstention_features.question_features("Who approves parental leave?", {"dense": [], "bm25": []}, [])
    assert nothing["dense_best"] == 0.0 and nothing["bm25_best"] == 0.0 and nothing["top_chunk_coverage"] == 0.0


def test_answer_types_and_sentence_cosines():
    assert [abstention_features.answer_type(q) for q in ("How many days?", "When does it start?", "Who signs it?",
                                                 "Where is it hosted?", "What is it?", "The lake formed in what year?")] \
        == ["number", "date", "person", "place", None, "date"]
    assert abstention_features.has_answer_type("date", "It opened in 1998.", "When did it open?")
    assert not abstention_features.has_answer_type("number", "The 3 offices close.", "Do the 3 offices close?")
    assert abstention_features.has_answer_type("person", "The form is signed by Maria Lopez.", "Who signs the form?")
    features = [{"dense_best": 0.5}, {"dense_best": math.nan}]
    contexts = [[_hit("d", 0.5, "Alpha beta. Gamma delta.")], [_hit("d", 0.5, "Alpha beta.")]]
    vectors = {"q": [1.0, 0.0], "Alpha beta.": [0.0, 1.0], "Gamma delta.": [3.0, 4.0]}
    abstention_features.add_sentence_cosines(["q", "q"], contexts, features, lambda texts: np.array([vectors[t] for t in texts]))
    assert features[0]["sentence_cosine"] == pytest.approx(0.6)
    assert "sentence_cosine" not in features[1]  # bm25 mode: no embedder in the retrieval


def test_the_extractive_generator_follows_the_abstention_decision():
    context = [_hit("leave", 0.8, "Parental leave lasts 20 weeks.")]
    generator = ExtractiveGenerator(threshold=0.5)
    assert generator.generate("parental leave", context, 0.9, abstain=True).abstained
    answer = generator.generate("parental leave", context, 0.1, abstain=False)
    assert not answer.abstained and answer.settings["abstention"] == "model"
    assert generator.generate("parental leave", context, 0.1).abstained  # no decision: the threshold


@pytest.fixture(scope="module")
def golden_and_retriever(sample_index):
    config, store, embedder = sample_index
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    return golden, store, Retriever(store, embedder, RetrievalConfig(mode="hybrid"))


def _tables_agree(result):
    summary = result.abstention
    for split, table in summary["by_split"].items():
        rows = [c for c in result.cases if c.case.split == split]
        assert table == abstention.two_by_two([c.case.answerable for c in rows], [c.abstained for c in rows])
    held = [c for c in result.cases if c.case.split != "dev"]
    assert summary["held_out"] == abstention.two_by_two([c.case.answerable for c in held], [c.abstained for c in held])
    assert result.unanswerable["held_out_balanced_accuracy"] == summary["held_out"]["balanced_accuracy"]
    assert summary["held_out_curve"][0]["false_abstain_rate_answerable"] <= summary["held_out_curve"][-1]["false_abstain_rate_answerable"]


@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_on_the_sample_corpus_the_fitted_model_decides_and_is_reported_per_split(golden_and_retriever, monkeypatch, mode):
    golden, store, retriever = golden_and_retriever
    # The hashing embedder's signals are weak: fit without screening so that the model branch runs.
    monkeypatch.setattr(abstention, "fit", functools.partial(abstention.fit, min_z=None))
    answers = AnswersConfig(generator="extractive")
    result = evaluate(golden, retriever, mode, "fp", {}, supersedes=store.served.supersession(),
                      generator_for=lambda t: make_generator(answers, t), context_k=5, abstention_method="model")
    summary = result.abstention
    assert summary["method"] == "model" and "abstention model fitted on the dev split" in result.threshold_source
    assert set(summary["by_split"]) == {"dev", "validation", "holdout"}
    _tables_agree(result)
    # The stored model, re-applied to the same retrieval, gives every case's decision.
    model = abstention.AbstentionModel.from_json(json.loads(json.dumps(summary["model"])))
    if mode == "bm25":
        assert not {"dense_best", "sentence_cosine", "top_doc_agrees"} & set(model.features)
    cases = [c.case for c in result.cases]
    results = retriever.search_many([c.question for c in cases], [case_filters(c) for c in cases], mode, EVAL_DEPTH)
    features = abstention_features.features_for_results([c.question for c in cases], results, 5, retriever.embedder.encode)
    assert [model.abstain(f) for f in features] == [c.abstained for c in result.cases]
    # The extractive generator abstains whenever the model says so.
    assert all(c.answer["abstained"] for c in result.cases if c.abstained)
    assert any(c.abstained for c in result.cases) and any(not c.answer["abstained"] for c in result.cases)


def test_without_evidence_or_enough_dev_cases_the_single_threshold_decides(golden_and_retriever):
    golden, store, retriever = golden_and_retriever
    default = evaluate(golden, retriever, "hybrid", "fp", {})
    assert default.abstention["method"] == "threshold" and "retrieval.abstention: threshold" in default.threshold_source
    _tables_agree(default)
    result = evaluate(golden, retriever, "hybrid", "fp", {}, abstention_method="model")
    _tables_agree(result)
    if result.abstention["method"] == "threshold":  # hashing embedder: no feature shows evidence on dev
        assert "no feature separates" in result.threshold_source
        assert all(c.abstained == (c.best_score is None or c.best_score < result.no_result_threshold) for c in result.cases)
    few = [c for c in golden.cases if c.answerable or c.split != "dev"]
    few += [c for c in golden.cases if not c.answerable and c.split == "dev"][:3]
    subset = type(golden)(golden.path, golden.revision, few, golden.stale)
    result = evaluate(subset, retriever, "hybrid", "fp", {}, abstention_method="model")
    assert result.abstention["method"] == "threshold" and result.abstention["model"] is None
    assert "3 unanswerable cases; the abstention model needs 5 of each" in result.threshold_source
    assert json.dumps(result.abstention["held_out_single_threshold"]) == json.dumps(result.abstention["held_out"])
    configured = evaluate(golden, retriever, "hybrid", "fp", {}, no_result_threshold=0.3, abstention_method="model")
    assert configured.abstention["method"] == "threshold" and "configured no-result threshold" in configured.threshold_source
