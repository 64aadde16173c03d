"""What the on-call person sees, read from a real dagster-webserver's GraphQL API (what the UI shows).

handbook runs with a page that broke two days ago (its new version cannot be parsed, the old one
is still served, so `sources_fresh` fails for handbook), then helpcenter runs and passes. The UI must
still say handbook failed, and name the page; the drift report's plot must be embedded in its
metadata; every check must explain itself.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rag_pipeline.cli.runner import ingest, monitor
from rag_pipeline.config import PROJECT_ROOT, load_config

pytestmark = pytest.mark.slow

BROKEN = "policies/remote-work.md"
CHECKS = """
{ assetNodes { assetKey { path } description
    assetChecksOrError { ... on AssetChecks { checks { name description blocking
      partitionStatuses { ... on AssetCheckDefaultPartitionStatuses { succeededPartitions failedPartitions }
                          ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } } } } } } } }
"""
EXECUTIONS = """
query($key: AssetKeyInput!, $check: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $check, limit: 20) {
    partition status evaluation { description severity } } }
"""
METADATA = """
query($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) { ... on Asset { assetMaterializations(limit: 1) {
    partition metadataEntries { label __typename ... on MarkdownMetadataEntry { mdStr } } } } } }
"""


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body["errors"]
    return body["data"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    data = tmp / "data"
    shutil.copytree(PROJECT_ROOT / "data", data)
    raw = yaml.safe_load((data / "pipeline.yaml").read_text())
    raw["sources"] = [s for s in raw["sources"] if s["name"] in ("handbook", "helpcenter")]
    raw["embedding"] = {"kind": "hashing"}
    raw["storage"] = {"path": str(tmp / "store" / "index.duckdb")}
    raw["monitoring"]["bootstrap_samples"] = 200
    (data / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    config = load_config(data / "pipeline.yaml")
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with dg.DagsterInstance.get() as instance:
            assert all(run.success for run in ingest(config, instance))
            page = data / "corpus" / "handbook" / BROKEN
            page.write_bytes(page.read_bytes() + b"\nA pasted line in latin-1: caf\xe9.\n")
            two_days_ago = time.time() - 2 * 86400
            os.utime(page, (two_days_ago, two_days_ago))
            [handbook] = ingest(config, instance, ["handbook"])
            # A real run of the other source (unchanged, it would be skipped): its checks pass in the UI.
            [helpcenter] = ingest(config, instance, ["helpcenter"], force=True)
            drift = monitor(config, instance, "2026-11-29")
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    assert not handbook.success and handbook.checks["sources_fresh"] is False
    assert helpcenter.success and drift.success
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_PIPELINE_CONFIG": str(data / "pipeline.yaml"),
           "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-w", str(PROJECT_ROOT / "workspace.yaml"),
         "-p", str(port), "-h", "127.0.0.1"], cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                _graphql(port, "{ version }")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def _checks(port: int) -> dict[str, dict]:
    nodes = _graphql(port, CHECKS)["assetNodes"]
    return {check["name"]: {**check, "asset": node["assetKey"]["path"][0]}
            for node in nodes for check in node["assetChecksOrError"].get("checks", [])}


def test_a_failure_stays_on_its_source_after_another_source_passed(ui):
    fresh = _checks(ui)["sources_fresh"]
    assert fresh["partitionStatuses"]["failedPartitions"] == ["handbook"]
    assert fresh["partitionStatuses"]["succeededPartitions"] == ["helpcenter"]
    executions = _graphql(ui, EXECUTIONS, {"key": {"path": ["search_index"]}, "check": "sources_fresh"})["assetCheckExecutions"]
    latest = {}
    for execution in executions:  # newest first
        latest.setdefault(execution["partition"], execution)
    assert latest["handbook"]["status"] == "FAILED" and latest["helpcenter"]["status"] == "SUCCEEDED"
    assert f"handbook:{BROKEN}" in latest["handbook"]["evaluation"]["description"]
    failed_docs = _graphql(ui, EXECUTIONS, {"key": {"path": ["search_index"]}, "check": "no_failed_documents"})
    handbook = next(e for e in failed_docs["assetCheckExecutions"] if e["partition"] == "handbook")
    assert handbook["status"] == "FAILED" and handbook["evaluation"]["severity"] == "WARN"
    assert "not valid UTF-8" in handbook["evaluation"]["description"]


def test_the_drift_report_embeds_its_plot(ui):
    materialization = _graphql(ui, METADATA, {"key": {"path": ["drift_report"]}})["assetOrError"]["assetMaterializations"][0]
    entries = {e["label"]: e for e in materialization["metadataEntries"]}
    assert materialization["partition"] == "2026-11-29"
    assert entries["overview"]["mdStr"].startswith("![drift overview](data:image/png;base64,")
    assert "data:image/png;base64," in entries["report"]["mdStr"] and "# Drift report 2026-11-29" in entries["report"]["mdStr"]
    assert entries["mmd2_distance"]["__typename"] == "FloatMetadataEntry"


def test_every_asset_and_check_explains_itself(ui):
    checks = _checks(ui)
    assert set(checks) == {"coverage", "deletions_propagated", "sources_fresh", "no_failed_documents", "served_as_configured",
                           "golden_labels_current", "gate_vs_baseline", "drift_within_threshold", "no_large_new_gap"}
    for name, check in checks.items():
        assert len(check["description"] or "") > 40, name
    nodes = _graphql(ui, CHECKS)["assetNodes"]
    assert all(node["description"] for node in nodes)
