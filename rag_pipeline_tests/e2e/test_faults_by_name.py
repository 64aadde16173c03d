"""Faults found by an adversarial run, each ending in one sentence that names the file, line or day
and what to do, with the exit code a script can act on (2 bad input, 1 a failed run), as a user
would see them: real files, a real DuckDB index, `python -m rag_pipeline.cli` in a subprocess."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest
import yaml

from rag_pipeline_tests.e2e.cli import run_cli
from rag_pipeline_tests.full_disk import fill, small_disk

pytestmark = pytest.mark.slow

ESC_PAGE = "---\ntitle: Colours\ntenant: \x1b[31macme\x1b[0m\n---\n# Colours\n\nThe palette page about swatches.\n"
FIXED_PAGE = "---\ntitle: Colours\ntenant: acme\n---\n# Colours\n\nThe palette page about swatches.\n"


def _config(tmp: Path, root: Path, **extra) -> Path:
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "docs", "path": str(root), "defaults": {"tenant": "acme"}}],
        "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp / "index.duckdb")},
        **extra,
    }))
    return path


def _served(db: Path) -> dict[str, str]:
    """doc_id -> the text of its chunks, as served."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT doc_id, string_agg(text, ' ') FROM chunks GROUP BY doc_id").fetchall()
    return dict(rows)


def _ingest(config: Path) -> tuple[int, dict]:
    out = run_cli("ingest", "--config", str(config), "--json")
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout)["sources"]["docs"] if out.stdout.strip() else {}


def test_a_control_character_in_metadata_fails_its_page_alone_and_never_freezes_the_source(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Refunds\n\nRefunds are issued within fourteen days.\n")
    (root / "b.md").write_text("# Exports\n\nExports run nightly for every workspace.\n")
    (root / "colour.md").write_text(ESC_PAGE)
    (root / "bell.md").write_text("# Bell\n\nThe page whose sidecar rings.\n")
    (root / "bell.md.meta.yaml").write_text("title: Bell\nroles: [employee\x07]\nvisibility: internal\n")
    config = _config(tmp_path, root)
    code, report = _ingest(config)
    assert code == 0 and report["success"], report
    failures = {f["doc_id"]: (f["stage"], f["reason"]) for f in report["failures"]}
    assert set(failures) == {"docs:colour.md", "docs:bell.md"}
    assert failures["docs:colour.md"][0] == "discovered"
    assert ("front matter holds the control character U+001B (ESC) at line 3, column 9, which YAML cannot read: "
            "delete it" in failures["docs:colour.md"][1])
    assert "sidecar bell.md.meta.yaml holds the control character U+0007 (BEL) at line 2" in failures["docs:bell.md"][1]
    served = _served(tmp_path / "index.duckdb")
    assert set(served) == {"docs:a.md", "docs:b.md"}
    # A later edit of another page of the source goes through while the bad page is still bad.
    (root / "a.md").write_text("# Refunds\n\nRefunds are now issued within seven days.\n")
    code, report = _ingest(config)
    assert code == 0 and report["changed"] == 1, report
    assert "seven days" in _served(tmp_path / "index.duckdb")["docs:a.md"]
    # Fixed, the pages are served on the next run.
    (root / "colour.md").write_text(FIXED_PAGE)
    (root / "bell.md.meta.yaml").write_text("title: Bell\nroles: [employee]\nvisibility: internal\n")
    code, report = _ingest(config)
    assert code == 0 and report["failures"] == [], report
    assert set(_served(tmp_path / "index.duckdb")) == {"docs:a.md", "docs:b.md", "docs:colour.md", "docs:bell.md"}


@pytest.mark.parametrize("character", ["\x00", "\x1b"])
def test_a_control_character_in_the_pipeline_config_is_a_config_error_with_its_line(tmp_path, character):
    root = tmp_path / "docs"
    root.mkdir()
    config = tmp_path / "pipeline.yaml"
    config.write_text(f"sources:\n  - name: docs\n    path: {root}{character}\nembedding: {{kind: hashing}}\n")
    out = run_cli("ingest", "--config", str(config))
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: pipeline config {config} holds the control character U+{ord(character):04X} "
        f"({'NUL' if character == chr(0) else 'ESC'}) at line 3, column {len(f'    path: {root}') + 1}, which YAML "
        f"cannot read: delete it{' (a terminal colour code pasted with the text?)' if character == chr(27) else ''} "
        "and run again"]


def test_monitor_names_a_day_outside_the_partitions_and_the_range_that_exists(tmp_path):
    log = tmp_path / "query_log"
    log.mkdir()
    (log / "2026-11-20.jsonl").write_text(json.dumps({"timestamp": "2026-11-20T08:00:00Z", "query": "refunds"}) + "\n")
    config = _config(tmp_path, tmp_path, monitoring={"query_log": str(log), "start_date": "2026-11-10"})
    today = datetime.now(timezone.utc).date()
    days = f"the day partitions run from 2026-11-10 (monitoring.start_date) to {today} (today, UTC)"
    tomorrow = today + timedelta(days=1)
    for day, sentence in [
        ("2026-11-09", f"--day 2026-11-09 is before the first day partition: {days}; pick a day in that range"),
        (tomorrow.isoformat(), f"--day {tomorrow} is after the last day partition: {days}; pick a day in that range"),
        ("2026-13-01", f"--day '2026-13-01' is not a date: write it as YYYY-MM-DD; {days}"),
    ]:
        out = run_cli("monitor", "--config", str(config), "--day", day)
        assert out.returncode == 2, out.stderr[-3000:]
        assert out.stderr.strip().splitlines() == [f"error: {sentence}"], out.stderr[-3000:]


