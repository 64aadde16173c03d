"""What every command shares: the config and store it opens, the Dagster instance, exit codes, JSON output."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
from pathlib import Path

from rag_pipeline.config import ConfigError, PipelineConfig, load_config, parse_source_overrides
from rag_pipeline.core.errors import EXIT_FAILED, EXIT_INPUT


def load_args(args: argparse.Namespace) -> tuple[PipelineConfig, dict[str, str]]:
    overrides = parse_source_overrides(args.source or [])
    return load_config(args.config, sources=overrides, golden_set=getattr(args, "golden", None)), overrides


def load_args_with_sources(args: argparse.Namespace) -> tuple[PipelineConfig, dict[str, str]]:
    """`load_args`, for a command that ingests: with no source at all it would do nothing and say nothing."""
    config, overrides = load_args(args)
    if not config.sources:
        raise ConfigError("no sources to ingest: list them under sources: in the config, or pass --source NAME=PATH")
    check_source_paths(config)
    return config, overrides


def check_source_paths(config: PipelineConfig) -> None:
    """A source path that does not exist is a config error (exit 2), unless the source was served
    from it before: then it vanished (unmounted, moved), an outage that fails that source alone."""
    missing = [s for s in config.sources if s.path is not None and not Path(s.path).exists()]
    if not missing:
        return
    from rag_pipeline.core.storage import NoIndexError

    try:
        store = configured_store(config, create=False)  # a config error must not leave an empty index behind
        served_before = {s.source_id for s in missing if store.ledger.served_root(s.source_id) == str(s.path)}
        store.close()
    except NoIndexError:
        served_before = set()
    for source in missing:
        if source.source_id not in served_before:
            where = config.config_path or "the config"
            raise ConfigError(f"source {source.name!r}: path {source.path} does not exist, and nothing was ever indexed from "
                              f"it: fix its path in {where} (or --source {source.name}=PATH), or remove the source")


def configured_store(config: PipelineConfig, read_only: bool = False, create: bool = True):
    """The configured store; `read_only` for commands that only read it (they create nothing: a
    missing index is an error, exit 2), `create=False` for writers that need an index there."""
    from rag_pipeline.core.storage import open_store

    return open_store(config.storage, read_only=read_only, create=create)


def evaluation_id(store, requested: str | None) -> str:
    """An evaluation id as given, or the latest stored one for `latest` (or nothing given)."""
    eval_id = store.records.latest_evaluation() if requested in (None, "", "latest") else requested
    if eval_id is None:
        raise ConfigError("no evaluation in the store yet: run `rag-pipeline eval` first")
    return eval_id


def dagster_instance():
    """The Dagster instance of $DAGSTER_HOME when set (runs then show in the UI), else a throwaway one."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()


def gate_policy(config: PipelineConfig, path: str | None):
    from rag_pipeline.core.evaluation.gating.policy import policy_or_default

    return policy_or_default(path or config.gate_policy)


INTERRUPTED_EXIT = 128 + signal.SIGINT  # the shell's code for a command stopped by Ctrl-C


BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE  # and for one whose reader closed its output


# Exit codes of eval, gate and promote (documented in docs/golden-set.md).
EXIT_PASS = 0  # measured; the gate passed, or found nothing to compare with, or an inconclusive drop
EXIT_REGRESSION = EXIT_FAILED  # the gate found a regression, or a run failed (ingestion, evaluation: the output says which)
EXIT_USAGE = EXIT_INPUT  # a usage or config error: flags, the config, the golden file, a run file


def print_json(value) -> None:
    """One strict JSON document on stdout: NaN and infinities (a metric with no case) become null,
    which every JSON parser reads, and values JSON has no type for become strings."""

    def finite(item):
        if isinstance(item, float):
            return item if math.isfinite(item) else None
        if isinstance(item, dict):
            return {key: finite(v) for key, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [finite(v) for v in item]
        return item

    print(json.dumps(finite(value), indent=2, default=str, allow_nan=False))
