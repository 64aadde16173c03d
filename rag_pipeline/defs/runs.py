"""Runs left STARTED by a process that died: found and marked failed, through Dagster's public API.

A run whose process is killed (SIGKILL, the OOM killer, a pulled plug) never writes its failure:
the instance shows it STARTED for ever. Until it is closed, the tag limit on `dagster/partition`
(dagster.yaml) keeps later runs of its source queued, and the `store` pool (run granularity) keeps
every later run that needs the store queued. Dagster's run monitoring closes such runs only where
the run launcher can check a run worker's health (Kubernetes, ECS, Docker): Dagster 1.13's
`DefaultRunLauncher` cannot, so on one machine a dead run would wait for `max_runtime_seconds`.

So the command line (before it runs anything) and `source_change_sensor` (every minute) close them:
a STARTED run on this machine whose process is gone is reported failed with the reason
(`DagsterInstance.report_run_failed`). The process of a run is known from run tags this project
sets itself when it executes a run in its own process (the command line), or else from the
`pid` Dagster records on the run's RUN_START event (`DagsterEvent.pid`, a documented field), for
runs the default launcher started on this machine. Nothing here reads Dagster's tables or
private fields, and nothing runs inside a step: a fault in this repair can fail no run.

Pool slots need no repair: the pools are enforced per run (`granularity: run` in dagster.yaml), so
a step never holds a slot that its death could leak; a run counts against its pool while it is
in progress, and stops counting once it is closed.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

import dagster as dg

from rag_pipeline.core.render import printable

# Tags of the runs this project executes in its own process (the command line's).
PID_TAG = "rag_pipeline/pid"
HOST_TAG = "rag_pipeline/host"


def process_tags() -> dict[str, str]:
    """Tags naming this process, for runs executed in it (the command line's)."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def close_dead_runs(instance: dg.DagsterInstance, partitions: Iterable[str] | None = None) -> list[str]:
    """Mark failed the STARTED runs (of these partitions, or all) whose process died on this
    machine; return their ids. A run whose process cannot be known here is left to Dagster's run
    monitoring."""
    keys = sorted(set(partitions)) if partitions is not None else [None]
    closed = []
    for key in keys:
        tags = {"dagster/partition": key} if key is not None else None
        for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags=tags)):
            process = _run_process(instance, run)
            if process is None or _alive_since(*process):
                continue
            where = f" of partition {printable(run.tags['dagster/partition'])!r}" if "dagster/partition" in run.tags else ""
            instance.report_run_failed(run, message=(
                f"closed: the process running this run{where} (pid {process[0]}) is gone, most likely killed "
                "(out of memory, a signal, a reboot); nothing it staged was served, and the next run of its "
                "partition redoes its work"
            ))
            closed.append(run.run_id)
    return closed


def _run_process(instance: dg.DagsterInstance, run: dg.DagsterRun) -> tuple[int, float | None] | None:
    """(pid, start time) of the process that runs `run`, when it runs on this machine."""
    host = run.tags.get(HOST_TAG)
    if host is not None:
        if host != socket.gethostname():
            return None
        return int(run.tags[PID_TAG]), _run_start_time(instance, run.run_id)
    if not isinstance(instance.run_launcher, dg.DefaultRunLauncher):
        return None  # launched elsewhere (Kubernetes, Docker...): that launcher's run monitoring is in charge
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    event = records[0].event_log_entry.dagster_event if records else None
    if event is None or event.pid is None:
        return None  # not started yet as far as the log knows
    return event.pid, records[0].timestamp


def _run_start_time(instance: dg.DagsterInstance, run_id: str) -> float | None:
    record = instance.get_run_record_by_id(run_id)
    return record.start_time if record is not None else None


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
