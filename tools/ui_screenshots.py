"""Screenshots of the Dagster UI as the on-call person sees it the morning after, in headless Chromium.

Builds a throwaway deployment from the bundled sample data, runs the demo, then a night in which
one handbook page broke two days ago (its new version cannot be parsed, so the old one is still
served: `sources_fresh` fails for handbook, `no_failed_documents` warns) while helpcenter and
product_docs pass, and a morning evaluation of dense retrieval alone against the hybrid baseline;
starts `dagster-webserver` on it and photographs the key pages:

    lineage.png              the asset lineage, groups expanded
    failed_check.png         sources_fresh, partition handbook: the stale document and its reason
    check_partitions.png     the same check's status per source
    drift_report.png         the drift report's plot, rendered from the metadata
    golden_eval_slices.png   each slice against the promoted baseline
    automation.png           schedules and sensors, running, with their next tick
    runs.png                 the runs, named by job, with their tags

    python tools/ui_screenshots.py [--out docs/screenshots]

Needs Debian's `chromium` and the `playwright` package (`pip install -e '.[ui]'`); nothing is
downloaded. Run as root, Chromium needs `--no-sandbox` (passed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.local_deployment import free_port  # noqa: E402

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
BROKEN_PAGE = "policies/remote-work.md"


def _env(home: Path, config: Path) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(home), "RAG_PIPELINE_CONFIG": str(config), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "UNSTRUCTURED_DISABLE_NOTICE": "1"}


def build_deployment(work: Path) -> tuple[Path, Path]:
    """A copy of the sample data with its own store and instance; the demo run, then the broken night."""
    data = work / "data"
    shutil.copytree(REPO / "data", data)
    config = data / "pipeline.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["storage"] = {"path": str(work / "store" / "index.duckdb")}
    config.write_text(yaml.safe_dump(raw))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    cli = [sys.executable, "-m", "rag_pipeline.cli"]
    subprocess.run([*cli, "demo"], env=_env(home, config), check=True, stdout=subprocess.DEVNULL)
    page = data / "corpus" / "handbook" / BROKEN_PAGE
    page.write_bytes(page.read_bytes() + b"\n\nA pasted line in latin-1: caf\xe9.\n")
    two_days_ago = time.time() - 2 * 86400
    os.utime(page, (two_days_ago, two_days_ago))
    # The night: ingestion (handbook's switch goes through, its freshness fails), then the evaluation.
    subprocess.run([*cli, "eval"], env=_env(home, config), stdout=subprocess.DEVNULL)
    # The morning: an engineer tries dense retrieval alone; the gate compares it with the baseline.
    subprocess.run([*cli, "eval", "--mode", "dense"], env=_env(home, config), stdout=subprocess.DEVNULL)
    return home, config


def start_webserver(home: Path, config: Path, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-w", str(REPO / "workspace.yaml"), "-p", str(port),
         "-h", "127.0.0.1"], cwd=REPO, env=_env(home, config), stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5)
            return process, port
        except OSError:
            time.sleep(1)
    process.kill()
    raise TimeoutError(f"dagster-webserver did not start; see {log}")


def photograph(port: int, out: Path) -> list[Path]:
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

        visit("/asset-groups")
        page.keyboard.press("Alt+e")  # the graph's "Expand all groups"
        page.wait_for_timeout(2500)
        shot("lineage.png")

        visit("/assets/search_index?view=checks")
        click("sources_fresh")
        click("Partitions", nth=1)
        shot("check_partitions.png")
        page.get_by_text("handbook", exact=True).filter(visible=True).last.click()  # the list, not the chip
        page.wait_for_timeout(2000)
        shot("failed_check.png")

        visit("/assets/drift_report?view=events")
        click("[Show Markdown]", nth=0)
        shot("drift_report.png")

        visit("/assets/golden_eval?view=events")
        row = page.get_by_text("slices_against_baseline", exact=True)
        row.locator("xpath=ancestor::tr").get_by_text("[Show Markdown]").click()
        page.wait_for_timeout(2000)
        shot("golden_eval_slices.png")

        visit("/automation")
        shot("automation.png")
        visit("/runs")
        shot("runs.png")
        browser.close()
    return shots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway deployment (its path is printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ui-shots-"))
    webserver = None
    try:
        home, config = build_deployment(work)
        webserver, port = start_webserver(home, config, work / "webserver.log")
        for path in photograph(port, args.out):
            print(path)
    finally:
        if webserver is not None:
            webserver.terminate()
            webserver.wait(timeout=30)
        if args.keep:
            print(f"deployment kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
