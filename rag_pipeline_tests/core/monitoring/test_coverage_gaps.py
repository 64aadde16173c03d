"""Coverage gaps on a real store (DuckDB, real parsing and ingestion, the hashing embedder: the
questions of a topic share its words, which is the similarity these tests need)."""

from __future__ import annotations

import json
import math
import re
from datetime import date

import numpy as np
import pytest

from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.monitoring.evidence import Evidence, Question
from rag_pipeline.core.monitoring.gap_day import coverage_gaps_day, day_gaps
from rag_pipeline.core.monitoring.gap_threshold import NoAnswerableCasesError, calibrate
from rag_pipeline.core.monitoring.gap_topics import distinctive_terms, topics
from rag_pipeline.core.monitoring.gaps import Gap, closing_document, match
from rag_pipeline.core.storage import open_store
from rag_pipeline.core.vectors import normalise_rows

PAGES = {
    "refunds.md": "# Refunds\n\nRefunds of an annual plan are issued within 14 days of the refund request. "
                  "A refund goes back to the card that paid the invoice.\n",
    "sso.md": "# Single sign-on\n\nSet up single sign-on with Okta or Entra ID: upload the SAML metadata "
              "and copy the entity id into your identity provider.\n",
    "exports.md": "# Data export\n\nExport your invoices and customers as CSV from Settings, Data export. "
                  "An export link stays valid for seven days.\n",
    "invoices.md": "# Invoices\n\nCreate an invoice, add line items and send the invoice by email. "
                   "Payment reminders go out three days after the due date.\n",
}
DASHBOARDS = "# Dashboards\n\nBuild a custom dashboard from widgets: add a chart widget, share the dashboard " \
             "with your team, and schedule a dashboard export of every widget.\n"
NORMAL = ["how long do refunds take", "refund of an annual plan", "refund to the card that paid",
          "set up single sign-on with okta", "saml metadata for single sign-on", "entity id for sso",
          "export invoices as csv", "how long is an export link valid", "export customers csv",
          "send an invoice by email", "add line items to an invoice", "when do payment reminders go out"]
OFF_CORPUS = ["custom dashboard widgets", "share a dashboard with my team", "dashboard chart widget",
              "schedule a dashboard export", "add a widget to my dashboard", "dashboard widget chart colours",
              "dashboard for my team", "chart widget on the dashboard"]
GOLDEN = [("refunds of an annual plan", True), ("single sign-on with entity id", True), ("data export as csv", True),
          ("send an invoice with line items", True), ("payment reminders after the due date", True),
          ("refund request card", True), ("okta saml metadata", True), ("export link valid days", True),
          ("parking at the office garage", False), ("yearly bonus for staff", False),
          ("bring a dog to work", False)]
DAY1, DAY2 = date(2026, 11, 20), date(2026, 11, 21)


def _log(folder, day: date, queries: list[str]) -> None:
    folder.mkdir(exist_ok=True)
    lines = [{"timestamp": f"{day}T{8 + i % 10:02d}:{i % 60:02d}:00Z", "query": q, "tenant": None}
             for i, q in enumerate(queries)]
    (folder / f"{day}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def pipeline(tmp_path, write_config):
    root = tmp_path / "kb"
    root.mkdir()
    for name, text in PAGES.items():
        (root / name).write_text(text)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps({
        "id": f"c{i}", "question": q, "reference": "r", "gold_docs": ["kb:refunds.md"] if a else [], "slice": "s",
        "split": "dev", "answerable": a}) + "\n" for i, (q, a) in enumerate(GOLDEN)))
    config = write_config({"kb": root}, golden_set=str(golden), monitoring={
        "query_log": str(tmp_path / "log"), "start_date": "2026-11-01", "gap_share_warn": 0.2,
        # 8 answerable golden questions are 28 pairs: the default 2% quantile would be their closest
        # pair alone; the 10% one is the third closest (0.87 apart for hashing vectors).
        "gap_topic_quantile": 0.1})
    store = open_store(config.storage)
    embedder = HashingEmbedder(config.embedding)

    def ingest(run_id: str) -> None:
        ingest_source(config.sources[0], store, embedder, config.chunking, config.lifecycle, run_id)

    ingest("r1")
    yield config, store, embedder, root, ingest
    store.close()


