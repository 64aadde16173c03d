"""The gate policy file (data/gate_policy.yaml): headline metrics, tolerances, protected slices,
budgets, significance settings and the grader calibration the gate needs."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag_pipeline.config import ConfigError
from rag_pipeline.core.evaluation.gating.significance import SignificanceConfig


class GatePolicy(BaseModel):
    """The thresholds policy file (data/gate_policy.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    headline_metrics: tuple[str, ...] = ("recall_at_5", "mrr_at_10", "ndcg_at_10")
    min_gain: float = Field(default=0.01, ge=0)
    tolerance: dict[str, float] = Field(default_factory=dict)
    protected_slices: tuple[str, ...] = ()
    slice_metric: str = "recall_at_5"
    latency_budget_p95_ms: float | None = None
    context_tokens_budget: float | None = None
    significance: SignificanceConfig = SignificanceConfig()
    # Answer metrics may gate only through a grader calibrated against people: human verdicts
    # file (relative to the policy file) and the largest false-pass rate allowed per critical rubric.
    grader_verdicts: Path | None = None
    grader_false_pass_budgets: dict[str, float] = Field(default_factory=dict)


def load_policy(path: Path | str) -> GatePolicy:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if raw.get("grader_verdicts"):
            raw["grader_verdicts"] = str((path.parent / raw["grader_verdicts"]).resolve())
        return GatePolicy.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"gate policy {path}: {exc}") from exc
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"gate policy {path} is invalid: {fields}") from exc


def policy_or_default(path: Path | str | None) -> GatePolicy:
    """The policy file's policy, or the defaults when no file is configured."""
    return load_policy(path) if path else GatePolicy()
