"""Screenshots of the Dagster UI as the on-call person sees it the morning after, in headless Chromium.

Runs the nightly suite of `rag_pipeline_tests/harness/night.py` on a throwaway deployment of the bundled sample (the real
webserver and daemon): a clean night, then a night with three faults in the data (a handbook page
that no longer decodes, the helpcenter folder gone, retrieval that regresses), and photographs the
pages the on-call person opens:

    runs.png                 the night's runs: two red, a green one tagged with its failed document
    vanished_source_run.png  the helpcenter run: its failure, in the pipeline's words
    vanished_source_partition.png  source_documents, partition helpcenter: why it failed
    check_partitions.png     a check of search_index by source
    failed_document.png      no_failed_documents for handbook: the page and the parser's reason
    gate_failure.png         the evaluation run: what regressed against the baseline
    golden_eval_slices.png   each slice against the promoted baseline
    why_it_moved.png         the evaluation's case_changes: each case that moved, and the change that moved it
    drift_report.png         the drift report (monitoring ran although the gate failed)
    coverage_gaps.png        the day's coverage gaps: questions the served index answers weakly, by topic
    lineage.png              the asset lineage, groups expanded
    automation.png           schedules and sensors

    python tools/ui_screenshots.py [--out docs/screenshots] [--keep]

Needs Debian's `chromium` and the `playwright` package (`pip install -e '.[ui]'`); nothing is
downloaded. Run as root, Chromium needs `--no-sandbox` (passed).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from rag_pipeline_tests.harness.night import REPO, VANISHED_SOURCE, sample_deployment

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
def photograph(port: int, out: Path, runs: dict[str, str]) -> list[Path]:
    """The pages listed above, from the UI at `port`; `runs`: the faulted night's run ids by name."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{port}"
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                             args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()

        def visit(path: str) -> None:
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)
            skip = page.get_by_role("button", name="Skip")  # the first-visit community dialog
            if skip.count():
                skip.click()
                page.wait_for_timeout(500)

        def click(text: str, nth: int = 0) -> None:
            page.get_by_text(text, exact=True).filter(visible=True).nth(nth).click()
            page.wait_for_timeout(2000)

        def shot(name: str) -> None:
            path = out / name
            page.screenshot(path=str(path))
            shots.append(path)

        visit("/runs")
        shot("runs.png")

        visit(f"/runs/{runs[VANISHED_SOURCE]}")
        shot("vanished_source_run.png")

        visit(f"/assets/source_documents?view=partitions&partition={VANISHED_SOURCE}")
        shot("vanished_source_partition.png")

        visit("/assets/search_index?view=checks")
        click("coverage")
        click("Partitions", nth=1)
        shot("check_partitions.png")

        visit("/assets/search_index?view=checks")
        click("no_failed_documents")
        click("Partitions", nth=1)
        page.get_by_text("handbook", exact=True).filter(visible=True).last.click()  # the list, not the chip
        page.wait_for_timeout(2000)
        shot("failed_document.png")

        visit(f"/runs/{runs['evaluation']}")
        shot("gate_failure.png")

        visit("/assets/golden_eval?view=events")
        row = page.get_by_text("slices_against_baseline", exact=True)
        row.locator("xpath=ancestor::tr").get_by_text("[Show Markdown]").click()
        page.wait_for_timeout(2000)
        shot("golden_eval_slices.png")

        visit("/assets/golden_eval?view=events")
        row = page.get_by_text("case_changes", exact=True).first.locator("xpath=ancestor::tr")
        row.evaluate("element => element.scrollIntoView({block: 'start'})")  # the table's head, not its end
        page.wait_for_timeout(1000)
        shot("why_it_moved.png")

        visit("/assets/drift_report?view=events")
        click("[Show Markdown]", nth=0)
        shot("drift_report.png")

        visit("/assets/coverage_gaps?view=events")
        shot("coverage_gaps.png")

        visit("/asset-groups")
        page.keyboard.press("Alt+e")  # the graph's "Expand all groups"
        page.wait_for_timeout(2500)
        shot("lineage.png")

        visit("/automation")
        shot("automation.png")
        browser.close()
    return shots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway deployment's files (the path is printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ui-shots-"))
    try:
        with sample_deployment(work) as night:
            night.clean_night()
            night.faulted_night()
            for path in photograph(night.running.port, args.out, night.runs):
                print(path)
    finally:
        if args.keep:
            print(f"deployment kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
