"""Reading the pipeline config: the file (bounded, duplicate keys refused), its relative paths made
absolute, the command line's overrides and an experiment's overlay, every error naming the file
and the field."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from rag_pipeline.config.sections import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_PATH,
    MAX_CONFIG_BYTES,
    ConfigError,
    PipelineConfig,
    StorageConfig,
)
from rag_pipeline.core.metadata import load_mapping, yaml_problem


def _resolve_paths(raw: dict, base: Path) -> dict:
    """Make the file's relative paths absolute against the config file's folder."""
    for source in raw.get("sources") or []:
        if isinstance(source, dict) and "path" in source:
            source["path"] = str((base / str(source["path"])).resolve())
        git = source.get("git") if isinstance(source, dict) else None
        # A local repository is relative to the config file; a URL (scheme:// or user@host:) is kept.
        if isinstance(git, dict) and isinstance(git.get("repo"), str) and not re.match(r"^[\w+.-]+://|^[^/]+@[^/]+:", git["repo"]):
            git["repo"] = str((base / git["repo"]).resolve())
    answers = raw.get("answers")
    if isinstance(answers, dict):
        answers["prompt"] = str((base / str(answers.get("prompt", "prompts/answer.md"))).resolve())
    else:
        raw["answers"] = {"prompt": str((base / "prompts/answer.md").resolve())}
    monitoring = raw.get("monitoring")
    if isinstance(monitoring, dict) and monitoring.get("query_log"):
        monitoring["query_log"] = str((base / str(monitoring["query_log"])).resolve())
    storage = raw.setdefault("storage", {})
    if isinstance(storage, dict):
        # The default path too is the file's (it was the working directory's: a reading command
        # run elsewhere looked for the index, and created one, in the wrong place).
        storage["path"] = str((base / str(storage.get("path") or StorageConfig().path)).resolve())
    for key in ("golden_set", "gate_policy"):
        if raw.get(key):
            raw[key] = str((base / str(raw[key])).resolve())
    return raw


# Keys a config may still hold from an earlier version: what replaced each, said instead of "extra input".
RETIRED_KEYS = {
    ("monitoring", "gap_distance"): "retired: coverage-gap topics are cut at a distance calibrated on the golden "
                                    "set's questions; remove it, and set monitoring.gap_topic_quantile (default "
                                    "0.02) to make topics wider or narrower",
}


def _message(item: dict) -> str:
    """A validation error's message: for a retired key, what replaced it."""
    retired = RETIRED_KEYS.get(tuple(item["loc"])) if item["type"] == "extra_forbidden" else None
    return retired or item["msg"]


def _format_validation_error(path: Path, error: ValidationError) -> str:
    lines = [f"invalid pipeline config {path}:"]
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  - {field}: {_message(item)}")
    lines.append("fix the field(s) above; see data/pipeline.yaml for a working example")
    return "\n".join(lines)


def config_path_from_env() -> Path:
    """The config file to use: $RAG_PIPELINE_CONFIG if set, else data/pipeline.yaml."""
    env_value = os.environ.get(CONFIG_ENV_VAR)
    return Path(env_value).resolve() if env_value else DEFAULT_CONFIG_PATH


def load_config(path: Path | str | None = None, sources: dict[str, str] | None = None,
                golden_set: Path | str | None = None) -> PipelineConfig:
    """Read and validate the pipeline config; raise ConfigError naming the field on failure.

    `sources` (`name -> path`, the command line's --source) adds or replaces sources and
    `golden_set` replaces the golden-set file: the one place where overrides are applied.
    """
    config = _read_config(path)
    if sources:
        config = config.with_sources({name: Path(p) for name, p in sources.items()})
    if golden_set:
        config = config.model_copy(update={"golden_set": Path(golden_set).resolve()})
    return config


def parse_source_overrides(values: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`NAME=PATH` strings (the command line's --source) as `name -> absolute path`."""
    overrides = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--source {value!r}: expected NAME=PATH, e.g. --source docs=./docs")
        overrides[name] = str(Path(path).resolve())
    return overrides


def with_overlay(config: PipelineConfig, assignments: list[str] | tuple[str, ...] = (),
                 overlay_file: Path | str | None = None) -> PipelineConfig:
    """The config with an overlay YAML file and `section.key=value` assignments merged on top
    (an experiment's baseline and candidate).

    An overlay means what the same keys written into the config file would mean: it is merged
    into what the file says (`as_written`, never the defaults filled in, which a fail-closed
    validator may refuse to read back, e.g. `tenant: null`), its relative paths resolve against
    the config file's folder, and the result is validated whole. ConfigError names the key."""
    what = _overlay_name(assignments, overlay_file)
    updates: dict = _read_yaml(Path(overlay_file), "experiment overlay") if overlay_file else {}
    for assignment in assignments:
        _assign(updates, assignment)
    merged = _deep_merge(as_written(config), updates)
    base = config.config_path.parent if config.config_path else Path.cwd()
    try:
        overlaid = PipelineConfig.model_validate(_resolve_paths(merged, base))
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {_message(e)}" for e in exc.errors())
        raise ConfigError(f"invalid experiment overlay ({what}): {fields}") from exc
    return overlaid.model_copy(update={"config_path": config.config_path})


def as_written(model: BaseModel) -> dict:
    """The fields of a settings model that were given (by its file, or set in code since), as JSON
    values: validated again, they give an equal model, whatever the defaults of the others are."""
    return model.model_dump(mode="json", exclude_unset=True)


def _overlay_name(assignments: list[str] | tuple[str, ...], overlay_file: Path | str | None) -> str:
    named = [str(overlay_file)] if overlay_file else []
    return ", ".join(named + [f"--set {assignment}" for assignment in assignments]) or "empty"


def _assign(updates: dict, assignment: str) -> None:
    """Write one `section.key=value` (the value read as YAML) into the nested `updates`."""
    key, sep, value = assignment.partition("=")
    parts = key.split(".")
    if not sep or not all(part.strip() for part in parts):
        raise ConfigError(f"--set {assignment!r}: expected section.key=value, e.g. chunking.strategy=fixed")
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {assignment!r}: the value is not valid YAML: {yaml_problem(exc)}") from exc
    node = updates
    for depth, part in enumerate(parts[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {assignment!r}: {'.'.join(parts[:depth + 1])} is given a value of its own, "
                              "so it has no keys to set")
    node[parts[-1]] = parsed


def _deep_merge(base: dict, updates: dict) -> dict:
    merged = dict(base)
    for key, value in updates.items():
        merged[key] = _deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def _read_yaml(path: Path, what: str) -> dict:
    """A YAML mapping from a file of at most `MAX_CONFIG_BYTES`, a key given twice refused
    (ConfigError naming the file, and the line where YAML knows it)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{what} {path} is over {MAX_CONFIG_BYTES // 1024 // 1024} MB: not read (a config is a page of YAML; "
                          "is this the right file?)")
    try:
        return load_mapping(data.decode("utf-8"), f"{what} {path}")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start})") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _read_config(path: Path | str | None) -> PipelineConfig:
    config_path = Path(path).resolve() if path is not None else config_path_from_env()
    if not config_path.is_file():
        raise ConfigError(f"pipeline config {config_path} does not exist (set {CONFIG_ENV_VAR} or pass --config)")
    raw = _read_yaml(config_path, "pipeline config")
    if not raw:
        raise ConfigError(f"pipeline config {config_path} must be a mapping with a 'sources' list")
    raw = _resolve_paths(raw, config_path.parent)
    try:
        config = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(config_path, exc)) from exc
    return config.model_copy(update={"config_path": config_path})