def test_an_off_corpus_topic_is_one_gap_holding_most_of_it(pipeline, tmp_path):
    config, store, embedder, _, _ = pipeline
    _log(tmp_path / "log", DAY1, NORMAL + OFF_CORPUS)
    result = coverage_gaps_day(config, store, embedder, DAY1)
    large = [g for g in result.gaps if g.share > config.monitoring.gap_share_warn]
    assert len(large) == 1, [(g.label, [m.question.text for m in g.members]) for g in result.gaps]
    [gap] = large
    asked = {m.question.text for m in gap.members}
    assert len(asked & set(OFF_CORPUS)) >= 6 and not asked & set(NORMAL)
    assert "dashboard" in gap.label and gap.first_seen == DAY1 and gap.status == "open"
    assert gap.share == pytest.approx(gap.count / len(NORMAL + OFF_CORPUS))
    # No page holds the dashboard words: each question's coverage ranks under every answerable golden
    # case's, so its evidence score is at most half (its cosine's rank alone) and under the threshold.
    scores = [m.score for m in gap.members]
    assert len(asked) >= 7 and max(scores) <= 0.5 and max(scores) < result.threshold.value
    assert max(m.best_score for m in gap.members) == gap.best_score
    assert gap.nearest_doc and gap.nearest_doc.startswith("kb:")
    verdict = result.verdict(config.monitoring.gap_share_warn)
    assert not verdict.passed and "dashboard" in verdict.summary
    # Stored: read back as the same gaps, and the day's measures with the threshold's rule.
    assert [g.gap_id for g in day_gaps(store, DAY1)] == [g.gap_id for g in result.gaps]
    [measures] = [m for m in store.records.monitoring_history("gaps", DAY1) if m["day"] == DAY1]
    assert measures["weak_threshold"] == result.threshold.value and "Youden" in measures["threshold_rule"]
    # The topic cut the day grouped at: the configured quantile of the golden answerable questions' distances.
    assert measures["topic_quantile"] == 0.1 and 0.5 < measures["topic_distance"] == result.threshold.topic_distance < 1


def test_the_same_day_without_the_topic_has_no_gap_over_the_share(pipeline, tmp_path):
    config, store, embedder, _, _ = pipeline
    _log(tmp_path / "log", DAY1, NORMAL)
    result = coverage_gaps_day(config, store, embedder, DAY1)
    assert all(g.share <= config.monitoring.gap_share_warn for g in result.gaps)
    assert result.verdict(config.monitoring.gap_share_warn).passed
    assert result.examined == len(NORMAL)


def test_a_gap_keeps_its_identity_then_closes_when_a_document_answers_it(pipeline, tmp_path):
    config, store, embedder, root, ingest = pipeline
    _log(tmp_path / "log", DAY1, NORMAL + OFF_CORPUS)
    _log(tmp_path / "log", DAY2, NORMAL + OFF_CORPUS[::-1])
    day3, day4 = date(2026, 11, 22), date(2026, 11, 23)
    _log(tmp_path / "log", day3, NORMAL)
    _log(tmp_path / "log", day4, NORMAL)
    [first] = [g for g in coverage_gaps_day(config, store, embedder, DAY1).gaps if "dashboard" in g.label]
    # Asked again the next day: the same gap, first seen on the first day, not new.
    again = coverage_gaps_day(config, store, embedder, DAY2)
    [same] = [g for g in again.gaps if "dashboard" in g.label]
    assert (same.gap_id, same.first_seen, same.last_seen) == (first.gap_id, DAY1, DAY2)
    assert same not in again.new_gaps and again.verdict(config.monitoring.gap_share_warn).passed
    # Not asked, not answered yet: stays open, not listed as closed.
    assert not [g for g in coverage_gaps_day(config, store, embedder, day3).gaps if g.gap_id == first.gap_id]
    assert first.gap_id in {row["gap_id"] for row in store.gaps.open_before(day4)}
    (root / "dashboards.md").write_text(DASHBOARDS)
    ingest("r2")
    closing = coverage_gaps_day(config, store, embedder, day4)
    [done] = [g for g in closing.gaps if g.gap_id == first.gap_id]
    assert done.status == "closed" and done.closed_by == "kb:dashboards.md" and done.closed_on == day4
    assert done.first_seen == DAY1 and done.as_json()["closed_by"] == "kb:dashboards.md"
    assert closing.measures()["closed_gaps"] == 1
    # Closed: a later day no longer carries it as open.
    assert first.gap_id not in {row["gap_id"] for row in store.gaps.open_before(date(2026, 11, 24))}


