"""The team's own fields of an imported record, and where each came from.

A team that wrote its cases with ids, slices and splits keeps them through RAGAS or DeepEval:
our fields (`id`, `slice`, `split`, `weight`, `tenant`, `roles`, `answerable`, `forbidden_docs`,
`gold_spans`) are read at the top level of a record first, else from its metadata object (RAGAS
`metadata`, DeepEval `additional_metadata`, a JSON text in a CSV cell). A RAGAS 0.1 testset keeps
a *list* of its source documents' metadata there: of those, only `answerable` is read, never an
id or a slice (a document's metadata says nothing of the case). Each field's origin is recorded
(`id`, `metadata.slice`, `synthesizer_name`, `generated`, `default`), so that the import summary
can say which fields came from where.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

from rag_pipeline.core.evaluation.golden.cases import parse_boolean

OURS = ("id", "slice", "split", "weight", "tenant", "roles", "answerable", "forbidden_docs", "gold_spans")
# Objects some tools keep per-record metadata in.
METADATA_OBJECTS = ("metadata", "additional_metadata")
# The fields whose origin the import summary reports.
REPORTED = ("id", "slice", "split")


def texts(value: Any) -> list[str]:
    """A list of non-empty texts from a list, a JSON or Python list literal, or one text."""
    if value is None:
        return []
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            for parse in (json.loads, ast.literal_eval):
                try:
                    parsed = parse(stripped)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(parsed, list):
                    return texts(parsed)
        return [stripped] if stripped else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in texts(v)]
    return [str(value)]


def our_field(name: str, value: Any) -> Any:
    """Our own fields as the file gave them; CSV strings turned into booleans, numbers and lists
    (an `answerable` that is no boolean is left as it is, for the importer to refuse)."""
    if name == "answerable":
        parsed = parse_boolean(value)
        return value if parsed is None else parsed
    if not isinstance(value, str):
        return value
    if name == "weight":
        try:
            return float(value)
        except ValueError:
            return value
    if name in ("roles", "forbidden_docs"):
        return texts(value)
    if name == "gold_spans":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def metadata_objects(record: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], bool]]:
    """(key, object, whether it is the record's own) for each metadata object of the record: a JSON
    text (a CSV cell) is parsed; a list of them (RAGAS 0.1: one per source document) is flattened,
    and none of those is the record's own."""
    found: list[tuple[str, Mapping[str, Any], bool]] = []
    for key in METADATA_OBJECTS:
        value = record.get(key)
        if isinstance(value, str) and value.strip()[:1] in ("{", "["):
            for parse in (json.loads, ast.literal_eval):
                try:
                    value = parse(value)
                    break
                except (ValueError, SyntaxError):
                    continue
        items = value if isinstance(value, list) else [value]
        found += [(key, item, not isinstance(value, list)) for item in items if isinstance(item, Mapping)]
    return found


def _given(value: Any) -> bool:
    return value not in (None, "", [])


def team_fields(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(our fields the record gives, field -> where it came from: `id` or `metadata.id`)."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    objects = metadata_objects(record)
    for name in OURS:
        if _given(record.get(name)):
            values[name], origins[name] = our_field(name, record[name]), name
            continue
        for key, item, own in objects:
            if (own or name == "answerable") and _given(item.get(name)):
                values[name], origins[name] = our_field(name, item[name]), f"{key}.{name}"
                break
    return values, origins


def _from(origin: str) -> str:
    return f"from {origin}" if "." in origin else f"from field {origin}"


def origin_summary(counts: Mapping[tuple[str, str], int]) -> list[str]:
    """`id: 12 from metadata.id, 2 generated ...` for each reported field, from (field, origin) counts."""
    words = {"generated": "generated from the file name and question", "default": "left to the loader's default"}
    parts = []
    for name in REPORTED:
        found = sorted(((origin, n) for (field, origin), n in counts.items() if field == name), key=lambda x: (-x[1], x[0]))
        if found:
            parts.append(f"{name}: " + ", ".join(f"{n} {words.get(origin, _from(origin))}" for origin, n in found))
    return parts
