"""One day's coverage gaps: the day's questions searched, the threshold calibrated on the golden
set, topics found, earlier gaps continued or closed, all of it stored; and how a day's gaps are
shown (check verdict, report section, `monitor --json`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from rag_pipeline.config import ConfigError, PipelineConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.monitoring import sampling
from rag_pipeline.core.monitoring.evidence import Question, best_evidence, evidence_retriever
from rag_pipeline.core.monitoring.gap_threshold import WeakThreshold, golden_threshold
from rag_pipeline.core.monitoring.gaps import Gap, Member, closed, find_gaps
from rag_pipeline.core.render import inline, number, table
from rag_pipeline.core.storage import Store
from rag_pipeline.core.verdicts import Table, Verdict

GAP_COLUMNS = ["label", "count", "share", "first_seen", "status", "closed_by", "nearest_doc", "best_score", "examples"]


@dataclass
class GapDay:
    """The gaps a day lists (open ones largest first, then those closed that day) and its measures."""

    day: date
    threshold: WeakThreshold
    gaps: list[Gap]
    examined: int
    window: int
    weak: int
    # The largest share of a day each open gap held on an earlier day (by gap id): whether a gap over
    # the warning share today crosses it for the first time.
    earlier_peaks: Mapping[str, float] = field(default_factory=dict)

    @property
    def open_gaps(self) -> list[Gap]:
        return [g for g in self.gaps if not g.closed_by]

    @property
    def new_gaps(self) -> list[Gap]:
        return [g for g in self.gaps if g.new_on(self.day)]

    def measures(self) -> dict[str, float]:
        share = sum(g.share for g in self.open_gaps)
        return {"window_queries": float(self.window), "examined_queries": float(self.examined),
                "weak_queries": float(self.weak), "weak_share": self.weak / self.examined if self.examined else 0.0,
                "open_gaps": float(len(self.open_gaps)), "new_gaps": float(len(self.new_gaps)),
                "closed_gaps": float(len(self.gaps) - len(self.open_gaps)), "gap_share": share,
                **self.threshold.measures()}

    def rows(self) -> list[dict]:
        """The table view's rows: one per gap, with its first three questions as examples."""
        return [{"label": g.label, "count": g.count, "share": g.share, "first_seen": g.first_seen.isoformat(),
                 "status": g.status, "closed_by": g.closed_by or "", "nearest_doc": g.nearest_doc or "",
                 "best_score": g.best_score, "examples": " | ".join(m.question.text for m in g.members[:3])}
                for g in self.gaps]

    def crossing(self, share_warn: float) -> list[Gap]:
        """The open gaps over `share_warn` of the day that never were on an earlier day: new ones, and
        earlier ones that grew over it today (said once; while a gap stays over, it is only listed)."""
        return [g for g in self.open_gaps
                if g.share > share_warn and self.earlier_peaks.get(g.gap_id, 0.0) <= share_warn]

    def verdict(self, share_warn: float) -> Verdict:
        """`no_large_new_gap` (WARN): no gap first crosses `share_warn` of the day's questions this day."""
        large = self.crossing(share_warn)
        if large:
            first = large[0]
            since = "new today" if first.first_seen == self.day else f"open since {first.first_seen.isoformat()}"
            summary = (f"{len(large)} coverage gap(s) first over {share_warn:.0%} of the day's questions; largest: "
                       f"'{first.label}' ({since}), {first.count} questions ({first.share:.0%}), e.g. "
                       f"{first.members[0].question.text[:120]}")
        else:
            above = sum(1 for g in self.open_gaps if g.share > share_warn)
            summary = (f"no coverage gap first over {share_warn:.0%} of the day's {self.examined} questions "
                       f"({len(self.open_gaps)} open, {len(self.new_gaps)} new, {above} over it since an earlier "
                       f"day; weak-evidence threshold {self.threshold.value:.4f})")
        numbers = {"largest_new_gap_share": round(max((g.share for g in self.new_gaps), default=0.0), 4),
                   "largest_gap_share": round(max((g.share for g in self.open_gaps), default=0.0), 4),
                   "new_gaps": len(self.new_gaps), "crossing_gaps": len(large),
                   "weak_threshold": round(self.threshold.value, 6)}
        return Verdict(not large, summary, numbers, {"gaps": Table(self.rows(), GAP_COLUMNS)})


def gap_row(gap: Gap, day: date, threshold: float) -> dict:
    """A gap as a row of the `coverage_gaps` table."""
    members = [{"query": m.question.text, "tenant": m.question.tenant, "roles": list(m.question.roles),
                "best_score": m.best_score, "score": m.score} for m in gap.members]
    return {"day": day, "gap_id": gap.gap_id, "first_seen": gap.first_seen, "last_seen": gap.last_seen,
            "status": gap.status, "label": gap.label, "question_count": gap.count, "share": gap.share,
            "best_score": gap.best_score, "threshold": threshold, "nearest_doc": gap.nearest_doc,
            "nearest_section": gap.nearest_section, "tenants": gap.tenants, "members": json.dumps(members),
            "centroid": list(gap.centroid), "closed_by": gap.closed_by}


