"""Query log reading, the deterministic stratified sample, and the drift statistics."""

import json
from datetime import date, datetime

import numpy as np
import pytest

from rag_pipeline.core.monitoring.drift import calibrate_threshold, drift_report, mmd2
from rag_pipeline.core.monitoring.sampling import (
    LoggedQuery,
    read_query_log,
    stratified_sample,
    window,
)


def _line(day: str, query: str, tenant="acme", **extra) -> str:
    return json.dumps({"timestamp": f"{day}T10:00:00Z", "query": query, "tenant": tenant, "roles": ["customer"], **extra})


def test_malformed_lines_are_counted_with_their_position(tmp_path):
    (tmp_path / "2026-11-01.jsonl").write_text("\n".join([
        _line("2026-11-01", "refund window"),
        "{not json",
        json.dumps({"timestamp": "2026-11-01T10:00:00Z", "query": ""}),
        json.dumps(["a", "list"]),
        json.dumps({"timestamp": "yesterday", "query": "x"}),
        _line("2026-11-01", "sso setup", tenant=None, latency_ms=120, feedback="up"),
    ]) + "\n")
    (tmp_path / "notes.txt").write_text("not a log file")
    log = read_query_log(tmp_path)
    assert [q.query for q in log.queries] == ["refund window", "sso setup"]
    assert [(m["file"], m["line"]) for m in log.malformed] == [("2026-11-01.jsonl", n) for n in (2, 3, 4, 5)]
    assert "query" in log.malformed[1]["reason"] and "timestamp" in log.malformed[3]["reason"]
    assert log.queries[1].latency_ms == 120 and log.queries[1].tenant is None


def test_gzipped_nested_and_epoch_logs_are_read_and_bad_bytes_are_one_malformed_line(tmp_path):
    import gzip

    (tmp_path / "2026" / "11").mkdir(parents=True)
    lines = [
        json.dumps({"timestamp": 1_793_527_200, "query": "epoch seconds", "roles": "customer, admin"}).encode(),
        b'{"timestamp": "2026-11-01T10:00:00Z", "query": "caf\xe9 bad bytes"}',  # Latin-1, not UTF-8
        json.dumps({"timestamp": 1_793_527_200_000, "query": "epoch millis"}).encode(),
    ]
    with gzip.open(tmp_path / "2026" / "11" / "01.jsonl.gz", "wb") as handle:
        handle.write(b"\n".join(lines) + b"\n")
    (tmp_path / "extra.ndjson").write_text(_line("2026-11-02", "ndjson line") + "\n")
    log = read_query_log(tmp_path)
    assert [q.query for q in log.queries] == ["epoch seconds", "epoch millis", "ndjson line"]
    assert log.queries[0].timestamp == log.queries[1].timestamp == datetime(2026, 11, 1, 10, 0)
    assert log.queries[0].roles == ("customer", "admin")
    assert log.malformed == [{"file": "2026/11/01.jsonl.gz", "line": 2, "reason": "not UTF-8 (byte 51)"}]
    assert log.files == 2


def _queries(n: int, tenants=("acme", "acme", "globex", None)) -> list[LoggedQuery]:
    return [LoggedQuery(datetime(2026, 11, 1 + i % 10, 9, i % 60), f"q{i}", tenants[i % len(tenants)], ("customer",))
            for i in range(n)]


def test_sample_is_deterministic_and_stratified_by_tenant():
    queries = _queries(400)
    first = stratified_sample(queries, 40, seed="2026-11-10")
    assert first == stratified_sample(list(reversed(queries)), 40, seed="2026-11-10")
    assert first != stratified_sample(queries, 40, seed="2026-11-11")
    tenants = [q.tenant for q in first]
    assert (tenants.count("acme"), tenants.count("globex"), tenants.count(None)) == (20, 10, 10)


def test_window_covers_the_last_days_inclusive():
    queries = _queries(100)
    picked = window(queries, date(2026, 11, 5), 3)
    assert {q.timestamp.day for q in picked} == {3, 4, 5}


def test_mmd_and_threshold_separate_a_new_cluster():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(8, 16))
    golden = np.vstack([c + 0.3 * rng.normal(size=(10, 16)) for c in centres])
    same = np.vstack([centres[i % 8] + 0.3 * rng.normal(size=16) for i in range(40)])
    new_topic = rng.normal(size=16) * 3
    shifted = np.vstack([same[:24], new_topic + 0.3 * rng.normal(size=(16, 16))])
    threshold, null = calibrate_threshold(golden, 40, samples=300)
    bandwidth = float(np.median(((golden[:, None] - golden[None]) ** 2).sum(-1)[np.triu_indices(80, 1)]))
    assert mmd2(same, golden, bandwidth) < threshold < mmd2(shifted, golden, bandwidth)
    assert len(null) == 300 and null == sorted(null)


def test_threshold_resamples_equal_the_direct_mmd_of_each_split():
    """The block-sum shortcut of the calibration against mmd2 on the same random splits."""
    import random

    from rag_pipeline.core.monitoring.drift import median_bandwidth

    golden = np.random.default_rng(3).normal(size=(31, 8))
    threshold, null = calibrate_threshold(golden, 9, samples=50, alpha=0.1, seed=7)
    rng, indexes, direct = random.Random(7), list(range(31)), []
    for _ in range(50):
        rng.shuffle(indexes)
        direct.append(mmd2(golden[indexes[:9]], golden[indexes[9:]], median_bandwidth(golden)))
    assert np.allclose(null, sorted(direct), atol=1e-12)
    assert threshold == sorted(direct)[44]  # nearest rank: the 45th of 50 for the 0.9 quantile