def test_search_refuses_k_below_one_and_experiments_a_named_store_that_does_not_exist(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Refunds\n\nRefunds are issued within fourteen days.\n")
    config = _config(tmp_path, root)
    assert run_cli("ingest", "--config", str(config)).returncode == 0
    for k in ("0", "-3", "two"):
        out = run_cli("search", "refunds", "--config", str(config), "--k", k, "--json")
        assert out.returncode == 2 and out.stdout == "", (k, out.stdout)
        assert "argument --k:" in out.stderr and "give 1 or more" in out.stderr, out.stderr
    one = run_cli("search", "refunds", "--config", str(config), "--k", "1", "--json", "--mode", "bm25", "--tenant", "acme")
    assert one.returncode == 0 and [h["doc_id"] for h in json.loads(one.stdout)["final"]] == ["docs:a.md"]
    missing = tmp_path / "typo" / "experiments.duckdb"
    out = run_cli("experiments", "--config", str(config), "--store", str(missing))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"error: --store {missing} does not exist:"), out.stderr
    assert not missing.parent.exists()  # nothing created to say so
    # Not named: no experiment logged yet is an empty log, as before.
    out = run_cli("experiments", "--config", str(config))
    assert out.returncode == 0 and "no experiment logged yet" in out.stderr


def test_a_hard_link_is_skipped_unless_the_source_allows_it(tmp_path):
    root, outside = tmp_path / "docs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "a.md").write_text("# Refunds\n\nRefunds are issued within fourteen days.\n")
    (outside / "secret.md").write_text("# Secret\n\nThe vault combination is seven seven three.\n")
    os.link(outside / "secret.md", root / "linked.md")
    config = _config(tmp_path, root)
    code, report = _ingest(config)
    assert code == 0 and report["skipped"] == 1 and report["failures"] == [], report
    with duckdb.connect(str(tmp_path / "index.duckdb"), read_only=True) as con:
        [(status, reason)] = con.execute("SELECT status, reason FROM ledger WHERE doc_id = 'docs:linked.md'").fetchall()
    assert status == "skipped" and reason.startswith("linked.md is a hard link (2 names for one file)"), reason
    assert "set allow_hard_links: true on the source" in reason
    assert set(_served(tmp_path / "index.duckdb")) == {"docs:a.md"}
    # Allowed by the source, explicitly: served.
    raw = yaml.safe_load(config.read_text())
    raw["sources"][0]["allow_hard_links"] = True
    config.write_text(yaml.safe_dump(raw))
    code, report = _ingest(config)
    assert code == 0 and report["added"] == 1, report
    assert "vault combination" in _served(tmp_path / "index.duckdb")["docs:linked.md"]


def _pages(root: Path, version: str) -> None:
    for i in range(30):
        filler = " ".join(f"w{version}{i}x{j}" for j in range(400))  # words no other page holds: room in the index
        (root / f"p{i}.md").write_text(f"# Page {i}\n\nTopic {i} of release {version}. {filler}\n")


def _found(config: Path, word: str) -> list[str]:
    """The documents a lexical search for `word` returns, through the command line."""
    out = run_cli("search", word, "--config", str(config), "--mode", "bm25", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return [hit["doc_id"] for hit in json.loads(out.stdout)["final"]]


def test_a_full_disk_is_said_by_name_and_loses_nothing_served(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    _pages(root, "one")
    with small_disk(tmp_path / "disk", 48) as disk:
        index = disk / "index.duckdb"
        config = _config(tmp_path, root)
        raw = yaml.safe_load(config.read_text())
        raw["sources"][0].pop("defaults")
        raw["storage"]["path"] = str(index)
        config.write_text(yaml.safe_dump(raw))
        assert run_cli("ingest", "--config", str(config)).returncode == 0
        _pages(root, "two")
        for leave, where, step in [(0, disk / "index.duckdb.locks", ""), (2 * 1024 * 1024, index, "RUN FAILED docs: ")]:
            fill(disk, leave)
            out = run_cli("ingest", "--config", str(config))
            said = out.stdout + out.stderr
            assert out.returncode == 1, said[-3000:]
            assert step in said and (f"no space left on device at {where}: free space on that disk and run again; "
                                     "what was served before is still served") in said, said[-3000:]
            assert "Traceback" not in said and "cannot rollback" not in said, said[-3000:]
        (disk / "filler").unlink()
        # What was served before still answers; the next run, with room, serves the new release.
        assert _found(config, "wone7x5") == ["docs:p7.md"] and _found(config, "wtwo7x5") == []
        assert run_cli("ingest", "--config", str(config)).returncode == 0
        assert _found(config, "wtwo7x5") == ["docs:p7.md"] and _found(config, "wone7x5") == []


def test_an_index_file_cut_short_is_said_damaged_with_what_to_do(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    _pages(root, "one")
    config = _config(tmp_path, root)
    index = tmp_path / "index.duckdb"
    assert run_cli("ingest", "--config", str(config)).returncode == 0
    with open(index, "r+b") as handle:
        handle.truncate(index.stat().st_size // 3)
    sentence = (f"error: the index file {index} is damaged (cut short or overwritten): restore it from a backup, "
                "or remove it and run `rag-pipeline ingest` to build it again")
    for command in (["search", "topic 7", "--tenant", "acme"], ["ingest"]):
        out = run_cli(*command, "--config", str(config))
        assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
        assert out.stderr.strip().splitlines()[-1] == sentence, out.stderr[-3000:]
        assert "Traceback" not in out.stderr
    index.unlink()
    assert run_cli("ingest", "--config", str(config)).returncode == 0  # what it says to do works
    out = run_cli("search", "wone7x5", "--config", str(config), "--tenant", "acme", "--mode", "bm25", "--json")
    assert [hit["doc_id"] for hit in json.loads(out.stdout)["final"]] == ["docs:p7.md"]
