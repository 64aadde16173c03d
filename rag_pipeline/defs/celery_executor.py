"""Steps on Celery workers: Dagster's `celery_executor` (dagster-celery), configured for a deployment.

The run stays where the run launcher starts it; each of its steps becomes a Celery task on the
broker, taken by whichever worker listens on the step's queue. Broker and result backend come
from the environment at run time (Dagster reads `{"env": ...}` itself), so the code location and
the workers name the same Redis without a URL in code. deploy/celery/README.md has the deployment.
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg

from rag_pipeline.config import ConfigError

BROKER_ENV = "RAG_PIPELINE_CELERY_BROKER"
BACKEND_ENV = "RAG_PIPELINE_CELERY_BACKEND"
# dagster-celery's own queue: every step of every job goes there unless an op carries the
# `dagster-celery/queue` tag. Workers listen on it with `-q dagster`.
QUEUE = "dagster"

# The executor's config, and the `execution: config:` block of deploy/celery/worker.yaml (a test
# holds them equal): a worker must use the broker and settings the runs submit with.
CELERY_CONFIG: dict = {
    "broker": {"env": BROKER_ENV},
    "backend": {"env": BACKEND_ENV},
    "config_source": {
        # One task at a time per worker process: a step is minutes of CPU, not a short message.
        "worker_prefetch_multiplier": 1,
        "task_default_queue": QUEUE,
    },
}


def celery_executor(environ: Mapping[str, str]) -> dg.ExecutorDefinition:
    """dagster-celery's executor with the deployment's broker, backend and settings. Refused when
    `environ` lacks a variable: dagster-celery would fall back to a broker on localhost and the
    runs would wait on a queue no worker reads."""
    missing = [name for name in (BROKER_ENV, BACKEND_ENV) if not environ.get(name)]
    if missing:
        raise ConfigError(f"RAG_PIPELINE_EXECUTOR=celery needs {' and '.join(missing)}: export {missing[0]}="
                         f"redis://HOST:6379/{0 if missing[0] == BROKER_ENV else 1} (the broker the workers use; "
                         f"see deploy/celery/README.md)")
    import dagster_celery  # the `celery` extra; imported only when a deployment asks for Celery

    return dagster_celery.celery_executor.configured(CELERY_CONFIG, name="celery")
