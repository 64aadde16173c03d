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
    # A headline metric's tolerance: its own in `tolerance`, else `default_tolerance`. Why 0.02 by
    # default: with 0, every drop, however small, is "beyond the tolerance" and at best
    # INCONCLUSIVE, so a set of 30 cases holds back every promotion over noise (one case of 30
    # moving from rank 1 to 2 takes 0.017 off MRR@10). 0.02 is the smallest drop of a rate a team
    # acts on; whether a larger drop is real or noise is the interval's to say (regression or
    # inconclusive), not the tolerance's.
    tolerance: dict[str, float] = Field(default_factory=dict)
    default_tolerance: float = Field(default=0.02, ge=0)
    # Protected slices are held to this tolerance: unset, the slice metric's own entry in
    # `tolerance` (never `default_tolerance`), else 0: what protected slices always had.
    protected_slice_tolerance: float | None = Field(default=None, ge=0)
    protected_slices: tuple[str, ...] = ()
    slice_metric: str = "recall_at_5"
    latency_budget_p95_ms: float | None = None
    context_tokens_budget: float | None = None
    significance: SignificanceConfig = SignificanceConfig()
    # Answer metrics may gate only through a grader calibrated against people: human verdicts
    # file (relative to the policy file) and the largest false-pass rate allowed per critical rubric.
    grader_verdicts: Path | None = None
    grader_false_pass_budgets: dict[str, float] = Field(default_factory=dict)

    def headline_tolerance(self, metric: str) -> float:
        """The drop a headline metric may take before its rule looks at it: its own, else the default."""
        return self.tolerance.get(metric, self.default_tolerance)

    def slice_tolerance(self) -> float:
        """The drop a protected slice's metric may take: set apart from the headline default, so that a
        looser default never loosens protected slices."""
        if self.protected_slice_tolerance is not None:
            return self.protected_slice_tolerance
        return self.tolerance.get(self.slice_metric, 0.0)


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
