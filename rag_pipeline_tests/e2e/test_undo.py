"""Undo a bad night as the on-call person does, through the command line: list the states, restore
the baseline's and pin it, measure a past state again (equal to what was recorded then, to 1e-9),
disable a source, unpin; a SIGKILL at any point of a restore leaves the old state or the new one and
the same command converges; the same actions as Dagster jobs with config, as the UI launches them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rag_pipeline.config import load_config
from rag_pipeline.core.faults import COMMAND_KILL_POINTS, KILL_AT_ENV
from rag_pipeline.core.storage import open_store
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

PAGES = {
    "refunds.md": "# Refunds\n\nRefunds are issued within fourteen days of the request.\n",
    "sso.md": "# Single sign-on\n\nConfigure SAML single sign-on with Okta for every workspace.\n",
    "exports.md": "# Exports\n\nExports of a workspace run nightly and land in your bucket.\n",
}
CASES = [
    {"id": "refunds", "question": "How long do refunds take?", "reference": "Fourteen days.", "gold_docs": ["kb:refunds.md"]},
    {"id": "sso", "question": "How do I set up Okta single sign-on with SAML?", "reference": "With SAML.",
     "gold_docs": ["kb:sso.md"]},
    {"id": "exports", "question": "When do workspace exports run?", "reference": "Nightly.", "gold_docs": ["kb:exports.md"]},
]


def _workspace(folder: Path) -> Path:
    write_tree(folder / "kb", PAGES)
    (folder / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    config = folder / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"name": "kb", "path": "kb"}], "golden_set": "golden.jsonl",
                                      "embedding": {"kind": "hashing"}, "storage": {"path": "store/index.duckdb"}}))
    return config


def _ok(*args: str) -> str:
    done = run_cli(*args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _served(config: Path) -> dict[str, str]:
    store = open_store(load_config(config).storage, read_only=True)
    return {d["doc_id"]: d["version"] for d in store.served.indexed_documents("kb")}


def _bad_night(folder: Path) -> None:
    (folder / "kb" / "sso.md").unlink()
    (folder / "kb" / "refunds.md").write_text("# Refunds\n\nContact billing.\n")


@pytest.fixture(scope="module")
def built_night(tmp_path_factory) -> tuple[Path, dict]:
    """A baseline measured and promoted, then a night that deleted one gold page and gutted another
    (four commands, made once: each test changes a copy)."""
    folder = tmp_path_factory.mktemp("night_after")
    config = _workspace(folder)
    _ok("ingest", "--config", str(config))
    first = json.loads(_ok("eval", "--config", str(config), "--json"))
    _ok("promote", "--config", str(config))
    baseline_served = _served(config)
    _bad_night(folder)
    _ok("ingest", "--config", str(config))
    return folder, {"eval": first, "served": baseline_served}


@pytest.fixture
def night_after(built_night, tmp_path) -> tuple[Path, dict]:
    """A copy of the workspace after the bad night (its paths are relative; file times are kept,
    so the next ingest sees the files as the last one left them)."""
    folder, before = built_night
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    return tmp_path / "pipeline.yaml", before


def test_the_morning_after_list_restore_measure_again_unpin(night_after):
    config, before = night_after
    listed = json.loads(_ok("index", "list", "--config", str(config), "--source", "kb", "--json"))
    assert [s["origin"] for s in listed["states"]] == ["switch", "switch"]
    assert listed["states"][0]["evaluations"] == [before["eval"]["eval_id"]] and listed["states"][1]["served"]

    # The past measured again while the bad night is served: equal to what was recorded when it
    # was served, and nothing served changed.
    tonight = _served(config)
    past = json.loads(_ok("eval", "--config", str(config), "--at", listed["states"][0]["state_id"], "--json"))
    assert past["recorded_eval_id"] == before["eval"]["eval_id"] and past["largest_difference"] <= 1e-9
    assert past["overall"] == pytest.approx(before["eval"]["overall"], abs=1e-9) and _served(config) == tonight
    today = json.loads(_ok("eval", "--config", str(config), "--json", "--no-gate"))
    assert today["unanswerable"]["stale_cases"] == 1 and past["unanswerable"]["stale_cases"] == 0  # sso.md is gone tonight

    said = _ok("index", "restore", "--config", str(config), "--source", "kb", "--to", "baseline", "--by", "ana",
               "--reason", "refund page gutted")
    assert "now serves state" in said and "pinned to state" in said and "ana" in said
    assert _served(config) == before["served"]
    again = json.loads(_ok("eval", "--config", str(config), "--json"))
    assert again["overall"] == pytest.approx(before["eval"]["overall"], abs=1e-9)

    # A pinned source: the next ingest leaves it alone and says why, in the run's checks.
    ingest = json.loads(_ok("ingest", "--config", str(config), "--json", "--force"))
    assert ingest["sources"]["kb"]["warnings"] == ["served_as_configured"] and _served(config) == before["served"]

    _ok("index", "unpin", "--config", str(config), "--source", "kb")
    _ok("ingest", "--config", str(config))
    assert "kb:sso.md" not in _served(config)
    refused = run_cli("index", "unpin", "--config", str(config), "--source", "kb")
    assert refused.returncode == 2 and "not pinned" in refused.stderr


def test_disable_serves_nothing_until_enabled(night_after):
    config, _ = night_after
    _ok("index", "disable", "--config", str(config), "--source", "kb", "--by", "sec", "--reason", "a key leaked")
    assert _served(config) == {}
    found = json.loads(_ok("search", "Refunds are issued within fourteen days", "--config", str(config), "--json"))
    assert found["final"] == []
    wrong = run_cli("index", "unpin", "--config", str(config), "--source", "kb")
    assert wrong.returncode == 2 and "use `rag-pipeline index enable" in wrong.stderr
    _ok("index", "enable", "--config", str(config), "--source", "kb")
    _ok("ingest", "--config", str(config))
    assert set(_served(config)) == {"kb:refunds.md", "kb:exports.md"}


def test_bad_input_is_named(night_after):
    config, _ = night_after
    for args, words in ((("--to", "kb@99-000000"), "no index state 'kb@99-000000'"),
                        (("--to", "baseline", "--reason", " "), "say who does this and why")):
        line = ["index", "restore", "--config", str(config), "--source", "kb", "--by", "ana", *args]
        done = run_cli(*(line if "--reason" in args else [*line, "--reason", "r"]))
        assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr
    done = run_cli("index", "list", "--config", str(config), "--source", "nope")
    assert done.returncode == 2 and "'nope' is not a configured source (configured: kb)" in done.stderr
    done = run_cli("eval", "--config", str(config), "--at", "yesterday-ish")
    assert done.returncode == 2 and "neither a state id nor a date" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("point", COMMAND_KILL_POINTS["index restore"])
def test_a_killed_restore_leaves_one_state_and_converges(night_after, point):
    config, before = night_after
    tonight = _served(config)
    restore = ["index", "restore", "--config", str(config), "--source", "kb", "--to", "baseline", "--by", "ana",
               "--reason", "undo"]
    killed = run_cli(*restore, env={KILL_AT_ENV: point})
    assert killed.returncode == -9
    store = open_store(load_config(config).storage, read_only=True)
    pin = store.states.pinned("kb")
    if point == "restore:committed":
        assert _served(config) == before["served"] and pin is not None
    else:
        assert _served(config) == tonight and pin is None
    _ok(*restore)
    assert _served(config) == before["served"]


def test_the_ui_jobs_restore_and_unpin(night_after):
    """The same actions launched as the UI launches a job: its config from the launchpad."""
    from rag_pipeline.definitions import build_definitions

    config_path, before = night_after
    config = load_config(config_path)
    defs = build_definitions(config)
    instance = dg.DagsterInstance.ephemeral()
    run = defs.resolve_job_def("restore_index_state").execute_in_process(instance=instance, run_config={
        "ops": {"restore_state": {"config": {"source": "kb", "to": "baseline", "by": "ops", "reason": "from the UI"}}}})
    assert run.success and _served(config_path) == before["served"]
    observed = [e.event_specific_data.asset_observation for e in run.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed and "pinned to state" in observed[0].description and observed[0].partition == "kb"
    unknown = defs.resolve_job_def("unpin_source").execute_in_process(
        instance=instance, raise_on_error=False, run_config={"ops": {"follow_files": {"config": {"source": "zz", "by": "ops"}}}})
    assert not unknown.success
    assert defs.resolve_job_def("unpin_source").execute_in_process(
        instance=instance, run_config={"ops": {"follow_files": {"config": {"source": "kb", "by": "ops"}}}}).success
    assert open_store(config.storage, read_only=True).states.pinned("kb") is None


def test_a_forgotten_document_leaves_history_and_its_states_cannot_be_restored(night_after):
    config, _ = night_after
    said = _ok("index", "forget", "--config", str(config), "--doc", "kb:sso.md")
    assert "forgot 1 kept version(s) of kb:sso.md" in said
    store = open_store(load_config(config).storage, read_only=True)
    assert not store.db.rows("SELECT 1 FROM history_chunks WHERE doc_id = 'kb:sso.md'")
    done = run_cli("index", "restore", "--config", str(config), "--source", "kb", "--to", "baseline", "--by", "a",
                   "--reason", "r")
    assert done.returncode == 2 and "cannot be served again" in done.stderr
