"""The regression gate: the classic trap, a true improvement, significance, budgets, comparability."""

import math
import random
import re
import statistics

import pytest

from rag_pipeline.config import load_config
from rag_pipeline.core.evaluation.experiments import (
    BundleRefused,
    components_changed,
    config_diff,
    run_experiment,
)
from rag_pipeline.core.evaluation.gating.gates import compare, gate_reasons, render_gate
from rag_pipeline.core.evaluation.gating.policy import GatePolicy, load_policy
from rag_pipeline.core.evaluation.gating.significance import SignificanceConfig, minimum_detectable_effect, paired_significance
from rag_pipeline_tests.conftest import SAMPLE_CONFIG

POLICY = GatePolicy(
    headline_metrics=("recall_at_5", "mrr_at_10"),
    min_gain=0.01,
    tolerance={"recall_at_5": 0.01, "mrr_at_10": 0.01},
    protected_slices=("permissioned",),
    latency_budget_p95_ms=500,
    context_tokens_budget=1000,
    significance=SignificanceConfig(samples=2000, seed=1),
)


def _record(per_case: dict[str, tuple[str, float]], revision: str = "rev1", p95: float = 100.0) -> dict:
    """An evaluation record from case id -> (slice, recall@5); MRR follows recall for simplicity."""
    cases = {cid: {"recall_at_5": v, "mrr_at_10": v} for cid, (_, v) in per_case.items()}
    by_slice: dict[str, dict] = {}
    for cid, (slice_name, v) in per_case.items():
        by_slice.setdefault(slice_name, {"values": []})["values"].append(v)
    by_slice = {s: {"recall_at_5": sum(d["values"]) / len(d["values"])} for s, d in by_slice.items()}
    return {"revision": revision, "cases": cases, "by_slice": by_slice, "case_slices": {c: s for c, (s, _) in per_case.items()},
            "latency": {"p95_latency_ms": p95, "mean_context_tokens": 400.0}, "unanswerable": {}}


def _baseline():
    cases = {f"b{i}": ("billing", 0.0 if i % 2 else 1.0) for i in range(60)}
    cases |= {f"p{i}": ("permissioned", 1.0) for i in range(10)}
    return cases


def test_classic_trap_aggregate_up_protected_slice_down():
    base = _baseline()
    cand = {cid: ("billing", 1.0) if s == "billing" else (s, v) for cid, (s, v) in base.items()}
    for i in range(8):  # 8 of the 10 permissioned cases lose their gold document: no noise can do that
        cand[f"p{i}"] = ("permissioned", 0.0)
    result = compare(_record(base), _record(cand), POLICY)
    assert result.deltas[0].delta > 0.2  # the aggregate rose a lot...
    assert not result.passed and not result.promote and result.verdict == "regression"
    assert result.decision == ("keep baseline — protected slice permissioned: recall_at_5 1.0000 -> 0.2000 over 10 cases: "
                               "fell by 0.800 (95% CI -1.000 to -0.500); significant at p < 0.001; tolerance 0.01: "
                               "REGRESSION (the whole interval lies beyond the tolerance)")


def test_a_small_protected_slice_drop_is_inconclusive_not_a_regression():
    """Two of ten cases: the interval of the paired difference reaches back to 0. Not a regression
    (the gate passes), but no promotion either, and the smallest detectable drop is stated."""
    base = _baseline()
    cand = {cid: ("billing", 1.0) if s == "billing" else (s, v) for cid, (s, v) in base.items()}
    cand["p0"] = ("permissioned", 0.0)
    cand["p1"] = ("permissioned", 0.0)
    result = compare(_record(base), _record(cand), POLICY)
    assert result.passed and not result.promote and result.verdict == "inconclusive"
    rule = next(r for r in result.rules if r.rule == "protected slice permissioned recall_at_5")
    assert rule.outcome == "inconclusive"
    assert rule.message == ("protected slice permissioned: recall_at_5 1.0000 -> 0.8000 over 10 cases: fell by 0.200 "
                            "(95% CI -0.500 to +0.000); not significant at p = " + rule.message.split("p = ")[1][:5]
                            + "; tolerance 0.01: INCONCLUSIVE (10 cases cannot tell this drop from noise; the smallest "
                            "drop they detect is about 0.374)")
    assert "a drop the cases cannot decide" in result.decision


