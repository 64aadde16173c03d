"""The drift report on the bundled query log, with the real embedding model: the injected shift
(a new product, a deleted page, chatty phrasing from 2026-11-26) is caught, the ordinary days are not."""

import json
from datetime import date, timedelta

import pytest

from rag_pipeline.config import load_config
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.monitoring import sampling
from rag_pipeline.core.monitoring.daily import draw_sample, golden_drift
from rag_pipeline_tests.conftest import SAMPLE_CONFIG

ORDINARY_DAYS = [date(2026, 11, 12) + timedelta(days=i) for i in range(14)]  # 11-12 .. 11-25
SHIFT_DAYS = [date(2026, 11, 26) + timedelta(days=i) for i in range(4)]  # 11-26 .. 11-29

# The real model: drift is measured in its space.
pytestmark = pytest.mark.slow


def _scenarios(folder) -> dict[str, str]:
    """Query text -> the scenario the log generator marked it with (`_scenario`; normal when absent)."""
    labels = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and isinstance(row.get("query"), str):
                labels[row["query"]] = row.get("_scenario", "normal")
    return labels


@pytest.fixture(scope="module")
def reports():
    config = load_config(SAMPLE_CONFIG)
    embedder = make_embedder(config.embedding)  # the real model: drift is measured in its space
    log = sampling.read_query_log(config.monitoring.query_log)
    out = {}
    for day in ORDINARY_DAYS + SHIFT_DAYS:
        _, sample = draw_sample(config, log, day)
        out[day] = golden_drift(config, embedder, day, [q.query for q in sample])
    return out, _scenarios(config.monitoring.query_log)


def test_shift_days_pass_the_golden_calibrated_threshold_and_ordinary_days_do_not(reports):
    by_day, _ = reports
    flagged = [day for day in ORDINARY_DAYS if by_day[day].drifted]
    assert flagged == [], {str(d): (round(by_day[d].distance, 4), round(by_day[d].threshold, 4)) for d in flagged}
    for day in SHIFT_DAYS:
        assert by_day[day].drifted, (day, by_day[day].distance, by_day[day].threshold)
    # The threshold is the golden set's own: days with samples of the same size share it.
    by_size = {}
    for report in by_day.values():
        by_size.setdefault(report.production_queries, set()).add(report.threshold)
    assert all(len(thresholds) == 1 for thresholds in by_size.values())


def test_the_new_products_queries_lead_the_candidates(reports):
    by_day, scenario = reports
    for day in SHIFT_DAYS:
        leading = [scenario[c["query"]] for c in by_day[day].candidates[:5]]
        assert leading[0] == "new_topic" and leading.count("new_topic") >= 4, (day, by_day[day].candidates[:5])
    # Before the shift, no candidate is about the new product (the log marks none as such).
    assert all(scenario[c["query"]] == "normal" for day in ORDINARY_DAYS for c in by_day[day].candidates)