def test_a_gap_that_grows_over_the_share_warns_on_the_day_it_crosses_and_not_again(pipeline, tmp_path):
    config, store, embedder, _, _ = pipeline
    warn = config.monitoring.gap_share_warn
    # The topic is small for two days (found, under the share), crosses it on the third, stays over on the fourth.
    days = [date(2026, 11, 20 + i) for i in range(4)]
    for day, asked in zip(days, [3, 3, 8, 8], strict=True):
        _log(tmp_path / "log", day, NORMAL + OFF_CORPUS[:asked])
    results = [coverage_gaps_day(config, store, embedder, day) for day in days]
    dashboards = [[g for g in r.gaps if "dashboard" in g.label] for r in results]
    assert all(len(found) == 1 for found in dashboards), [[g.label for g in r.gaps] for r in results]
    shares = [found[0].share for found in dashboards]
    assert shares[0] <= warn and shares[1] <= warn and shares[2] > warn and shares[3] > warn, shares
    assert len({found[0].gap_id for found in dashboards}) == 1
    verdicts = [r.verdict(warn) for r in results]
    assert [v.passed for v in verdicts] == [True, True, False, True]
    # Not new on the day it crosses: the warning says since when it is open.
    assert not results[2].new_gaps and f"open since {days[0].isoformat()}" in verdicts[2].summary
    assert verdicts[2].numbers["crossing_gaps"] == 1 and verdicts[3].numbers["crossing_gaps"] == 0
    # Still listed on the fourth day, over the share: said once, not hidden.
    assert "1 over it since an earlier day" in verdicts[3].summary
    assert store.gaps.peak_shares_before(days[3])[dashboards[0][0].gap_id] == pytest.approx(shares[2])


def test_the_threshold_is_youdens_j_capped_by_the_answerable_quantile():
    # Answerable 0.9, 0.8, 0.7, 0.3; unanswerable 0.75, 0.2. J is best at 0.25 (TPR 1, FPR 0.5) and at
    # 0.775 (TPR 0.5, FPR 0): J = 0.5 both; the tie goes to the one nearest 0.5 (`best_threshold`): 0.25.
    scores, labels = [0.9, 0.8, 0.7, 0.3, 0.75, 0.2], [True, True, True, True, False, False]
    wide = calibrate(scores, labels, max_flag_rate=0.5)
    assert wide.value == pytest.approx(0.25) and "Youden" in wide.rule and "capped" not in wide.rule
    assert (wide.answerable_flagged, wide.unanswerable_caught) == (0.0, 0.5)
    # 1% of answerable cases at most: the cap is the lowest answerable score, 0.3, above J's 0.25.
    strict = calibrate(scores, labels, max_flag_rate=0.01)
    assert strict.value == pytest.approx(0.25)
    # Near-miss unanswerable cases (0.7, 0.6) put J's best at 0.75, above an answered 0.4: the cap at
    # the 25% quantile of answerable scores (0.4) keeps that answered question out.
    capped = calibrate([0.9, 0.85, 0.8, 0.4, 0.7, 0.6], [True, True, True, True, False, False], max_flag_rate=0.25)
    assert capped.value == pytest.approx(0.4) and "capped at the 25% quantile" in capped.rule
    assert (capped.answerable_flagged, capped.unanswerable_caught) == (0.0, 0.0)