def test_the_noise_of_a_small_set_is_inconclusive():
    """The case of the report: MRR -0.025 with p = 0.6 on 23 cases blocked as a regression."""
    rng = random.Random(7)
    base = {f"c{i}": ("s", rng.choice([0.0, 0.25, 0.5, 1.0])) for i in range(23)}
    moves = [-0.5, 0.5, -0.25, 0.25, -0.5, -0.25, 0.5, -0.5]
    cand = dict(base)
    for i, move in enumerate(moves):
        cid = f"c{i * 2}"
        cand[cid] = ("s", min(1.0, max(0.0, base[cid][1] + move)))
    result = compare(_record(base), _record(cand), POLICY.model_copy(update={"protected_slices": ()}))
    d = result.deltas[1]
    assert d.delta < -0.01 and d.p_value > 0.05 and d.ci_low < 0 < d.ci_high
    assert result.passed and result.verdict == "inconclusive" and not result.promote


def test_a_drop_within_its_tolerance_passes():
    base = {f"c{i}": ("s", 1.0) for i in range(200)}
    cand = {**base, "c0": ("s", 0.0)}  # -0.005: within the tolerance 0.01
    result = compare(_record(base), _record(cand), POLICY.model_copy(update={"protected_slices": ()}))
    assert result.passed and result.verdict == "pass" and not result.errors
    message = next(r.message for r in result.rules if r.rule == "recall_at_5")
    said = re.fullmatch(r"recall_at_5 1\.0000 -> 0\.9950 over 200 cases: fell by 0\.005 \(95% CI -0\.015 to \+0\.000\); "
                        r"not significant at p = (0\.\d{3}); tolerance 0\.01: PASS \(within the tolerance\)", message)
    assert said, message
    # A resample has a mean above 0 only if it misses the one case that fell: p = 2 (1 - 1/200)^200,
    # estimated from 5,000 resamples (standard error 0.014).
    assert float(said.group(1)) == pytest.approx(2 * (1 - 1 / 200) ** 200, abs=0.04)


def test_a_drop_no_case_can_tell_from_noise_reads_as_one_statement():
    """One case of 30 loses its gold document: the bootstrap interval reaches 0 exactly (most
    resamples leave the case out) and p is large. Said as one thing: not significant, and why."""
    base = {f"c{i}": ("s", 1.0) for i in range(30)}
    cand = {**base, "c0": ("s", 0.0)}
    policy = POLICY.model_copy(update={"protected_slices": (), "tolerance": {"recall_at_5": 0.0}})
    rule = next(r for r in compare(_record(base), _record(cand), policy).rules if r.rule == "recall_at_5")
    assert rule.outcome == "inconclusive"
    p = rule.message.split("at p = ")[1].split(";")[0]
    assert float(p) > 0.5
    assert rule.message.startswith(f"recall_at_5 1.0000 -> 0.9667 over 30 cases: fell by 0.033 (95% CI -0.100 to +0.000); "
                                   f"not significant at p = {p}; tolerance 0.00: INCONCLUSIVE (")
    assert "[" not in rule.message and "p=" not in rule.message


def test_the_default_tolerance_lets_noise_pass_and_never_loosens_protected_slices():
    """A policy that names no tolerance: headline metrics take 0.02, protected slices keep 0 (as
    before); the bundled policy states both (0.02, and 0.01 for protected slices)."""
    default = GatePolicy(protected_slices=("permissioned",))
    assert default.headline_tolerance("recall_at_5") == 0.02 and default.slice_tolerance() == 0.0
    base = {f"c{i}": ("s", 1.0) for i in range(60)} | {f"p{i}": ("permissioned", 1.0) for i in range(10)}
    cand = {**base, "c0": ("s", 0.0)}  # -0.014 on recall_at_5: within 0.02
    result = compare(_record(base), _record(cand), default)
    assert next(r for r in result.rules if r.rule == "recall_at_5").outcome == "pass"
    cand = {**base, "p0": ("permissioned", 0.0)}  # the same drop of one case, on a protected slice: looked at
    rule = next(r for r in compare(_record(base), _record(cand), default).rules if r.rule.startswith("protected"))
    assert rule.outcome == "inconclusive" and "tolerance 0.00: INCONCLUSIVE" in rule.message
    bundled = load_policy(load_config(SAMPLE_CONFIG).gate_policy)
    assert bundled.headline_tolerance("ndcg_at_10") == 0.02 and bundled.slice_tolerance() == 0.01


