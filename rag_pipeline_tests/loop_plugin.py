"""The test loop's own rules, a pytest plugin that conftest.py loads.

`slow` is enforced: a test not marked slow fails, saying to mark it, when it or a process it starts
loads the real embedding model (such a test gets an empty model cache folder of its own, so using
the model shows as an ONNX export there; or it imports sentence-transformers) or starts a Dagster
webserver, daemon, Celery workers or a harness deployment. (A model already loaded in the worker's
process by an earlier test, and reused through a cache, goes unseen: nothing is loaded then.)

Under pytest-xdist (`-n N`, with `--dist loadscope --no-loadscope-reorder` from pyproject.toml) a
module is one work unit, so its module fixtures are built once, on one worker; the modules that take
longest are sent first, so that the run does not end waiting on one of them. (`--dist loadgroup`
would group by `xdist_group` marks, but pytest-xdist 3.8 tags a test's node id for it in a way
pytest 9 no longer reads: its groups are split.)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from rag_pipeline_tests.harness.probe import DEPLOYMENT_NOTE, PROBE_ENV, note_deployment

# Executables that start a Dagster deployment, or part of one.
_DEPLOYMENT_COMMANDS = ("dagster-webserver", "dagster-daemon", "dagster-celery")
# Work units started first under xdist, longest first (seconds of one run, `make test` on 2 cores,
# 2026-12-05: they only order the start, and a unit missing here starts after them). The first
# three mostly wait for the daemon (a schedule's minute, a sensor's or a backfill's loop), so the
# other workers' tests run meanwhile; started last, any of them would be the run's tail.
LONGEST = {
    "rag_pipeline_tests/e2e/test_real_night.py": 330,
    "rag_pipeline_tests/e2e/test_celery_backfill.py": 210,
    "rag_pipeline_tests/e2e/test_night_once.py": 175,
    "rag_pipeline_tests/e2e/test_kill_anywhere.py": 165,
    "rag_pipeline_tests/e2e/test_documented_commands.py": 105,
    "rag_pipeline_tests/e2e/test_kill_listed_sources.py": 80,
    "rag_pipeline_tests/e2e/test_parallel_backfill.py": 75,
    "rag_pipeline_tests/core/embedding/test_onnx_engine.py": 55,
    "rag_pipeline_tests/e2e/test_process_model.py": 45,
    # The longest modules of `make test-fast` (which skips the ones above): e2e/ is collected last,
    # so unlisted they would start at the end and be its tail.
    "rag_pipeline_tests/e2e/test_undo.py": 50,
    "rag_pipeline_tests/e2e/test_team_golden_set.py": 50,
    "rag_pipeline_tests/e2e/test_cli.py": 43,
    "rag_pipeline_tests/e2e/test_cli_eval.py": 37,
    "rag_pipeline_tests/core/evaluation/test_attribution.py": 34,
    "rag_pipeline_tests/defs/test_night_decisions.py": 26,
    "rag_pipeline_tests/defs/test_evaluation_assets.py": 23,
}


def is_slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None


def work_unit(item: pytest.Item) -> str:
    """The module of a test: its work unit under `--dist loadscope`."""
    return item.nodeid.split("::")[0]


class SlowProbe:
    """What one test did that only a slow test may do, seen from files other processes leave."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cache = folder / "cache"  # RAG_PIPELINE_CACHE of a test not marked slow
        self._saved: dict[str, str | None] = {}
        self._had_library = False

    def arm(self, item: pytest.Item) -> None:
        self._had_library = "sentence_transformers" in sys.modules
        names = [PROBE_ENV] + ([] if is_slow(item) else ["RAG_PIPELINE_CACHE"])
        self._saved = {name: os.environ.get(name) for name in names}
        os.environ[PROBE_ENV] = str(self.folder)
        if not is_slow(item):
            os.environ["RAG_PIPELINE_CACHE"] = str(self.cache)

    def disarm(self) -> list[str]:
        """Restore the environment; what the test did that makes it slow."""
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        found = []
        exports = self.cache / "onnx"
        if exports.exists():
            found.append("loads the real embedding model (it needed the ONNX export)")
            shutil.rmtree(exports, ignore_errors=True)  # the next test must export again to use it
        if not self._had_library and "sentence_transformers" in sys.modules:
            found.append("imports sentence-transformers (the real model in the library)")
        note = self.folder / DEPLOYMENT_NOTE
        if note.exists():
            found.append(f"starts a Dagster deployment ({'; '.join(note.read_text().splitlines())})")
            note.unlink()
        return found


def _audit(event: str, args: tuple) -> None:
    # `subprocess.Popen` is audited with (executable, args, cwd, env): a webserver or daemon started
    # by a test directly, not through the harness.
    if event == "subprocess.Popen":
        command = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
        program = Path(str(command[0])).name if command else ""
        if program in _DEPLOYMENT_COMMANDS:
            note_deployment(program)


_auditing = False  # an audit hook cannot be removed: one per process (pytester may run sessions in one)


def pytest_configure(config: pytest.Config) -> None:
    global _auditing
    folder = Path(tempfile.mkdtemp(prefix="rag-pipeline-test-probe-"))
    config.stash[_PROBE] = SlowProbe(folder)
    if not _auditing:
        sys.addaudithook(_audit)
        _auditing = True


def pytest_unconfigure(config: pytest.Config) -> None:
    probe = config.stash.get(_PROBE, None)
    if probe is not None:
        shutil.rmtree(probe.folder, ignore_errors=True)


_PROBE = pytest.StashKey[SlowProbe]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    probe = item.config.stash[_PROBE]
    probe.arm(item)
    try:
        return (yield)
    finally:
        probe.disarm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    # Checked after the call and after teardown (a module fixture may load the model in setup; a
    # deployment context may start and stop inside the call).
    if report.when in ("call", "teardown") and not is_slow(item) and report.passed:
        probe = item.config.stash[_PROBE]
        found = probe.disarm()
        probe.arm(item)
        if found:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} is not marked slow but {' and '.join(found)}: mark it "
                               "@pytest.mark.slow (or the module: pytestmark = pytest.mark.slow), or use the "
                               "hashing embedder where the assertion does not depend on the model")
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the longest modules first; the scheduler hands modules out in this order."""
    if not hasattr(config, "workerinput"):  # not an xdist worker: the order written is kept
        return
    first = sorted(LONGEST, key=LONGEST.get, reverse=True)
    rank = {unit: i for i, unit in enumerate(first)}
    items.sort(key=lambda item: rank.get(work_unit(item), len(rank)))  # stable: the rest keep their order