def test_without_unanswerable_cases_the_threshold_is_the_stated_quantile_and_without_answerable_an_error():
    only = calibrate([0.9, 0.8, 0.7, 0.6], [True] * 4, max_flag_rate=0.25)
    assert only.value == pytest.approx(0.6) and only.rule.startswith("no unanswerable golden case")
    assert math.isnan(only.unanswerable_caught)
    with pytest.raises(NoAnswerableCasesError, match="no answerable case"):
        calibrate([0.1, 0.2], [False, False], max_flag_rate=0.1)


def test_topics_and_labels():
    vectors = np.array([[1.0, 0.0, 0.0], [0.95, 0.05, 0.0], [0.0, 1.0, 0.0], [0.0, 0.9, 0.1], [0.0, 0.0, 0.0]])
    assert topics(vectors, 0.3) == [0, 0, 1, 1, 2]
    assert topics(vectors[:1], 0.3) == [0] and topics(np.zeros((0, 3)), 0.3) == []
    # "payroll" is in every question of the group and nowhere else; "refund" is everywhere else.
    [label] = distinctive_terms([["payroll tax", "payroll run", "payroll refund"]], ["refund please", "refund time"], n=2)
    assert label[0] == "payroll" and "refund" not in label
    assert distinctive_terms([["how do I"]], ["what is it"]) == [[]]


@pytest.mark.parametrize("distance", [0.2, 0.5, 0.8])
def test_topics_are_scikit_learns_average_linkage_cut_at_the_distance(distance):
    from sklearn.cluster import AgglomerativeClustering

    rng = np.random.default_rng(7)
    centres = rng.normal(size=(6, 16))
    vectors = np.vstack([centre + 0.4 * rng.normal(size=(12, 16)) for centre in centres])
    distances = np.clip(1.0 - normalise_rows(vectors) @ normalise_rows(vectors).T, 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)
    reference = AgglomerativeClustering(n_clusters=None, metric="precomputed", linkage="average",
                                        distance_threshold=distance).fit_predict(distances)
    order: dict[int, int] = {}
    assert topics(vectors, distance) == [order.setdefault(int(label), len(order)) for label in reference]
    assert 1 < len(order) < len(vectors)  # a cut that groups, not one topic nor all singletons


def _evidence(doc: str | None, score: float | None) -> Evidence:
    return Evidence(Question("q"), score, doc)


def test_a_gap_closes_when_half_its_questions_are_answered_by_the_document_most_of_them_find():
    assert closing_document([_evidence("kb:a", 0.9), _evidence("kb:b", 0.1), _evidence("kb:c", 0.2)], 0.5) is None
    assert closing_document([_evidence("kb:a", 0.9), _evidence("kb:b", 0.6), _evidence("kb:b", 0.7),
                             _evidence(None, None)], 0.5) == "kb:b"
    # A tie in votes goes to the higher best score.
    assert closing_document([_evidence("kb:a", 0.9), _evidence("kb:b", 0.6)], 0.5) == "kb:a"
    assert closing_document([], 0.5) is None


def _gap(gap_id: str, centroid) -> Gap:
    return Gap(gap_id, DAY1, DAY1, "x", (), 0.1, None, "", None, tuple(centroid))


def test_each_earlier_gap_continues_at_most_one_topic_closest_first():
    earlier = [_gap("a", [1.0, 0.0]), _gap("b", [0.0, 1.0])]
    near_a, nearer_a, far = np.array([0.8, 0.6]), np.array([0.99, 0.141]), np.array([-1.0, 0.0])
    matched = match([near_a, nearer_a, far], earlier, distance=0.3)
    assert [g.gap_id if g else None for g in matched] == [None, "a", None]


