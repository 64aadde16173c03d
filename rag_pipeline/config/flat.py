"""Settings as flat `section.key` -> value maps, so that two evaluations' or experiments' settings can
be compared key by key (what an evaluation records, what attribution and experiments diff)."""

from __future__ import annotations

from collections.abc import Mapping


def flat_settings(payload: Mapping, prefix: str = "") -> dict[str, object]:
    """Nested settings as `section.key` -> value."""
    flat: dict[str, object] = {}
    for key, value in payload.items():
        if isinstance(value, Mapping):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def settings_diff(baseline: Mapping[str, object], candidate: Mapping[str, object]) -> dict[str, list]:
    """Setting key -> [baseline value, candidate value] for every key whose value differs."""
    return {key: [baseline.get(key), candidate.get(key)] for key in sorted(set(baseline) | set(candidate))
            if baseline.get(key) != candidate.get(key)}
