"""Where a run's steps execute follows the backend, and an override names one of Dagster's executors."""

import dagster as dg
import pytest

from rag_pipeline.definitions import EXECUTOR_ENV_VAR, executor_for
from rag_pipeline_tests.conftest import HTTPX_V023


@pytest.fixture
def configs(write_config):
    duckdb = write_config({"httpx": HTTPX_V023})
    postgres = duckdb.model_copy(update={"storage": duckdb.storage.model_copy(update={"backend": "postgres"})})
    return duckdb, postgres


def test_the_backend_chooses(configs, monkeypatch):
    monkeypatch.delenv(EXECUTOR_ENV_VAR, raising=False)
    duckdb, postgres = configs
    assert executor_for(duckdb) is dg.in_process_executor
    assert executor_for(postgres) is dg.multiprocess_executor


def test_an_override_is_one_of_dagsters_executors(configs, monkeypatch):
    duckdb, postgres = configs
    monkeypatch.setenv(EXECUTOR_ENV_VAR, "in_process")
    assert executor_for(postgres) is dg.in_process_executor
    monkeypatch.setenv(EXECUTOR_ENV_VAR, "multiprocess")
    with pytest.raises(ValueError, match="needs storage.backend: postgres"):
        executor_for(duckdb)
    monkeypatch.setenv(EXECUTOR_ENV_VAR, "celery")
    with pytest.raises(ValueError, match="use k8s, multiprocess or in_process"):
        executor_for(postgres)
