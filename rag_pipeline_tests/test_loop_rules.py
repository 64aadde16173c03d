"""The test loop's rules (loop_plugin.py) hold: a test not marked slow that loads the real embedding
model or starts a Dagster deployment, itself or through a process it starts, fails and says to mark
it; marked slow, it passes. Under xdist a module is one work unit (its module fixture is built once)
and the longest modules start first."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

PLUGIN = ("-p", "rag_pipeline_tests.loop_plugin")

UNMARKED_AND_MARKED = """
    import os, subprocess, sys
    from pathlib import Path

    import pytest

    from rag_pipeline_tests.harness.probe import note_deployment

    WEBSERVER = str(Path(sys.executable).parent / "dagster-webserver")
    CHILD_STARTS_A_DEPLOYMENT = ("from rag_pipeline_tests.harness.probe import note_deployment; "
                                 "note_deployment('a deployment started by a child process')")


    def export_into_the_cache():
        # What the first use of the real model does: its ONNX export goes into the tool's cache.
        (Path(os.environ["RAG_PIPELINE_CACHE"]) / "onnx" / "rev-v1").mkdir(parents=True)


    def test_pure():
        assert 1 + 1 == 2


    def test_model_unmarked():
        export_into_the_cache()


    def test_webserver_unmarked():
        subprocess.run([WEBSERVER, "--version"], capture_output=True, check=True)


    def test_child_deployment_unmarked():
        subprocess.run([sys.executable, "-c", CHILD_STARTS_A_DEPLOYMENT], check=True)


    @pytest.mark.slow
    def test_all_of_it_marked():
        note_deployment("a deployment")
        subprocess.run([WEBSERVER, "--version"], capture_output=True, check=True)
        assert os.environ.get("RAG_PIPELINE_CACHE") != str(Path(os.environ["RAG_PIPELINE_TEST_PROBE"]) / "cache")
"""


def test_an_unmarked_test_that_loads_the_model_or_starts_a_deployment_fails_saying_to_mark_it(pytester):
    pytester.makepyfile(test_rules=textwrap.dedent(UNMARKED_AND_MARKED))
    # -rN: no short summary, whose lines repeat the messages or not depending on the terminal's width
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(passed=2, failed=3)
    out = result.stdout.str()
    assert "test_model_unmarked is not marked slow but loads the real embedding model" in out
    assert "test_webserver_unmarked is not marked slow but starts a Dagster deployment (dagster-webserver)" in out
    assert "starts a Dagster deployment (a deployment started by a child process)" in out
    assert out.count("mark it @pytest.mark.slow") == 3


REAL_MODEL = """
    from rag_pipeline.config import EmbeddingConfig
    from rag_pipeline.core.embedding.embedder import make_embedder


    def test_encodes_with_the_real_model():
        assert make_embedder(EmbeddingConfig()).encode(["how do I set a timeout"]).shape == (1, 384)
"""


@pytest.mark.slow
def test_the_real_model_is_seen_where_it_really_loads(pytester):
    """The probe watches the folder the real export is written to: a test that encodes one text is caught."""
    pytester.makepyfile(test_model=textwrap.dedent(REAL_MODEL))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "test_encodes_with_the_real_model is not marked slow but loads the real embedding model" in result.stdout.str()


MODULE = """
    import os
    from pathlib import Path

    import pytest


    @pytest.fixture(scope="module")
    def built():
        with open(Path({log!r}), "a") as log:
            log.write(f"{name} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
        return os.environ["PYTEST_XDIST_WORKER"]


    @pytest.mark.parametrize("i", range(6))
    def test_uses_it(built, i):
        assert os.environ["PYTEST_XDIST_WORKER"] == built
"""


def _modules(pytester) -> Path:
    """Three modules, collected in this order; the plugin knows the last two as the longest."""
    log = pytester.path / "built.log"
    for name in ("core/test_small", "e2e/test_celery_backfill", "e2e/test_real_night"):
        path = pytester.path / "rag_pipeline_tests" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(MODULE.format(log=str(log), name=name)))
    return log


XDIST = ("-n", "2", "--dist", "loadscope", "--no-loadscope-reorder")


def test_under_xdist_a_module_is_one_work_unit(pytester):
    log = _modules(pytester)
    pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *XDIST).assert_outcomes(passed=18)
    # Each module fixture once, on the worker of all its tests.
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == [
        "core/test_small", "e2e/test_celery_backfill", "e2e/test_real_night"]


def test_under_xdist_the_longest_modules_start_first(pytester):
    log = _modules(pytester)
    one_worker = (*XDIST[:1], "1", *XDIST[2:])  # one worker runs the units in the order they are sent
    pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *one_worker).assert_outcomes(passed=18)
    assert [line.split()[0] for line in log.read_text().splitlines()] == [
        "e2e/test_real_night", "e2e/test_celery_backfill", "core/test_small"]


def test_make_caches_bytecode_even_where_the_shell_says_not_to():
    """A shell with PYTHONDONTWRITEBYTECODE (this machine's has it) would have every process of the
    suite compile Dagster and torch from source again: the Makefile unexports it for its commands."""
    repo = Path(__file__).resolve().parent.parent
    probe = 'probe: ; @echo "[$$PYTHONDONTWRITEBYTECODE]"'
    shown = subprocess.run(["make", "-s", "--no-print-directory", "--eval", probe, "probe"], cwd=repo,
                           env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True,
                           check=True)
    assert shown.stdout.strip() == "[]"


@pytest.mark.parametrize("target", ["test", "test-fast"])
def test_make_runs_the_tests_with_one_blas_thread_per_process(target):
    """More workers than cores: BLAS threads spinning between products would take CPU from the other
    workers' tests, so the test targets run pytest (and what it starts) with one OpenBLAS thread."""
    repo = Path(__file__).resolve().parent.parent
    shown = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=repo, capture_output=True, text=True,
                           check=True)
    [command] = [line for line in shown.stdout.splitlines() if " -m pytest " in line]
    assert command.startswith("OPENBLAS_NUM_THREADS=1 "), command