def test_the_report_section_escapes_what_users_typed():
    from rag_pipeline.core.monitoring.gap_day import gaps_markdown
    from rag_pipeline.core.monitoring.gaps import Member

    hostile = "<script>alert(1)</script> | pipe [x](javascript:alert(2))"
    gap = Gap("gap-1", DAY1, DAY1, hostile, (Member(Question(hostile, "acme"), 0.1),), 0.5, "kb:a.md", "A > B",
              0.1, (1.0,))
    text = gaps_markdown([gap], {"weak_threshold": 0.3, "threshold_rule": "rule", "weak_queries": 1.0,
                                 "examined_queries": 2.0, "topic_distance": 0.6543, "topic_quantile": 0.02})
    assert "cut at 0.6543, the 0.02 quantile" in text
    assert "<script>" not in text and "javascript:" not in text and not re.search(r"(?<!\\)\]\(", text)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 3 and len({row.count("|") - row.count("\\|") for row in rows}) == 1
    assert "_coverage_gaps was not materialized" in gaps_markdown([], None)


def test_the_group_test_is_a_one_sided_mann_whitney_with_benjamini_hochberg_over_the_day():
    from rag_pipeline.core.monitoring.gap_group import adjusted_pvalues, is_low, lower_pvalue

    # Two scores under all three golden ones, no ties: exactly 1 of the C(5, 2) = 10 orderings is as low.
    assert lower_pvalue([0.1, 0.2], [0.3, 0.4, 0.5]) == pytest.approx(0.1)
    # Above all of them: the most extreme ordering the other way, p = 1.
    assert lower_pvalue([0.6, 0.7], [0.3, 0.4, 0.5]) == pytest.approx(1.0)
    assert lower_pvalue([], [0.3]) == 1.0 and lower_pvalue([0.1], []) == 1.0
    golden = [0.5, 0.55, 0.6, 0.62, 0.65, 0.7, 0.72, 0.75, 0.8]
    groups = [[0.1, 0.2, 0.3], [0.52, 0.58, 0.9], [0.4, 0.45], [0.66, 0.71, 0.74, 0.85]]
    raw = [lower_pvalue(g, golden) for g in groups]
    # Benjamini-Hochberg by hand: sorted p(i) * m / i, then the running minimum from the largest down.
    order = sorted(range(len(raw)), key=lambda i: raw[i])
    expected, running = [0.0] * len(raw), 1.0
    for rank in range(len(raw), 0, -1):
        i = order[rank - 1]
        running = min(running, raw[i] * len(raw) / rank)
        expected[i] = running
    assert adjusted_pvalues(groups, golden) == pytest.approx(expected)
    assert adjusted_pvalues([], golden) == []
    assert is_low(groups[0], golden, 0.05) and not is_low(groups[3], golden, 0.05)


def _asked(text: str, score: float | None, vector) -> Evidence:
    return Evidence(Question(text), score, "kb:a.md", "A", np.asarray(vector, dtype=np.float32))


GOLDEN_SCORES = [0.55, 0.6, 0.62, 0.65, 0.68, 0.7, 0.72, 0.75, 0.78, 0.8, 0.82, 0.85]


def test_a_topic_scoring_low_as_a_group_is_a_gap_though_none_of_its_questions_is_weak():
    from rag_pipeline.core.monitoring.gaps import find_gaps

    low = [_asked(f"low {i}", 0.42 + 0.01 * i, [1.0, 0.05 * i, 0.0]) for i in range(6)]
    usual = [_asked(f"usual {i}", GOLDEN_SCORES[i * 2], [0.0, 1.0, 0.05 * i]) for i in range(6)]
    weak = [_asked(f"weak {i}", 0.2, [0.0, 0.05 * i, 1.0]) for i in range(2)]
    found = find_gaps(DAY1, low + usual + weak, threshold=0.4, earlier=[], distance=0.3, min_queries=2,
                      golden=GOLDEN_SCORES, alpha=0.05)
    assert [sorted(m.question.text for m in g.members) for g in found] == [
        [e.question.text for e in low], [e.question.text for e in weak]]
    # Without golden scores to compare with, only the per-question threshold speaks.
    alone = find_gaps(DAY1, low + usual + weak, 0.4, [], 0.3, 2)
    assert [sorted(m.question.text for m in g.members) for g in alone] == [[e.question.text for e in weak]]
    # A stricter false discovery rate than the topic's adjusted p-value: not a gap.
    strict = find_gaps(DAY1, low + usual + weak, 0.4, [], 0.3, 2, golden=GOLDEN_SCORES, alpha=1e-6)
    assert len(strict) == 1


