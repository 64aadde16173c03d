"""One-component experiments: a baseline and a candidate config on the same frozen golden revision
and the same source documents, decided by the gate, appended to the experiment log.

Both configs run against one experiment store: parsed documents are reused, a change of chunker
re-chunks but embeds only chunk texts the cache has not seen, and gold is tied to documents and
spans, so every chunking is scored on the same footing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rag_pipeline.config import PipelineConfig, settings_diff
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.evaluate import run_golden_evaluation
from rag_pipeline.core.evaluation.gating.gates import GateResult, compare
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.significance import paired_significance
from rag_pipeline.core.evaluation.scoring.results import EvalResult
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.render import table
from rag_pipeline.core.storage import Store

# Each component is the set of config fields an experiment may change together.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "chunking": ("chunking",),
    "embedding model": ("embedding.model", "embedding.kind", "embedding.normalize", "embedding.max_seq_length",
                        "embedding.dimension"),
    "retrieval mode": ("retrieval.mode",),
    "k": ("retrieval.k", "retrieval.candidates"),
    "fusion weights": ("retrieval.rrf_k", "retrieval.dense_weight", "retrieval.bm25_weight"),
    "bm25 parameters": ("retrieval.bm25_k1", "retrieval.bm25_b"),
    "no-result threshold": ("retrieval.no_result_threshold",),
    "generator": ("answers",),
}


class BundleRefused(InputError):
    """The candidate changes more than one component and bundles were not allowed."""


def _relevant(config: PipelineConfig) -> dict[str, object]:
    """The settings an experiment compares: the recorded ones (`retrieval_settings`) but a source's
    own chunking, which no component covers."""
    return {key: value for key, value in config.retrieval_settings().items() if not key.startswith("sources.")}


def config_diff(baseline: PipelineConfig, candidate: PipelineConfig) -> dict[str, list]:
    """Setting path -> [baseline value, candidate value] for every retrieval-relevant difference."""
    return settings_diff(_relevant(baseline), _relevant(candidate))


def components_changed(diff: dict[str, list]) -> list[str]:
    touched = []
    for name, prefixes in COMPONENTS.items():
        if any(key == p or key.startswith(p + ".") for key in diff for p in prefixes):
            touched.append(name)
    return touched


def build_index(config: PipelineConfig, store: Store, embedder: Embedder, run_id: str) -> None:
    """Bring the experiment store to this config: same documents, this chunker and model."""
    for source in config.sources:
        ingest_source(source, store, embedder, source.effective_chunking(config.chunking), config.lifecycle, run_id)


def run_experiment(
    baseline: PipelineConfig,
    candidate: PipelineConfig,
    store: Store,
    golden_path: Path,
    policy: GatePolicy,
    hypothesis: str,
    embedder_for: Callable[[PipelineConfig], Embedder],
    allow_bundle: bool = False,
) -> tuple[dict, GateResult, EvalResult, EvalResult]:
    """Evaluate both configs on the same golden revision and documents, gate, and log the row."""
    diff = config_diff(baseline, candidate)
    touched = components_changed(diff)
    if not touched:
        raise InputError("the candidate config is identical to the baseline in every retrieval-relevant setting")
    if len(touched) > 1 and not allow_bundle:
        raise BundleRefused(
            f"the candidate changes {len(touched)} components ({', '.join(touched)}): change one at a time, "
            "or pass --allow-bundle to log it as a bundle"
        )
    created = datetime.now(UTC).replace(tzinfo=None)
    experiment_id = "exp-" + hashlib.sha256(f"{created.isoformat()}{diff}".encode()).hexdigest()[:10]
    evaluations = []
    for label, config in (("baseline", baseline), ("candidate", candidate)):
        embedder = embedder_for(config)
        build_index(config, store, embedder, f"{experiment_id}-{label}")
        _, result = run_golden_evaluation(
            golden_path, store, embedder, config.retrieval, config.retrieval_fingerprint(), config.source_ids,
            answers=config.answers, settings=config.retrieval_settings(),
        )
        evaluations.append(result)
    base_eval, cand_eval = evaluations
    gate = compare(store.records.evaluation_record(base_eval.eval_id), store.records.evaluation_record(cand_eval.eval_id), policy)
    worst = gate.worst_slice()
    deltas = {d.metric: {"baseline": d.baseline, "candidate": d.candidate, "delta": d.delta,
                         "ci": [d.ci_low, d.ci_high], "p": d.p_value} for d in gate.deltas}
    deltas |= _answer_deltas(store.records.evaluation_record(base_eval.eval_id), store.records.evaluation_record(cand_eval.eval_id), policy)
    row = {
        "experiment_id": experiment_id,
        "created_at": created,
        "component": (" + ".join(touched)) if len(touched) > 1 else touched[0],
        "hypothesis": hypothesis,
        "config_diff": diff,
        "baseline_eval": base_eval.eval_id,
        "candidate_eval": cand_eval.eval_id,
        "deltas": deltas,
        "worst_slice": worst[0] if worst else None,
        "worst_slice_delta": worst[1] if worst else None,
        "decision": gate.decision,
        "bundle": len(touched) > 1,
    }
    store.records.log_experiment(row)
    return row, gate, base_eval, cand_eval


def _answer_deltas(baseline: dict, candidate: dict, policy: GatePolicy) -> dict:
    """Answer metrics of both runs, logged beside the retrieval deltas (gated only when headline)."""
    keys = {k for case in baseline["cases"].values() for k in case if k.startswith("answer_")}
    out = {}
    for key in sorted(keys - set(policy.headline_metrics)):
        ids = [c for c in baseline["cases"] if key in baseline["cases"][c] and key in candidate["cases"].get(c, {})]
        b = [baseline["cases"][c][key] for c in ids]
        c = [candidate["cases"][i][key] for i in ids]
        if ids:
            low, high, p = paired_significance(b, c, policy.significance)
            out[key] = {"baseline": sum(b) / len(b), "candidate": sum(c) / len(c),
                        "delta": (sum(c) - sum(b)) / len(b), "ci": [low, high], "p": p}
    return out


def render_log(rows: list[dict], metrics: tuple[str, ...] = ("recall_at_5", "mrr_at_10", "ndcg_at_10")) -> str:
    """The experiment log as a markdown table: deltas with p-values, worst slice, decision."""
    header = ["id", "date", "component", "hypothesis", "change", *(f"Δ {m}" for m in metrics), "worst slice", "decision"]
    cells = []
    for row in rows:
        change = ", ".join(f"{k}: {v[0]} → {v[1]}" for k, v in row["config_diff"].items())
        line = [row["experiment_id"], f"{row['created_at']:%Y-%m-%d}", row["component"] + (" (bundle)" if row["bundle"] else ""),
                row["hypothesis"], change]
        for metric in metrics:
            d = row["deltas"].get(metric)
            line.append("–" if d is None else f"{d['baseline']:.3f} → {d['candidate']:.3f} ({d['delta']:+.3f}, p={d['p']:.3f})")
        worst = "–" if row["worst_slice"] is None else f"{row['worst_slice']} {row['worst_slice_delta']:+.3f}"
        cells.append([*line, worst, row["decision"]])
    return table(cells, header, limit=None, max_cell_chars=None, empty="_no experiments yet_")