def gap_from_row(row: Mapping) -> Gap:
    """A stored row back as a gap."""
    members = tuple(Member(Question(m["query"], m.get("tenant"), tuple(m.get("roles") or ())), m.get("best_score"),
                           m.get("score"))
                    for m in json.loads(row["members"]))
    closed_on = row["day"] if row["status"] == "closed" else None
    return Gap(gap_id=row["gap_id"], first_seen=row["first_seen"], last_seen=row["last_seen"], label=row["label"],
               members=members, share=float(row["share"]), nearest_doc=row["nearest_doc"],
               nearest_section=row["nearest_section"] or "",
               best_score=None if row["best_score"] is None else float(row["best_score"]),
               centroid=tuple(float(x) for x in row["centroid"]), closed_by=row["closed_by"], closed_on=closed_on)


def day_gaps(store: Store, day: date) -> list[Gap]:
    """The gaps stored for a day, open ones largest first, then those closed that day."""
    return [gap_from_row(row) for row in store.gaps.of_day(day)]


def coverage_gaps_day(config: PipelineConfig, store: Store, embedder: Embedder, day: date) -> GapDay:
    """Find, continue and close the coverage gaps of one day, and store them (see gaps.py)."""
    monitoring = config.monitoring
    if monitoring.query_log is None:
        raise ConfigError("no monitoring.query_log configured in the pipeline config: name the folder of the query log")
    log = sampling.read_query_log(monitoring.query_log)
    in_window = sampling.window(log.queries, day, monitoring.days_back)
    # Seeded apart from the production sample: the two draws need not be the same questions.
    examined = sampling.stratified_sample(in_window, monitoring.gap_sample_size, seed=f"gaps:{day.isoformat()}")
    retriever = evidence_retriever(store, embedder, config.retrieval)
    threshold = golden_threshold(load_golden_set(config.golden_set).cases, retriever, monitoring.gap_answerable_flag_rate,
                                 monitoring.gap_topic_quantile)
    evidence = threshold.scale.apply(best_evidence(retriever, [Question(q.query, q.tenant, q.roles) for q in examined]))
    earlier = [gap_from_row(row) for row in store.gaps.open_before(day)]
    golden = threshold.answerable_scores
    found = find_gaps(day, evidence, threshold.value, earlier, threshold.topic_distance, monitoring.gap_min_queries,
                      golden, monitoring.gap_alpha)
    continued = {g.gap_id for g in found}
    closing = []
    for gap in earlier:
        if gap.gap_id not in continued:
            now = threshold.scale.apply(best_evidence(retriever, [m.question for m in gap.members]))
            done = closed(gap, now, threshold.value, day, golden, monitoring.gap_alpha)
            if done is not None:
                closing.append(done)
    result = GapDay(day, threshold, found + sorted(closing, key=lambda g: (-g.count, g.gap_id)), len(examined),
                    len(in_window), sum(1 for e in evidence if e.weak(threshold.value)),
                    store.gaps.peak_shares_before(day))
    with store.transaction():
        store.gaps.save_day(day, [gap_row(g, day, threshold.value) for g in result.gaps])
        store.records.save_monitoring(day, "gaps", {**result.measures(), "gap_alpha": monitoring.gap_alpha,
                                                     "threshold_rule": threshold.rule})
    return result


def gaps_markdown(gaps: Sequence[Gap], measures: Mapping | None) -> str:
    """The drift report's section on coverage gaps (every text escaped)."""
    lines = ["## Coverage gaps", ""]
    if measures is None:
        return "\n".join([*lines, "_coverage_gaps was not materialized for this day_", ""])
    lines += [
        "Topics of the day's questions whose evidence in the served index, as the asker may see it (the dense cosine "
        "of the best chunk and the idf-weighted share of the question's terms its best BM25 chunk holds, each "
        "ranked among the golden set's answerable cases, averaged), is lower, as a group, than those cases' "
        "(one-sided Mann-Whitney, "
        f"Benjamini-Hochberg over the day's topics at {number(measures.get('gap_alpha'), 2)}), and groups of weak "
        f"questions: under {number(measures.get('weak_threshold'), 4)} ({inline(measures.get('threshold_rule', ''))}). "
        f"Topics: average linkage on cosine distance cut at {number(measures.get('topic_distance'), 4)}, the "
        f"{number(measures.get('topic_quantile'), 2)} quantile of the distances between the golden set's answerable "
        "questions. "
        f"Weak: {measures.get('weak_queries', 0):.0f} of {measures.get('examined_queries', 0):.0f} questions examined.",
        "",
        table([{"label": g.label, "count": g.count, "share": g.share, "first_seen": g.first_seen.isoformat(),
                "status": g.status + (f" by {g.closed_by}" if g.closed_by else ""),
                "nearest": f"{g.nearest_doc or ''} ({g.nearest_section})" if g.nearest_doc else "",
                "best_score": g.best_score, "tenants": g.tenants,
                "examples": " | ".join(m.question.text for m in g.members[:3])} for g in gaps],
              ["label", "count", "share", "first_seen", "status", "nearest", "best_score", "tenants", "examples"],
              headers=["topic", "questions", "share", "first seen", "status", "nearest document (section)",
                       "best cosine", "tenants", "examples"], limit=None),
        "",
    ]
    return "\n".join(lines)