def test_a_gap_closes_only_when_its_questions_pass_the_threshold_and_no_longer_score_low_as_a_group():
    from rag_pipeline.core.monitoring.gaps import closed

    gap = _gap("g", [1.0, 0.0])
    above_but_low = [_asked(f"q{i}", 0.45 + 0.01 * i, [1.0, 0.0]) for i in range(6)]
    assert closed(gap, above_but_low, 0.4, DAY2) is not None  # the threshold alone would close it
    assert closed(gap, above_but_low, 0.4, DAY2, golden=GOLDEN_SCORES, alpha=0.05) is None
    answered = [_asked(f"q{i}", GOLDEN_SCORES[i * 2], [1.0, 0.0]) for i in range(6)]
    done = closed(gap, answered, 0.4, DAY2, golden=GOLDEN_SCORES, alpha=0.05)
    assert done is not None and done.closed_by == "kb:a.md" and done.closed_on == DAY2


def test_coverage_weighs_the_question_terms_by_idf_and_the_score_ranks_both_measures_among_answerable_cases(pipeline):
    import math as m

    from rag_pipeline.core.monitoring.evidence import idf_coverage
    from rag_pipeline.core.monitoring.gap_threshold import EvidenceScale

    _, store, _, _, _ = pipeline
    # The store's statistics: one chunk a page; "refund" in one page, "invoic" in three, "dashboard" in none.
    chunks, frequencies = store.search.document_frequencies(["refund", "invoic", "dashboard", "refund"])
    assert chunks == 4 and frequencies == {"dashboard": 0, "invoic": 3, "refund": 1}
    idf = {t: m.log(1 + (chunks - df + 0.5) / (df + 0.5)) for t, df in frequencies.items()}
    share = idf_coverage(["refund", "dashboard", "refund"], {"refund", "invoic"}, idf)
    assert share == pytest.approx(idf["refund"] / (idf["refund"] + idf["dashboard"]))
    assert idf_coverage([], {"refund"}, idf) == 1.0
    # Percentile ranks among the answerable cases (at or under), averaged; no evidence at all is 0.
    scale = EvidenceScale.of([Evidence(Question("a"), s, coverage=c) for s, c in
                              [(0.2, 1.0), (0.4, 0.5), (0.6, 0.8), (0.8, 0.9)]])
    assert scale.cosines == (0.2, 0.4, 0.6, 0.8) and scale.coverages == (0.5, 0.8, 0.9, 1.0)
    [low, high, none] = scale.apply([Evidence(Question("q"), 0.5, coverage=0.85), Evidence(Question("r"), 0.9, coverage=1.0),
                                     Evidence(Question("s"), None, coverage=1.0)])
    assert (low.strength, high.strength, none.strength) == (pytest.approx((2 / 4 + 2 / 4) / 2), 1.0, 0.0)
    assert low.weak(0.6) and not high.weak(0.6) and none.weak(0.01)
    # Without answerable cases to rank among, the cosine is the score.
    assert EvidenceScale().score(Evidence(Question("q"), 0.37, coverage=0.1)) == 0.37


def test_questions_that_hold_the_same_share_have_the_same_coverage_to_the_last_bit():
    """Two questions differing only by a term of the same idf (two drugs no chunk names, say) cover
    the same share. Summed in a set's order, which string hashing changes from process to process,
    such ties came out one unit in the last place apart in some processes, and the golden scale's
    rank (at or under) made that a whole rank: a threshold that moved between runs (issue 36)."""
    import random

    from rag_pipeline.core.monitoring.evidence import idf_coverage

    draw = random.Random(36)
    idf = {f"term{i}": draw.uniform(0.05, 9.0) for i in range(40)}
    idf["ivermectin"] = idf["albendazol"] = 8.3  # held nowhere: the same idf
    for _ in range(300):
        shared = draw.sample(sorted(t for t in idf if t.startswith("term")), draw.randint(2, 8))
        held = set(draw.sample(shared, draw.randint(1, len(shared))))
        one = idf_coverage([*shared, "ivermectin"], held, idf)
        assert idf_coverage([*shared, "albendazol"], held, idf) == one
        assert idf_coverage(["ivermectin", *reversed(shared)], held, idf) == one


