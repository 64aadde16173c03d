"""Where a run's steps execute follows the backend, and an override names one of Dagster's executors."""

import dagster as dg
import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.definitions import EXECUTOR_ENV_VAR, executor_for
from rag_pipeline.defs.celery_executor import BACKEND_ENV, BROKER_ENV, CELERY_CONFIG
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
    monkeypatch.setenv(EXECUTOR_ENV_VAR, "slurm")
    with pytest.raises(ValueError, match="'slurm': use k8s, celery, multiprocess or in_process"):
        executor_for(postgres)


def test_celery_is_dagster_celerys_executor_with_the_workers_config(configs, monkeypatch):
    from dagster_celery import celery_executor

    duckdb, postgres = configs
    monkeypatch.setenv(EXECUTOR_ENV_VAR, "celery")
    monkeypatch.setenv(BROKER_ENV, "redis://broker.internal:6379/0")
    monkeypatch.setenv(BACKEND_ENV, "redis://broker.internal:6379/1")
    chosen = executor_for(postgres)
    assert chosen.name == "celery" and chosen.executor_creation_fn is celery_executor.executor_creation_fn
    # The runs submit with the config the workers are started with (deploy/celery/worker.yaml).
    workers = yaml.safe_load((PROJECT_ROOT / "deploy" / "celery" / "worker.yaml").read_text())["execution"]["config"]
    assert CELERY_CONFIG == workers
    with pytest.raises(ValueError, match="celery needs storage.backend: postgres"):
        executor_for(duckdb)


def test_a_worker_reads_its_broker_from_the_environment(monkeypatch):
    """A worker started with worker.yaml (as dagster-celery's CLI validates it) gets the broker and
    backend from the variables the runs' executor reads too; unset, the config is refused."""
    from dagster_celery.cli import get_validated_config

    monkeypatch.setenv(BROKER_ENV, "redis://broker.internal:6379/0")
    monkeypatch.setenv(BACKEND_ENV, "redis://broker.internal:6379/1")
    worker = get_validated_config(str(PROJECT_ROOT / "deploy" / "celery" / "worker.yaml"))
    assert worker["broker"] == "redis://broker.internal:6379/0" and worker["backend"] == "redis://broker.internal:6379/1"


def test_celery_without_a_broker_is_refused_with_the_variable_to_set(configs, monkeypatch):
    # dagster-celery alone would fall back to a broker on localhost, which no worker reads.
    monkeypatch.setenv(EXECUTOR_ENV_VAR, "celery")
    monkeypatch.delenv(BROKER_ENV, raising=False)
    monkeypatch.setenv(BACKEND_ENV, "redis://broker.internal:6379/1")
    with pytest.raises(ValueError, match=f"needs {BROKER_ENV}: export {BROKER_ENV}=redis://"):
        executor_for(configs[1])