def test_a_golden_set_too_small_to_calibrate_is_refused_with_its_size():
    with pytest.raises(ValueError, match="has 3 questions"):
        calibrate_threshold(np.eye(3), 10, samples=100)


def test_candidates_put_a_topic_many_users_ask_above_one_odd_query():
    rng = np.random.default_rng(1)
    golden = np.eye(6)[:5]  # five golden topics; nothing in direction 6
    new_topic = [np.eye(6)[5] + 0.1 * rng.normal(size=6) for _ in range(4)]
    covered = [np.eye(6)[i] + 0.05 * rng.normal(size=6) for i in (0, 1, 2)]
    odd = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 0.4])  # between two golden topics, alone
    production = np.vstack([covered[0], new_topic[0], odd, covered[1], new_topic[1], new_topic[2],
                            covered[2], new_topic[3], new_topic[3]])
    queries = ["near a", "new 1", "odd one", "near b", "new 2", "new 3", "near c", "new 4", "NEW 4"]
    report = drift_report("2026-11-29", queries, production, [f"g{i}" for i in range(5)], [f"g{i}" for i in range(5)],
                          ["s1", "s1", "s2", "s2", "s2"], golden, [["x:1"]] * 5, bootstrap_samples=100)
    ranked = [c["query"] for c in report.candidates]
    assert set(ranked[:4]) == {"new 1", "new 2", "new 3", "new 4"}
    assert ranked.index("odd one") < min(ranked.index(q) for q in ("near a", "near b", "near c"))
    excess = [c["excess_density"] for c in report.candidates]
    assert excess == sorted(excess, reverse=True)
    assert len(ranked) == 8  # the repeated query (any case) is listed once
    assert all(c["nearest_golden"] in {f"g{i}" for i in range(5)} for c in report.candidates)
    assert sum(report.slice_mix.values()) == 9 and report.slice_mix["s1"] >= 2  # near a, near b


def test_topic_text_keeps_what_is_asked_not_how():
    from rag_pipeline.core.monitoring.drift import topic_text

    assert topic_text("Hey, how do I change my invoice template?") == "change invoice template"
    assert topic_text("invoice template change") == "invoice template change"
    assert topic_text("What's error TLY-4012?") == "whats error tly-4012"


def test_the_smallest_detectable_share_is_where_a_foreign_topic_reaches_the_threshold():
    from rag_pipeline.core.monitoring.drift import min_detectable_share

    # Five golden questions, pairwise squared distance 2 (orthonormal): bandwidth 2, every kernel e^-1.
    golden = np.eye(6)[:5]
    e_min = min_detectable_share(golden, 0.01, bandwidth=2.0)
    assert e_min == pytest.approx(np.sqrt(0.01 / (1 + np.exp(-1))))
    # A share e_min of identical questions on a sixth axis (kernel e^-1 to every golden one, so not
    # wholly foreign) stays under the threshold: e² (1 + e^-1 - 2 e^-1) < 0.01.
    assert e_min**2 * (1 - np.exp(-1)) < 0.01
    # A truly foreign topic (kernel 0 to the golden questions) reaches the threshold exactly at e_min.
    assert e_min**2 * (1 + np.exp(-1)) == pytest.approx(0.01)
    assert min_detectable_share(golden, 50.0, bandwidth=2.0) == 1.0  # never more than the whole day


def test_the_report_states_the_smallest_shift_it_could_see():
    from rag_pipeline.core.monitoring.drift_plots import report_markdown

    golden = np.eye(8)[:6]
    report = drift_report("2026-11-29", ["a", "b", "c"], np.eye(8)[:3] + 0.01, [f"g{i}" for i in range(6)],
                          [f"g{i}" for i in range(6)], ["s"] * 6, golden, [["x:1"]] * 6, bootstrap_samples=100)
    assert 0 < report.min_detectable_share <= 1
    assert f"less than **{report.min_detectable_share:.0%}** of the day" in report_markdown(report, {}, "")
    verdict = report.verdict()
    assert verdict.numbers["min_detectable_share"] == round(report.min_detectable_share, 4)
    assert report.drifted or "cannot be seen" in verdict.summary


def test_pages_production_reaches_without_a_golden_case_are_listed_by_hits():
    golden = np.eye(8)[:6]
    hits = [["kb:a.md", "kb:b.md"], ["kb:c.md"], ["kb:c.md", "kb:a.md"], [], ["web:d.html"]]
    report = drift_report("2026-11-29", list("abcde"), np.eye(8)[:5] + 0.01, [f"g{i}" for i in range(6)],
                          [f"g{i}" for i in range(6)], ["s"] * 6, golden, [["kb:a.md"]] * 6, hits, bootstrap_samples=100)
    # Only the first document of each query counts; kb:a.md has golden cases; kb:b.md was never first.
    assert report.uncovered_pages == [{"source": "kb", "doc_id": "kb:c.md", "hits": 2},
                                      {"source": "web", "doc_id": "web:d.html", "hits": 1}]