def test_minimum_detectable_effect_is_the_textbook_formula():
    base, cand = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    diffs = [c - b for b, c in zip(base, cand)]
    sd = statistics.stdev(diffs)
    z = statistics.NormalDist()
    expected = (z.inv_cdf(0.975) + z.inv_cdf(0.8)) * sd / math.sqrt(len(diffs))
    assert minimum_detectable_effect(base, cand, 0.05) == pytest.approx(expected)
    assert math.isnan(minimum_detectable_effect([1.0], [0.0], 0.05))


def test_true_improvement_is_promoted():
    base = _baseline()
    cand = {cid: ("billing", 1.0) if s == "billing" else (s, v) for cid, (s, v) in base.items()}
    result = compare(_record(base), _record(cand), POLICY)
    assert result.passed and result.promote and result.decision == "PROMOTE"
    assert result.deltas[0].p_value < 0.05 and result.deltas[0].ci_low > 0


def test_a_tiny_gain_on_few_cases_is_not_called_a_win():
    rng = random.Random(3)
    base = {f"c{i}": ("s", rng.random()) for i in range(60)}
    cand = {cid: (s, min(1.0, max(0.0, v + rng.gauss(0.01, 0.2)))) for cid, (s, v) in base.items()}
    result = compare(_record(base), _record(cand), POLICY.model_copy(update={"protected_slices": ()}))
    d = result.deltas[0]
    assert d.p_value > 0.05 and d.ci_low < 0 < d.ci_high
    assert not result.promote and "no significant gain" in result.decision


def test_a_significant_headline_drop_fails_and_says_why():
    base = _baseline()
    cand = {cid: (s, 0.0) if cid.startswith("b") and int(cid[1:]) % 2 == 0 and int(cid[1:]) < 30 else (s, v)
            for cid, (s, v) in base.items()}
    result = compare(_record(base), _record(cand), POLICY)
    assert not result.passed and result.verdict == "regression"
    regression = next(r for r in result.rules if r.rule == "recall_at_5")
    assert regression.outcome == "regression"
    assert regression.message == ("recall_at_5 0.5714 -> 0.3571 over 70 cases: fell by 0.214 (95% CI -0.314 to -0.129); "
                                  "significant at p < 0.001; tolerance 0.01: REGRESSION (the whole interval lies beyond "
                                  "the tolerance)")
    reasons = gate_reasons(result, "rev1-hybrid-abc")
    # The outcome said once, at the end of the rule.
    assert reasons[0] == regression.message + " [baseline rev1-hybrid-abc]"
    # Markdown for Dagster (entities, escapes), plain text for a terminal.
    assert "-&gt;" in render_gate(result) and "-&gt;" not in render_gate(result, terminal=True)
    assert "\\" not in render_gate(result, terminal=True) and "| recall_at_5 |" not in render_gate(result, terminal=True)
    assert "ERROR (regression): recall_at_5 0.5714 -> 0.3571" in render_gate(result, terminal=True)
    table = render_gate(result, terminal=True).splitlines()
    assert table[0].split() == ["metric", "baseline", "candidate", "delta", "95%", "CI", "p", "MDE", "cases", "outcome"]
    assert "-0.3143 to -0.1286" in table[2] and table[2].split()[-1] == "REGRESSION"


def test_latency_over_budget_warns_and_context_over_budget_fails():
    base = _baseline()
    slow = compare(_record(base), _record(base, p95=900.0), POLICY)
    assert slow.passed and [f.message for f in slow.warnings] == [
        "p95 latency 900 ms over the budget 500 ms (one timing on a machine that may be busy: it warns, never fails; "
        "measure speed with benchmarks/)"]
    wordy = _record(base)
    wordy["latency"]["mean_context_tokens"] = 1200.0
    result = compare(_record(base), wordy, POLICY)
    assert not result.passed and [f.message for f in result.errors] == ["context 1200 words per query over the budget 1000"]


