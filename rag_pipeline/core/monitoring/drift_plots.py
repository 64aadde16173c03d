"""The drift report as markdown with matplotlib PNG plots (looked at by a person, attached in Dagster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from rag_pipeline.core.monitoring.drift import UNRESOLVED, DriftReport, PageCounts, page_source
from rag_pipeline.core.plots import label, pyplot, save
from rag_pipeline.core.render import Markdown, inline, number, table

# Pages listed per source in the report (each source's total counts them all).
MAX_PAGES_PER_SOURCE = 25


def render(report: DriftReport, measures: Mapping[str, float], trend: Sequence[Mapping], folder: Path,
           sections: str = "") -> tuple[Path, list[Path]]:
    """Write `drift-<day>.md` and its PNGs into `folder`; return (markdown path, png paths).
    `sections`: markdown appended to the report (built and escaped by its caller)."""
    folder.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    from matplotlib import dates
    pngs = []

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0][0]
    bins = range(0, max([*report.length_production, *report.length_golden, 1]) + 2, 2)
    ax.hist(report.length_golden, bins=bins, alpha=0.6, density=True, label=f"golden ({report.golden_cases})")
    ax.hist(report.length_production, bins=bins, alpha=0.6, density=True, label=f"production ({report.production_queries})")
    ax.set_title("Query length (words)")
    ax.legend()

    ax = axes[0][1]
    names = sorted(set(report.golden_slice_mix) | set(report.slice_mix))
    golden_total = sum(report.golden_slice_mix.values()) or 1
    prod_total = sum(report.slice_mix.values()) or 1
    positions = range(len(names))
    ax.barh([p - 0.2 for p in positions], [report.golden_slice_mix.get(n, 0) / golden_total for n in names], 0.4, label="golden")
    ax.barh([p + 0.2 for p in positions], [report.slice_mix.get(n, 0) / prod_total for n in names], 0.4, label="production (nearest slice)")
    ax.set_yticks(list(positions), [label(n) for n in names])
    ax.set_title("Slice mix")
    ax.legend()

    ax = axes[1][0]
    ax.hist(report.null_distribution, bins=30, alpha=0.6, label="null: golden resampled")
    ax.axvline(report.threshold, color="black", linestyle="--", label=f"threshold {report.threshold:.3f}")
    ax.axvline(report.distance, color="red", label=f"production {report.distance:.3f}")
    ax.set_title("MMD² production vs golden (null: golden vs golden)")
    ax.legend()

    ax = axes[1][1]
    days = [row["day"] for row in trend]
    ax.plot(days, [row["distance"] for row in trend], marker="o", label="MMD²")
    ax.plot(days, [row["threshold"] for row in trend], linestyle="--", marker="_", label="threshold")
    ax.set_ylabel("MMD²")
    twin = ax.twinx()
    twin.plot(days, [row["no_result_rate"] for row in trend], marker="s", color="tab:green", label="no-result rate")
    twin.set_ylabel("no-result rate")
    ax.set_title("Trend")
    if days:
        # A day either side, so that a short history (one day) does not stretch the axis over years.
        ax.set_xlim(min(days) - timedelta(days=1), max(days) + timedelta(days=1))
    ax.xaxis.set_major_formatter(dates.DateFormatter("%m-%d"))
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    # One legend for both axes: the no-result rate lives on the twin.
    handles, labels = ax.get_legend_handles_labels()
    twin_handles, twin_labels = twin.get_legend_handles_labels()
    ax.legend(handles + twin_handles, labels + twin_labels, loc="upper left", fontsize=8)
    fig.suptitle(f"Drift report {report.day}: {'DRIFT' if report.drifted else 'no drift'}")
    fig.tight_layout()
    overview = save(fig, folder / f"drift-{report.day}.png")
    pngs.append(overview)

    markdown = folder / f"drift-{report.day}.md"
    markdown.write_text(report_markdown(report, measures, f"![overview]({overview.name})") + sections, encoding="utf-8")
    return markdown, pngs


def report_markdown(report: DriftReport, measures: Mapping[str, float], image: str) -> str:
    """The drift report as markdown; `image` is the overview plot's markdown (a file link in the
    report file, a data URI in Dagster metadata)."""
    lines = [
        f"# Drift report {report.day}",
        "",
        f"- MMD² production vs golden **{report.distance:.4f}** against threshold {report.threshold:.4f} "
        f"(calibrated on the golden set: the {report.quantile:.0%} quantile of {len(report.null_distribution)} resamples): "
        + ("**DRIFT**" if report.drifted else "no drift"),
        f"- power: with {report.golden_cases} golden cases and {report.production_queries} sampled queries, a new topic "
        f"holding less than **{report.min_detectable_share:.0%}** of the day cannot reach the threshold, however unlike "
        "the golden set (a topic of identical questions far from every golden one; looser topics need more)",
        f"- production queries in the window: {report.production_queries}; golden cases: {report.golden_cases}",
        *(f"- {inline(key)}: {number(value, 4) if isinstance(value, float) else inline(value)}" for key, value in measures.items()),
        "",
        image,
        "",
        "## Candidates for new golden cases",
        "",
        "Ranked by excess density: how much more production traffic than golden cases surrounds the query",
        "(the MMD witness). Distance: 1 - cosine to the nearest golden question.",
        "",
        table(report.candidates, ["excess_density", "distance", "query", "nearest_golden"],
              headers=["excess density", "distance", "production query", "nearest golden question"], limit=None),
        "",
        "## Vocabulary unseen in the golden set",
        "",
        inline(", ".join(f"{term} ({n})" for term, n in report.unseen_terms)) or "_none_",
        "",
        "## Pages: hit in production, labelled by golden cases",
        "",
        "Per page, how many sampled queries ranked it first (top-1) and among their top documents, and how many",
        "golden labels it has (gold paths resolved to documents, as the evaluation resolves them); each source's",
        "total first. A page production hits often and no golden case labels is where the golden set is blind.",
        "",
        table(page_rows(report), ["source", "page", "top-1 hits", "in top documents", "gold labels"], limit=None),
        "",
        "## Query-log lines refused",
        "",
        refused_text(report),
        "",
        "## Documents production reaches that no golden case covers",
        "",
        "The first document of each sampled query, when no golden case names it: where the golden set should grow next.",
        "",
        table(report.uncovered_pages, ["source", "doc_id", "hits"], headers=["source", "document", "top-1 hits"],
              limit=None),
    ]
    return "\n".join(lines) + "\n"


def page_rows(report: DriftReport, per_source: int = MAX_PAGES_PER_SOURCE) -> list[list]:
    """Each source's total, then its pages by production hits (then labels), at most `per_source`."""
    by_source: dict[str, list[tuple[str, PageCounts]]] = {}
    for page, counts in report.pages.items():
        by_source.setdefault(page_source(page), []).append((page, counts))
    totals = {source: PageCounts(sum(c.top1 for _, c in pages), sum(c.hits for _, c in pages),
                                 sum(c.labels for _, c in pages)) for source, pages in by_source.items()}
    rows: list[list] = []
    for source in sorted(totals, key=lambda s: (s == UNRESOLVED, -totals[s].hits, -totals[s].labels, s)):
        total = totals[source]
        rows.append([Markdown(f"**{inline(source)}**"), Markdown(f"**total of {len(by_source[source])} pages**"),
                     total.top1, total.hits, total.labels])
        pages = sorted(by_source[source], key=lambda item: (-item[1].hits, -item[1].labels, item[0]))
        rows += [[source, page, c.top1, c.hits, c.labels] for page, c in pages[:per_source]]
        if len(pages) > per_source:
            rows.append([source, Markdown(f"_and {len(pages) - per_source} more pages_"), "", "", ""])
    return rows


def refused_text(report: DriftReport) -> str:
    """The refused lines by file, line and reason (the first ones), and how many there were."""
    if not report.refused_count:
        return "_none: every line of the query log was read_"
    shown = table(report.refused_lines, ["where", "reason"], headers=["file and line", "reason"], limit=None)
    rest = report.refused_count - len(report.refused_lines)
    return (f"{report.refused_count} line(s) of the query log could not be read and were left out of the sample:\n\n"
            + shown + (f"\n\n_and {rest} more_" if rest > 0 else ""))
