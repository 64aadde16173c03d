"""Runs left STARTED by a process that died: found and closed by the next run of the same partition.

A run killed with SIGKILL never writes its failure, so the instance shows it STARTED forever and
the tag limit on `dagster/partition` (dagster.yaml) would keep later runs of that source queued.
Dagster's run monitoring (dagster.yaml) closes such runs only for launchers that can check a run
worker's health (Kubernetes, ECS, Docker); the local launcher and the command line cannot. So
before a source runs, its STARTED runs whose process is gone on this machine are marked failed,
with the reason.

A killed run also keeps the pool slot its step claimed (pool `store`, limit 1 on DuckDB): Dagster
frees a slot when the step ends, and a SIGKILL ends none. Every later step of the pool, of any
source, evaluation or monitoring, would then wait for ever. So before any run, the slots held or
awaited by runs that can no longer free them (finished runs, and STARTED runs whose process is
gone, closed first) are freed.

And a check evaluation reported outside any run (a promotion's) must not collide with the one
before it: the statement that makes way for it is `core/storage/check_index.py`, with the rest of
the project's SQL.
"""

from __future__ import annotations

import os
import socket

import dagster as dg

from rag_pipeline.core.render import printable
from rag_pipeline.core.storage.check_index import delete_runless_check_row

# Tags of the runs the command line starts: they run on this host, in this process.
PID_TAG = "rag_pipeline/pid"
HOST_TAG = "rag_pipeline/host"


def process_tags() -> dict[str, str]:
    """Tags naming this process, for runs executed in it (the command line's)."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def close_abandoned_runs(instance: dg.DagsterInstance, partition_key: str, current_run_id: str | None = None) -> list[str]:
    """Mark failed the STARTED runs of this partition whose process died on this machine; return their ids."""
    closed = []
    runs = instance.get_runs(filters=dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED], tags={"dagster/partition": partition_key},
    ))
    for run in runs:
        if run.run_id == current_run_id:
            continue
        pid, started = _run_process(instance, run)
        if pid is None or _alive_since(pid, started):
            continue
        instance.report_run_failed(run, message=(
            f"closed by a later run of partition {printable(partition_key)!r}: the process running it "
            f"(pid {pid}) is gone, most likely killed; its work is redone by the next run"
        ))
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        closed.append(run.run_id)
    return closed


def free_slots_of_dead_runs(instance: dg.DagsterInstance, current_run_id: str | None = None) -> list[str]:
    """Free the pool slots held or awaited by runs that can no longer free them: finished runs, and
    STARTED runs whose process died on this machine (marked failed first). Returns their ids."""
    storage = instance.event_log_storage
    freed = []
    for run_id in sorted(storage.get_concurrency_run_ids()):
        if run_id == current_run_id:
            continue
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            if run.status != dg.DagsterRunStatus.STARTED:
                continue  # queued or starting: its launcher and the daemon's run monitoring are in charge
            pid, started = _run_process(instance, run)
            if pid is None or _alive_since(pid, started):
                continue
            instance.report_run_failed(run, message=(
                f"closed by a later run: the process running it (pid {pid}) is gone, most likely killed, "
                "and it still held a slot of a pool; its work is redone by the next run of its partition"
            ))
        storage.free_concurrency_slots_for_run(run_id)
        freed.append(run_id)
    return freed


def _run_process(instance: dg.DagsterInstance, run: dg.DagsterRun) -> tuple[int | None, float | None]:
    """(pid, start time) of the process that runs `run`, if it runs on this machine."""
    host = run.tags.get(HOST_TAG)
    if host is not None and host != socket.gethostname():
        return None, None
    if host is None and not isinstance(instance.run_launcher, dg.DefaultRunLauncher):
        return None, None  # launched elsewhere: that launcher's run monitoring is in charge
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    started = records[0].timestamp if records else None
    if PID_TAG in run.tags:
        return int(run.tags[PID_TAG]), started
    return (records[0].event_log_entry.pid if records else None), started


def _alive_since(pid: int, started: float | None) -> bool:
    """Is `pid` a live process that existed when the run started (not a later one that reused the number)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if started is None:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return True
    process_start = boot + ticks / os.sysconf("SC_CLK_TCK")
    # A process that started after the run did cannot be the one running it.
    return process_start <= started + 1.0


def report_runless_check(instance: dg.DagsterInstance, evaluation: dg.AssetCheckEvaluation) -> None:
    """Report a check evaluation outside any run, replacing the previous run-less one of its partition.

    Dagster's check index keeps one run-less row per (asset, check, partition) and inserts without
    replacing, so a second report (a revision's second promotion) fails with a UNIQUE constraint.
    The earlier events stay in the event log; only the earlier index row makes way."""
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
    from sqlalchemy.exc import IntegrityError

    try:
        instance.report_runless_asset_event(evaluation)
        return
    except IntegrityError:
        pass
    with instance.event_log_storage.index_connection() as connection:
        delete_runless_check_row(connection, AssetCheckExecutionsTable, evaluation.asset_key.to_string(),
                                 evaluation.check_name, evaluation.partition)
    instance.report_runless_asset_event(evaluation)