def test_a_forbidden_document_retrieved_is_always_a_regression():
    base, cand = _record(_baseline()), _record(_baseline())
    base["by_slice"]["permissioned"]["forbidden_leak_cases"] = 0.0
    cand["by_slice"]["permissioned"]["forbidden_leak_cases"] = 1.0
    result = compare(base, cand, POLICY)
    assert not result.passed
    assert [f.message for f in result.errors] == ["slice permissioned: cases that retrieved a forbidden document 0 -> 1"]


def test_unprotected_slice_drop_only_warns():
    base = {**_baseline(), "x1": ("faq", 1.0), "x2": ("faq", 1.0)}
    cand = {**{cid: ("billing", 1.0) if s == "billing" else (s, v) for cid, (s, v) in base.items()}, "x1": ("faq", 0.0)}
    result = compare(_record(base), _record(cand), POLICY)
    assert result.passed and result.promote
    assert [f.message for f in result.warnings] == ["slice faq: recall_at_5 1.000 -> 0.500"]


def test_another_golden_revision_is_not_comparable():
    result = compare(_record(_baseline()), _record(_baseline(), revision="rev2"), POLICY)
    assert not result.comparable and not result.passed
    assert "not comparable" in result.decision


@pytest.mark.parametrize("method", ["paired_bootstrap", "randomization"])
def test_significance_methods_agree_on_clear_cases(method):
    config = SignificanceConfig(method=method, samples=2000, seed=5)
    same = paired_significance([0.5] * 30, [0.5] * 30, config)
    assert same[2] == 1.0
    better = paired_significance([0.0] * 30, [1.0] * 20 + [0.0] * 10, config)
    assert better[2] < 0.01 and better[0] > 0


def test_the_bootstrap_agrees_with_scipy_and_the_sign_flip_p_with_exact_enumeration():
    """The interval and p of `paired_bootstrap` against SciPy's percentile bootstrap of the mean
    difference, and the p of `randomization` against all 2^12 sign patterns of 12 cases: equal
    within what 20,000 resamples can tell apart."""
    import itertools

    import numpy as np
    from scipy.stats import bootstrap

    draw = random.Random(3)
    base = [draw.random() for _ in range(40)]
    cand = [b + draw.gauss(0.05, 0.2) for b in base]
    diffs = np.subtract(cand, base)
    low, high, p = paired_significance(base, cand, SignificanceConfig(samples=20000, seed=7))
    reference = bootstrap((diffs,), np.mean, n_resamples=20000, method="percentile", rng=np.random.default_rng(1))
    assert low == pytest.approx(reference.confidence_interval.low, abs=0.01)
    assert high == pytest.approx(reference.confidence_interval.high, abs=0.01)
    resampled = reference.bootstrap_distribution
    assert p == pytest.approx(2 * min((resampled <= 0).mean(), (resampled >= 0).mean()), abs=0.02)

    small = diffs[:12]
    flipped = np.array([np.mean(small * signs) for signs in itertools.product((1.0, -1.0), repeat=12)])
    exact = float((np.abs(flipped) >= abs(small.mean()) - 1e-12).mean())
    _, _, p_flip = paired_significance(base[:12], cand[:12], SignificanceConfig(method="randomization", samples=20000, seed=7))
    assert 0.02 < exact < 0.98  # a case where the test has something to estimate
    assert p_flip == pytest.approx(exact, abs=0.015)


def test_paired_values_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="3 baseline, 2 candidate"):
        paired_significance([0.1, 0.2, 0.3], [0.1, 0.2], SignificanceConfig())


def test_sample_policy_file_loads():
    policy = load_policy(load_config(SAMPLE_CONFIG).gate_policy)
    assert policy.protected_slices and set(policy.headline_metrics) <= set(policy.tolerance)


def test_one_component_at_a_time():
    base = load_config(SAMPLE_CONFIG)
    chunk = base.model_copy(update={"chunking": base.chunking.model_copy(update={"strategy": "fixed"})})
    assert components_changed(config_diff(base, chunk)) == ["chunking"]
    both = chunk.model_copy(update={"retrieval": base.retrieval.model_copy(update={"mode": "dense"})})
    diff = config_diff(base, both)
    assert diff["retrieval.mode"] == ["hybrid", "dense"]
    assert components_changed(diff) == ["chunking", "retrieval mode"]
    with pytest.raises(BundleRefused, match="2 components"):
        run_experiment(base, both, None, base.golden_set, POLICY, "h", lambda c: None)


