"""The daily monitoring steps: a production sample run through retrieval, then the drift report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from rag_pipeline.config import ConfigError, PipelineConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.errors import DomainError
from rag_pipeline.core.evaluation.golden.doc_refs import Resolver, known_documents
from rag_pipeline.core.evaluation.golden.holdout import WITHHELD_QUESTION, withheld
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.ingestion.lifecycle import freshness_report
from rag_pipeline.core.monitoring import sampling
from rag_pipeline.core.monitoring.drift import DriftReport, drift_report
from rag_pipeline.core.monitoring.drift_plots import render, report_markdown
from rag_pipeline.core.monitoring.gap_day import day_gaps, gaps_markdown
from rag_pipeline.core.monitoring.gap_plots import gap_traffic_plot
from rag_pipeline.core.plots import markdown_image
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store


class MonitoringError(DomainError):
    """A day that cannot be monitored yet (no sample, too few queries); the message says what to do."""


def no_result_threshold(store: Store) -> tuple[float, str]:
    """The threshold calibrated by the latest dense or hybrid golden evaluation (a best-cosine floor)."""
    latest = store.records.latest_no_result_threshold()
    if latest is None:
        return 0.0, "no golden evaluation yet: never counted as no-result"
    eval_id, threshold = latest
    return threshold, f"from evaluation {eval_id}"


def draw_sample(config: PipelineConfig, log: sampling.QueryLog, day: date) -> tuple[list[sampling.LoggedQuery], list[sampling.LoggedQuery]]:
    """(the queries of the day's window, its deterministic tenant-stratified sample)."""
    in_window = sampling.window(log.queries, day, config.monitoring.days_back)
    return in_window, sampling.stratified_sample(in_window, config.monitoring.sample_size, seed=day.isoformat())


def sample_day(config: PipelineConfig, store: Store, embedder: Embedder, day: date) -> tuple[sampling.SampleReport, dict, sampling.QueryLog]:
    """Draw the day's deterministic sample, run it, store it; return the report, measures and log."""
    if config.monitoring.query_log is None:
        raise ConfigError("no monitoring.query_log configured in the pipeline config: name the folder of the query log")
    log = sampling.read_query_log(config.monitoring.query_log)
    in_window, sample = draw_sample(config, log, day)
    threshold, _ = no_result_threshold(store)
    stale = {s["doc_id"] for source in config.sources
             for s in freshness_report(store, source, config.lifecycle.max_staleness_hours).stale}
    retriever = Retriever(store, embedder, config.retrieval)
    report = sampling.run_sample(sample, retriever, threshold, day, len(in_window), stale)
    measures = {**report.measures(), "malformed_lines": float(len(log.malformed)), "no_result_threshold": threshold}
    # The refused lines themselves (the first ones) are kept with the day, for the drift report to name.
    store.records.save_sample(day, report.results, {**measures, "refused_lines": sampling.refused_lines(log)})
    return report, measures, log


def golden_drift(config: PipelineConfig, embedder: Embedder, day: date, queries: Sequence[str],
                 hit_docs: Sequence[Sequence[str]] = (), resolver: Resolver | None = None) -> DriftReport:
    """The drift report of one day's sampled queries against the configured golden set; gold
    references resolved to document ids by `resolver` (paths as the evaluation resolves them; one
    that matches no document is kept as written)."""
    golden = load_golden_set(config.golden_set)
    questions = [c.question for c in golden.cases]
    # Encoded apart: batched with the day's queries, padding would nudge the golden vectors and
    # with them the threshold, which must be the golden set's alone.
    golden_vectors = embedder.encode(questions)
    # Holdout questions count in the distribution, but are never shown as a nearest neighbour.
    shown = [WITHHELD_QUESTION if withheld(c) else c.question for c in golden.cases]
    return drift_report(
        day.isoformat(), queries, embedder.encode(list(queries)), questions,
        [f"{c.question} {c.reference}" for c in golden.cases], [c.slice for c in golden.cases],
        golden_vectors, [[_document(ref, resolver) for ref in c.gold_docs] for c in golden.cases], hit_docs,
        candidates=config.monitoring.candidates, bootstrap_samples=config.monitoring.bootstrap_samples,
        alpha=config.monitoring.alpha, shown_questions=shown,
    )


def _document(ref: str, resolver: Resolver | None) -> str:
    if resolver is None:
        return ref
    doc_id, _ = resolver.document_id(ref)
    return doc_id or ref


@dataclass
class DriftDay:
    """One day's drift report, the files it was written to, and the sample measures it shows."""

    report: DriftReport
    path: Path
    plot: Path
    measures: dict
    # The coverage gaps section (markdown, escaped) and its traffic plot, when a day listed gaps.
    gaps: str = ""
    gap_plot: Path | None = None

    def markdown(self) -> str:
        """The report's text with its plots embedded (for Dagster metadata: a file link would not render)."""
        gap_image = f"\n{markdown_image(self.gap_plot, 'gap traffic')}\n" if self.gap_plot else ""
        return report_markdown(self.report, self.measures, markdown_image(self.plot, "drift overview")) + "\n" \
            + self.gaps + gap_image


def drift_day(config: PipelineConfig, store: Store, embedder: Embedder, day: date, folder: Path) -> DriftDay:
    """The day's sample against the golden set; the report and its plots are written to `folder`."""
    rows = store.records.sample_rows(day)
    sample_measures = next((m for m in store.records.monitoring_history("sample", day) if m["day"] == day), None)
    if sample_measures is None:
        raise MonitoringError(f"no production sample for {day}: materialize production_sample for that day first")
    if len(rows) < 2:
        raise MonitoringError(
            f"the production sample of {day} holds {len(rows)} queries (window of {config.monitoring.days_back} days in "
            f"{config.monitoring.query_log}): too few to compare with the golden set; is the query log being written?"
        )
    report = golden_drift(config, embedder, day, [r["query"] for r in rows], [r["top_docs"] for r in rows],
                          Resolver(known_documents(store)))
    report.refused_lines = list(sample_measures.get("refused_lines") or [])
    report.refused_count = int(sample_measures.get("malformed_lines") or 0)
    store.records.save_monitoring(day, "drift", {"distance": report.distance, "threshold": report.threshold,
                                         "drifted": report.drifted,
                                         "no_result_rate": sample_measures.get("no_result_rate", float("nan")),
                                         # Kept for triage: the queries most unlike the golden set.
                                         "candidates": report.candidates})
    trend = store.records.monitoring_history("drift", day)
    measures = {k: v for k, v in sample_measures.items() if k not in ("day", "refused_lines")}
    gap_measures = next((m for m in store.records.monitoring_history("gaps", day) if m["day"] == day), None)
    gaps = gaps_markdown(day_gaps(store, day), gap_measures)
    gap_plot = gap_traffic_plot(store.gaps.traffic(day), folder / f"gaps-{day.isoformat()}.png")
    sections = "\n" + gaps + (f"\n![gap traffic]({gap_plot.name})\n" if gap_plot else "")
    markdown, pngs = render(report, measures, trend, folder, sections)
    return DriftDay(report, markdown, pngs[0], measures, gaps, gap_plot)
