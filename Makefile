# The two set-up commands: `make demo` (install + run the pipeline on the bundled data) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DAGSTER_HOME := $(CURDIR)/.dagster_home
# Offline: models and parsers must never reach for a hub or send telemetry.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DO_NOT_TRACK := 1
export UNSTRUCTURED_DISABLE_NOTICE := 1
export TOKENIZERS_PARALLELISM := false
# Bytecode is cached as each module is first imported (pip installs with --no-compile, below). A shell
# that sets PYTHONDONTWRITEBYTECODE would make every process compile Dagster, torch and the rest from
# source again: on a clean clone that doubled the CPU of the command-line tests (test_cli.py: 54 CPU s
# against 27 with the cache), and the suite starts hundreds of processes.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install demo test test-fast ui validate bench clean lint screenshots

$(BIN)/rag-pipeline: pyproject.toml tools/en_core_web_sm_shim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	# --no-compile: Python compiles a module's bytecode when it is first imported; compiling all of
	# site-packages up front (torch's thousands of files included) costs about a minute of CPU.
	set -o pipefail; $(BIN)/pip install -q --no-compile -e '.[dev]' ./tools/en_core_web_sm_shim 2>&1 | grep -v "is ignored" || test $${PIPESTATUS[0]} -eq 0
	# unstructured's PDF path imports unstructured-inference; its own dependencies would replace
	# the CPU torch with a multi-GB CUDA build, so it goes in without them (pyproject lists what it needs).
	set -o pipefail; $(BIN)/pip install -q --no-compile --no-deps unstructured-inference==1.6.14 2>&1 | grep -v "is ignored" || test $${PIPESTATUS[0]} -eq 0
	# The bundled model exported to ONNX once, into the user's cache (first use would do it otherwise).
	$(BIN)/python -m rag_pipeline.core.embedding.onnx_export
	touch $@

install: $(BIN)/rag-pipeline

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

# The demo and the UI share one Dagster instance folder inside the checkout (git-ignored).
demo ui: export DAGSTER_HOME := $(DAGSTER_HOME)

demo: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/rag-pipeline demo

# CI runs everything (.ci/run calls `make test`); the development loop runs what is not marked slow.
# Both on pytest-xdist workers (a module at a time each, the longest first, see pyproject.toml); the
# slowest tests are listed at the end. `pytest --lf` reruns what failed last. Both run more workers
# than the two cores: the longest modules of `make test` mostly wait for a daemon (a schedule's
# minute, a backfill's 30 s loop) and the fast tests for processes they start (Dagster instances,
# the command line), so extra workers compute meanwhile (benchmarks/test_loop.py measures both).
TEST_WORKERS ?= 5
FAST_WORKERS ?= 3
# One BLAS thread per test process: numpy's OpenBLAS starts a thread per core for a large product,
# and its threads spin while they wait for the next one, CPU that the other workers' tests need
# when the workers outnumber the cores (core/monitoring and core/retrieval, serial: 53 and 57 CPU s
# with one thread, 65 and 62 with two). What is computed does not change, only how many threads share it.
TEST_ENV ?= OPENBLAS_NUM_THREADS=1
test: lint
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15

test-fast: lint
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(FAST_WORKERS) --durations=10 -m "not slow"

lint: install
	$(BIN)/ruff check rag_pipeline rag_pipeline_tests benchmarks tools

ui: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -w workspace.yaml

validate: install
	$(BIN)/dagster definitions validate -w workspace.yaml

bench: install
	$(BIN)/python benchmarks/ingest.py

# The UI's key pages in headless Chromium (Debian's chromium package; playwright drives it, nothing downloaded).
screenshots: install
	$(BIN)/pip install -q --no-compile -e '.[ui]' 2>&1 | grep -v "is ignored" || true
	$(BIN)/python tools/ui_screenshots.py --out docs/screenshots

clean:
	rm -rf .rag_pipeline .dagster_home
