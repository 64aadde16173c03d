"""data/pipeline.yaml shows every setting of the schema (rag_pipeline/config/sections.py), each with a
comment: a field added to the schema and not to the sample, or a key the schema dropped, fails here.
Its gate policy (data/gate_policy.yaml) shows every setting of the policy too, and the tolerance
each rule applies is a number written there."""

from __future__ import annotations

import re
import types
import typing

import yaml
from pydantic import BaseModel

from rag_pipeline.config import PipelineConfig, load_config
from rag_pipeline.core.evaluation.gating.policy import GatePolicy, load_policy
from rag_pipeline_tests.conftest import SAMPLE_CONFIG

# The access defaults fail closed (`tenant: null`, `roles: []` are errors): the sample shows them
# commented out, as an example to fill in.
# A source is a folder (`path`), or one of the other kinds instead: those are shown commented out too.
COMMENTED_OUT = {"sources.defaults.tenant", "sources.defaults.roles", "sources.git", "sources.http", "sources.connector"}
_KEY = re.compile(r"^(\s*)(?:- )?([a-z_0-9]+):")


def _model(annotation: object) -> type[BaseModel] | None:
    """The model a field holds, itself or as the items of a tuple; None for a scalar or an optional
    model (`chunking: null` in a source: that section's keys are the top-level ones)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is tuple:
        return _model(typing.get_args(annotation)[0])
    return None


def _schema_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        keys.add(prefix + name)
        inner = None if isinstance(field.annotation, types.UnionType) else _model(field.annotation)
        if inner is not None:
            keys |= _schema_keys(inner, f"{prefix}{name}.")
    return keys


def _file_keys(value: object, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(value, dict):
        for name, inner in value.items():
            keys.add(prefix + name)
            keys |= _file_keys(inner, f"{prefix}{name}.")
    elif isinstance(value, list):
        for item in value:
            keys |= _file_keys(item, prefix)
    return keys


def test_the_sample_config_shows_every_setting_of_the_schema():
    text = SAMPLE_CONFIG.read_text(encoding="utf-8")
    shown = _file_keys(yaml.safe_load(text))
    commented = {key for key in COMMENTED_OUT if re.search(rf"^\s*# {key.rsplit('.', 1)[1]}: ", text, re.M)}
    schema = _schema_keys(PipelineConfig)
    assert commented == COMMENTED_OUT, "show these commented out, with an example value"
    assert schema - shown - commented == set(), "settings of the schema missing from data/pipeline.yaml"
    assert shown - schema == set(), "keys of data/pipeline.yaml the schema does not have"
    assert load_config(SAMPLE_CONFIG).sources  # and it loads


def _bare_settings(text: str, top_level_only: bool = False) -> list[str]:
    """Lines of settings with no comment on their line or on the nearest line above."""
    lines = text.splitlines()
    bare = []
    for number, line in enumerate(lines, start=1):
        key = _KEY.match(line)
        if not key or (top_level_only and key.group(1)):
            continue
        before = next((lines[i].strip() for i in range(number - 2, -1, -1) if lines[i].strip()), "")
        if " # " not in line and not before.startswith("#"):
            bare.append(f"line {number}: {line.strip()}")
    return bare


def test_every_setting_of_the_sample_config_has_a_comment():
    bare = _bare_settings(SAMPLE_CONFIG.read_text(encoding="utf-8"))
    assert not bare, "settings without a comment on their line or just above:\n" + "\n".join(bare)


def test_the_sample_gate_policy_states_every_setting_and_the_tolerance_each_rule_applies():
    path = load_config(SAMPLE_CONFIG).gate_policy
    text = path.read_text(encoding="utf-8")
    written = yaml.safe_load(text)
    assert _schema_keys(GatePolicy) - _file_keys(written) == set(), "policy settings missing from the file"
    assert set(written) <= set(GatePolicy.model_fields)
    # Each metric's dict entries are values, not settings: only the top-level keys need their comment.
    bare = _bare_settings(text, top_level_only=True)
    assert not bare, f"settings of {path.name} without a comment:\n" + "\n".join(bare)
    # The tolerance a rule states ("...; tolerance 0.02: PASS") is one a person finds written here,
    # never a default in the code: a metric's own entry, else default_tolerance; slices their own.
    policy = load_policy(path)
    for metric in (*policy.headline_metrics, "recall_at_10"):
        assert policy.headline_tolerance(metric) == written["tolerance"].get(metric, written["default_tolerance"])
    assert "recall_at_10" not in written["tolerance"]
    assert policy.slice_tolerance() == written["protected_slice_tolerance"] != written["default_tolerance"]


def test_the_schema_walk_sees_nested_sections():
    keys = _schema_keys(PipelineConfig)
    assert {"sources.limits.max_file_mb_by_type.pdf", "sources.exclude", "evaluation.report_k",
            "automation.nightly_cron", "answers.claim_judge", "retrieval.bm25_k1"} <= keys
    assert "config_path" not in keys and "sources.chunking.max_tokens" not in keys