def test_the_false_alarm_benchmark_copies_the_policy_with_only_its_budget_changed(tmp_path, monkeypatch):
    # Imported as the script runs: from its own folder (where its performance_page module sits).
    monkeypatch.syspath_prepend(str(SAMPLE_CONFIG.parent.parent / "benchmarks"))
    from gate_false_alarms import with_latency_budget

    policy_path = SAMPLE_CONFIG.parent / "gate_policy.yaml"
    copy = with_latency_budget(policy_path, 105.0, tmp_path / "policy.yaml")
    # The copy lives elsewhere: its grader_verdicts still names the sample's file.
    assert load_policy(copy) == load_policy(policy_path).model_copy(update={"latency_budget_p95_ms": 105.0})
    assert load_policy(copy).grader_verdicts.is_file()


def test_a_waived_regression_warns_with_its_owner_and_is_never_promoted():
    from datetime import date

    from rag_pipeline.core.evaluation.gating.waivers import Waiver, active_waivers

    base = _baseline()
    cand = {cid: ("billing", 1.0) if s == "billing" else (s, v) for cid, (s, v) in base.items()}
    for i in range(8):
        cand[f"p{i}"] = ("permissioned", 0.0)
    rule = "protected slice permissioned recall_at_5"
    waiver = Waiver(rule, "ana", "permissioned pages move on 12-15", date(2026, 12, 31))
    waived = compare(_record(base), _record(cand), POLICY, waivers=active_waivers([waiver], date(2026, 12, 31)))
    assert waived.passed and waived.verdict == "waived" and not waived.errors
    assert not waived.promote and waived.decision == f"keep baseline — a waived regression is not promoted ({rule})"
    [result] = waived.waived
    assert result.rule == rule and result.waiver == waiver
    line = "WAIVED (regression): protected slice permissioned: recall_at_5 1.0000 -> 0.2000"
    assert line in render_gate(waived, terminal=True)
    assert render_gate(waived, terminal=True).count("— waived by ana until 2026-12-31 (UTC): permissioned pages move") == 1
    assert gate_reasons(waived, "b1")[-1].endswith("[baseline b1] — waived by ana until 2026-12-31 (UTC): "
                                                   "permissioned pages move on 12-15")
    # The day after, the waiver is not in force: the rule gates again.
    expired = compare(_record(base), _record(cand), POLICY, waivers=active_waivers([waiver], date(2027, 1, 1)))
    assert expired.verdict == "regression" and [f.rule for f in expired.errors] == [rule]


def test_waivers_name_known_rules_and_a_day_to_come():
    from datetime import date

    from rag_pipeline.core.errors import InputError
    from rag_pipeline.core.evaluation.gating.waivers import Waiver, active_waivers, known_rules, new_waiver

    known = known_rules(POLICY, ["billing"])
    assert known == ["context size budget", "mrr_at_10", "protected slice permissioned abstain_rate",
                     "protected slice permissioned recall_at_5", "recall_at_5", "slice billing forbidden_leak_cases",
                     "slice permissioned forbidden_leak_cases"]
    today = date(2026, 12, 4)
    assert new_waiver(" recall_at_5 ", "ana", "why", today, today, known).rule == "recall_at_5"  # today is allowed
    for rule, by, reason, until, said in [("recall@5", "ana", "why", today, "not a rule this gate knows"),
                                          ("recall_at_5", "ana", "why", date(2026, 12, 3), "is in the past"),
                                          ("recall_at_5", " ", "why", today, "--by is empty"),
                                          ("recall_at_5", "ana", "", today, "--reason is empty")]:
        with pytest.raises(InputError, match=said):
            new_waiver(rule, by, reason, until, today, known)
    short, long = (Waiver("recall_at_5", "ana", "r", date(2026, 12, d)) for d in (10, 20))
    assert active_waivers([long, short], today) == {"recall_at_5": long}
    assert active_waivers([long, short], date(2026, 12, 21)) == {}