def test_the_topic_cut_is_the_stated_quantile_of_the_golden_questions_pairwise_distances():
    from scipy.spatial.distance import pdist

    from rag_pipeline.core.errors import InputError
    from rag_pipeline.core.monitoring.gap_topics import calibrated_distance

    golden = np.random.default_rng(3).normal(size=(15, 32))
    pairs = np.sort(pdist(golden, metric="cosine"))
    for quantile in (0.05, 0.2, 0.5):
        # Nearest rank: the smallest distance with at least that share of the 105 pairs at or under it.
        assert calibrated_distance(golden, quantile) == pytest.approx(pairs[math.ceil(quantile * len(pairs)) - 1])
    with pytest.raises(InputError, match="at least 2"):
        calibrated_distance(golden[:1], 0.05)


def _topic(axis: int, members: range, closeness: float, dims: int = 64) -> list[np.ndarray]:
    """Unit vectors `1 - closeness` apart from one another (cosine distance), each the shared axis
    plus a direction of its own: a topic as wide as the closeness says."""
    eye = np.eye(dims)
    return [math.sqrt(closeness) * eye[axis] + math.sqrt(1 - closeness) * eye[i] for i in members]


def test_a_topic_wider_than_the_old_fixed_cut_is_one_gap_and_two_unrelated_topics_stay_apart():
    from rag_pipeline.core.monitoring.gap_topics import calibrated_distance
    from rag_pipeline.core.monitoring.gaps import find_gaps

    # Golden questions on unrelated subjects (64-dim, seeded): the closest 5% of their pairs are about
    # 0.8 apart, and that is the cut.
    cut = calibrated_distance(np.random.default_rng(11).normal(size=(40, 64)), 0.05)
    assert 0.7 < cut < 0.9
    # Two missing topics whose questions are 0.6 apart (wider than the fixed 0.5 cut of before,
    # closer than the golden pairs), unrelated to each other (1.0 apart); ordinary questions each
    # on a subject of its own, with the golden answerable cases' scores.
    payroll = [_asked(f"payroll {i}", 0.45 + 0.01 * i, v) for i, v in enumerate(_topic(0, range(1, 7), 0.4))]
    badges = [_asked(f"badges {i}", 0.46 + 0.01 * i, v) for i, v in enumerate(_topic(7, range(8, 13), 0.4))]
    usual = [_asked(f"usual {i}", GOLDEN_SCORES[i], np.eye(64)[20 + i]) for i in range(12)]
    day = payroll + usual + badges
    found = find_gaps(DAY1, day, threshold=0.4, earlier=[], distance=cut, min_queries=2, golden=GOLDEN_SCORES)
    assert sorted(sorted(m.question.text for m in g.members) for g in found) == [
        [e.question.text for e in badges], [e.question.text for e in payroll]]
    # At the fixed cut of before, each question of those topics is a topic alone: no gap at all.
    assert find_gaps(DAY1, day, 0.4, [], 0.5, 2, golden=GOLDEN_SCORES) == []


def test_the_benchmarks_predictors_score_a_best_chunk_standing_out_above_look_alikes():
    # benchmarks/gaps.py reports them as a third evidence measure (not used by the product).
    from benchmarks.gap_predictors import nqc, standout

    alike, apart = [0.62, 0.61, 0.60, 0.60], [0.62, 0.30, 0.25, 0.20]
    assert standout(apart) == pytest.approx(0.62 - np.mean(apart)) and standout(alike) < standout(apart)
    assert nqc(apart) == pytest.approx(np.std(apart) / np.mean(apart)) and nqc(alike) < nqc(apart)
    assert standout([]) == nqc([]) == nqc([-0.1, -0.2]) == 0.0
