"""Triage: confirmed production failures become reviewed golden cases, in a new revision.

    queue    `build_queue` gathers items to review from five places: the latest drift report's
             candidates (queries least like the golden set), the questions of the coverage gaps
             still open (questions the corpus may not answer: an unanswerable case, or a page to
             write), the latest evaluation's failed cases
             (holdout never: its text is withheld), disagreements between graders (the lexical
             proxy against the LLM judge on a case's claims; the deterministic grader against
             people's verdicts in a verdicts file), and a file of user-reported
             failures (JSONL: `question`, optional `tenant`, `roles`, `note`, `reported_by`).
             Each item comes with its nearest golden cases (cosine of question embeddings;
             holdout cases never, not even their ids) and
             what retrieval returns for it now (documents and their content hashes), and the
             fields a reviewer fills: reference, gold_docs, gold_spans, slice, split, answerable,
             prohibited_claims, reviewer, and decision (accept | reject).
    accept   `accept_reviewed` reads one or more reviewed queue files (two reviewers may each fill a
             copy), reports their agreement by slice and lists disagreements (answerable, gold
             documents or spans, slice, split, reference, prohibited claims or decision differ:
             not accepted until reconciled),
             records every reviewer of an accepted item, defaults what the golden-file loader
             defaults (a slice left empty is `general`, a split left empty is the one the id's
             hash gives: never holdout), lists the items nobody decided yet (left in the queue),
             flags near duplicates of golden cases
             (cosine >= `duplicate_threshold`; accepted only with `duplicate_ok: true`; a near
             duplicate of a holdout case is held back always and named only as "a holdout
             case"), validates the new cases like any golden
             case, and appends them to the golden file: a new revision. An accepted failed case
             is relabelled in place (the review found its labels wrong: same id and question, the
             reviewed reference, gold documents, slice and split). The old revision stays
             evaluable from its snapshot; the change is recorded (who, when, which cases, the
             source versions) and marked in the experiment log.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.evaluation.golden.cases import (
    BOOLEAN_VALUES,
    DEFAULT_SLICE,
    GoldenSet,
    GoldenSetError,
    default_split,
    file_revision,
    parse_boolean,
)
from rag_pipeline.core.evaluation.golden.holdout import HOLDOUT, withheld
from rag_pipeline.core.evaluation.golden.lines import golden_records, read_golden_lines
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.faults import kill_point
from rag_pipeline.core.files import write_text_atomically
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.fusion import rollup_documents
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store
from rag_pipeline.core.vectors import normalise_rows

REVIEW_FIELDS = {"reference": "", "gold_docs": [], "gold_spans": [], "slice": "", "split": "", "answerable": None,
                 "prohibited_claims": [], "reviewer": "", "decision": ""}
# Agreement is judged on what changes a metric: whether the corpus answers, where (documents and
# spans), the slice and split, the reference answers are graded against, the claims they must not make.
AGREEMENT_FIELDS = ("answerable", "gold_docs", "slice", "reference", "split", "gold_spans", "prohibited_claims")
DECISIONS = ("accept", "reject")
DUPLICATE_THRESHOLD = 0.9


def _item_id(origin: str, question: str) -> str:
    return hashlib.sha256(f"{origin}\n{question}".encode()).hexdigest()[:12]


def _unit_vectors(texts: Sequence[str], embedder: Embedder) -> np.ndarray:
    """The texts' embeddings scaled to unit length (rows), so that dot products are cosines."""
    return normalise_rows(embedder.encode(list(texts))) if texts else np.zeros((0, 0), dtype=np.float32)


def _cosines(queries: Sequence[str], others: Sequence[str], embedder: Embedder) -> np.ndarray:
    if not queries or not others:
        return np.zeros((len(queries), len(others)))
    return _unit_vectors(queries, embedder) @ _unit_vectors(others, embedder).T


def _human_disagreements(verdicts: Path) -> list[dict]:
    """Items where the deterministic grader and a person's verdict differ on some rubric (a
    verdicts file as in calibration.py; the question from its `question` field or the golden case)."""
    from rag_pipeline.core.evaluation.answers.calibration import deterministic_grader, load_verdicts

    items = []
    for row in load_verdicts(verdicts):
        grades = deterministic_grader(row)
        differ = sorted(r for r, v in row["verdicts"].items() if r in grades and grades[r] != (v == "pass"))
        if differ:
            items.append({"origin": "grader_vs_human", "case_id": row["case_id"], "question": row.get("question"),
                          "evidence": {"reviewer": row["reviewer"], "rubrics": differ, "answer": row["answer"]}})
    return items


def _raw_items(store: Store, reports: Path | None, grader_gap: float, verdicts: Path | None = None) -> list[dict]:
    items: list[dict] = _human_disagreements(verdicts) if verdicts is not None else []
    drift = store.records.monitoring_history("drift", datetime.now(UTC).date())
    if drift:
        latest = drift[-1]
        for candidate in latest.get("candidates", []):
            items.append({"origin": "drift", "question": candidate["query"],
                          "evidence": {"day": str(latest["day"]), "excess_density": candidate["excess_density"]}})
    for gap in store.gaps.still_open():
        for member in json.loads(gap["members"]):
            items.append({"origin": "coverage_gap", "question": member["query"],
                          "evidence": {"day": str(gap["day"]), "gap_id": gap["gap_id"], "label": gap["label"],
                                       "best_score": member["best_score"], "threshold": gap["threshold"]},
                          "filters": {"tenant": member["tenant"], "roles": list(member["roles"] or [])}})
    eval_id = store.records.latest_evaluation()
    if eval_id is not None:
        record = store.records.evaluation_record(eval_id)
        for case in store.records.failed_cases(eval_id):
            if case["split"] == "holdout" or "query" not in case["trace"]:
                continue
            items.append({"origin": "failed_case", "question": case["trace"]["query"], "case_id": case["case_id"],
                          "evidence": {"eval_id": eval_id, "first_gold_rank": case["first_gold_rank"],
                                       "forbidden_retrieved": list(case["forbidden_retrieved"] or [])},
                          "filters": case["trace"].get("filters")})
        for case_id, values in record["cases"].items():
            proxy, judge = values.get("answer_claim_support_proxy"), values.get("answer_claim_support_llm")
            if proxy is not None and judge is not None and abs(proxy - judge) >= grader_gap:
                items.append({"origin": "grader_disagreement", "case_id": case_id, "question": None,
                              "evidence": {"eval_id": eval_id, "proxy": proxy, "llm_judge": judge}})
    if reports is not None:
        for number, raw in golden_records(reports):
            if not str(raw.get("question") or "").strip():
                raise GoldenSetError(f"{reports} line {number}: a report needs a non-empty 'question'")
            items.append({"origin": "user_report", "question": raw["question"].strip(),
                          "evidence": {k: raw[k] for k in ("note", "reported_by", "reported_at") if k in raw},
                          "filters": {"tenant": raw.get("tenant"), "roles": list(raw.get("roles") or [])}})
    return items


def build_queue(store: Store, golden: GoldenSet, retriever: Retriever, embedder: Embedder,
                reports: Path | None = None, nearest: int = 3, grader_gap: float = 0.5,
                verdicts: Path | None = None) -> list[dict]:
    """Items to review, each with its nearest golden cases, what retrieval returns, and blank review fields."""
    by_id = {c.id: c for c in golden.cases}
    raw = _raw_items(store, reports, grader_gap, verdicts)
    for item in raw:
        if item["question"] is None and item.get("case_id") in by_id and not withheld(by_id[item["case_id"]]):
            item["question"] = by_id[item["case_id"]].question
    items, seen = [], set()
    for item in raw:
        if not item["question"] or (item["origin"], item["question"]) in seen:
            continue
        seen.add((item["origin"], item["question"]))
        items.append(item)
    # Holdout cases are no neighbours: even an id with a similarity would tell a reviewer that a
    # held-out question is (nearly) this one.
    shown = [c for c in golden.cases if not withheld(c)]
    similarity = _cosines([i["question"] for i in items], [c.question for c in shown], embedder)
    hashes = store.served.document_hashes()
    for row, item in zip(similarity, items):
        item["item_id"] = _item_id(item["origin"], item["question"])
        order = np.argsort(-row, kind="stable")[:nearest] if len(row) else []
        item["nearest_golden"] = [{"case_id": shown[j].id, "similarity": round(float(row[j]), 4),
                                   "question": shown[j].question} for j in order]
        filters = item.get("filters") or {}
        result = retriever.search(item["question"], SearchFilters(tenant=filters.get("tenant"),
                                                                  roles=tuple(filters.get("roles") or ())))
        item["retrieved"] = [{"doc_id": d, "score": round(s, 4), "content_hash": hashes.get(d)}
                             for d, s in rollup_documents(result.hits)[:5]]
        item.update({k: (list(v) if isinstance(v, list) else v) for k, v in REVIEW_FIELDS.items()})
    return items


def write_queue(items: Sequence[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(i, ensure_ascii=False, default=str) + "\n" for i in items), encoding="utf-8")
    return path


@dataclass
class AcceptResult:
    old_revision: str
    new_revision: str
    accepted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)
    disagreements: list[dict] = field(default_factory=list)
    incomplete: list[dict] = field(default_factory=list)
    # Items no reviewer decided (no `decision`): nothing happened to them; they wait in the queue.
    undecided: list[str] = field(default_factory=list)
    # slice -> (items labelled by two or more reviewers, of which they agreed on)
    agreement_by_slice: dict[str, tuple[int, int]] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"accepted {len(self.accepted)} case(s): golden revision {self.old_revision} -> {self.new_revision}"
                 if self.accepted else f"nothing accepted; golden revision stays {self.old_revision}"]
        if self.agreement_by_slice:
            lines.append("reviewer agreement by slice: " + ", ".join(
                f"{s} {agreed}/{n}" for s, (n, agreed) in sorted(self.agreement_by_slice.items())))
        for d in self.disagreements:
            lines.append(f"to reconcile: item {d['item_id']} ({', '.join(d['fields'])} differ between {', '.join(d['reviewers'])})")
        for d in self.duplicates:
            if d["of"] is None:
                lines.append(f"near duplicate of a holdout case: item {d['item_id']} is held back (a holdout "
                             "question must not enter another split; duplicate_ok does not apply)")
                continue
            lines.append(f"near duplicate: item {d['item_id']} ~ {d['of']} (cosine {d['similarity']:.3f}); "
                         "set duplicate_ok: true to accept it anyway")
        for d in self.incomplete:
            lines.append(f"incomplete: item {d['item_id']}: {d['reason']}")
        if self.undecided:
            shown = ", ".join(self.undecided[:10]) + (f" and {len(self.undecided) - 10} more" if len(self.undecided) > 10 else "")
            lines.append(f"undecided: {len(self.undecided)} item(s) without a decision (accept | reject), left in the "
                         f"queue: {shown}")
        return "\n".join(lines)


def _load_reviews(paths: Sequence[Path]) -> tuple[dict[str, list[dict]], list[str]]:
    """(item id -> its decided copies, with `answerable`, `duplicate_ok` and `decision` parsed
    strictly; the ids of items no copy decides)."""
    reviews: dict[str, list[dict]] = defaultdict(list)
    seen: dict[str, None] = {}
    for path in paths:
        for number, item in golden_records(path):
            if not item.get("item_id"):
                raise GoldenSetError(f"{path} line {number}: no item_id; review items written by `golden triage`")
            seen.setdefault(str(item["item_id"]))
            if not item.get("decision"):
                continue
            where = f"{path} line {number} (item {item['item_id']})"
            decision = str(item["decision"]).strip().lower()
            if decision not in DECISIONS:
                raise GoldenSetError(f"{where}: field 'decision': {json.dumps(item['decision'])} is not one of "
                                     f"{', '.join(DECISIONS)}; fix it and run accept again")
            item["decision"] = decision
            # bool("false") is True: a reviewer's "false" must not turn into an answerable case.
            for name, unset in (("answerable", None), ("duplicate_ok", False)):
                value = item.get(name)
                if value is None or value == "":
                    item[name] = unset
                    continue
                item[name] = parse_boolean(value)
                if item[name] is None:
                    raise GoldenSetError(f"{where}: field {name!r}: {json.dumps(value)} is not a boolean; write "
                                         f"{BOOLEAN_VALUES}, then run accept again")
            reviews[item["item_id"]].append(item)
    return reviews, [item_id for item_id in seen if item_id not in reviews]


def _agreement_values(item: dict) -> dict[str, str]:
    """What reviewers must agree on, each as comparable text (a reference up to its white space)."""
    values = {"answerable": item.get("answerable"), "gold_docs": sorted(item.get("gold_docs") or []),
              "slice": item.get("slice"), "reference": " ".join(str(item.get("reference") or "").split()),
              # Which aggregate the case joins (holdout or not), what span metrics and answer checks grade.
              "split": item.get("split") or "", "gold_spans": item.get("gold_spans") or [],
              "prohibited_claims": sorted(" ".join(str(c).split()) for c in item.get("prohibited_claims") or []),
              "decision": item["decision"]}
    return {name: json.dumps(value, sort_keys=True) for name, value in values.items()}


def _case_from(item: dict, source_versions: dict[str, str], today: str) -> dict:
    reviewers = item.get("reviewed_by") or [item["reviewer"]]
    case_id = item.get("id") or f"tri-{item['item_id']}"
    case = {
        "id": case_id, "question": item["question"], "reference": item.get("reference") or "",
        "gold_docs": list(item.get("gold_docs") or []), "slice": item.get("slice") or DEFAULT_SLICE,
        "split": item.get("split") or default_split(case_id), "answerable": item["answerable"],
        "tenant": (item.get("filters") or {}).get("tenant"), "roles": list((item.get("filters") or {}).get("roles") or []),
        "provenance": f"triage {item['origin']} ({json.dumps(item.get('evidence', {}), default=str)}); reviewed by "
                      f"{', '.join(reviewers)} on {today}",
        "reviewed": {"reviewed_by": reviewers, "date": today, "origin": item["origin"], "source_versions": source_versions},
    }
    if item.get("gold_spans"):
        case["gold_spans"] = item["gold_spans"]
    if item.get("prohibited_claims"):
        case["prohibited_claims"] = item["prohibited_claims"]
    return case


def _relabel(path: Path, relabelled: dict[str, dict], versions: dict[str, str], today: str) -> str:
    """The golden file's text with the reviewed labels of these case ids; every other line as it was
    (read as the loader reads it: comments kept, a byte-order mark dropped)."""
    out = []
    for golden_line in read_golden_lines(path):
        raw, line = golden_line.record, golden_line.text
        if raw is not None and raw.get("id") in relabelled:
            reviewed = _case_from(relabelled[raw["id"]], versions, today)
            raw.update({k: reviewed[k] for k in ("reference", "gold_docs", "slice", "split", "answerable", "reviewed")})
            # Spans of documents no longer gold cannot stay; the reviewer's own spans replace them.
            spans = reviewed.get("gold_spans") or [sp for sp in raw.get("gold_spans", []) if sp.get("doc_id") in reviewed["gold_docs"]]
            raw.pop("gold_spans", None)
            if spans:
                raw["gold_spans"] = spans
            if reviewed.get("prohibited_claims"):
                raw["prohibited_claims"] = reviewed["prohibited_claims"]
            raw["provenance"] = f"{raw.get('provenance', '')}; relabelled after a failed evaluation ({reviewed['provenance']})"
            line = json.dumps(raw, ensure_ascii=False) + ("\n" if line.endswith("\n") else "")
        out.append(line)
    return "".join(out)


def accept_reviewed(review_files: Sequence[Path], golden_path: Path, store: Store, embedder: Embedder,
                    source_ids: Sequence[str], duplicate_threshold: float = DUPLICATE_THRESHOLD) -> AcceptResult:
    """Append the accepted, agreed, non-duplicate reviewed items to the golden file (a new revision)."""
    golden = load_golden_set(golden_path)
    result = AcceptResult(golden.revision, golden.revision)
    reviews, result.undecided = _load_reviews(review_files)
    ready: list[dict] = []
    for item_id, copies in sorted(reviews.items()):
        reviewers = sorted({c.get("reviewer") or "?" for c in copies})
        if len(copies) > 1:
            values = [_agreement_values(c) for c in copies]
            fields = [f for f in (*AGREEMENT_FIELDS, "decision") if len({v[f] for v in values}) > 1]
            name = copies[0].get("slice") or "(no slice)"
            n, ok = result.agreement_by_slice.get(name, (0, 0))
            result.agreement_by_slice[name] = (n + 1, ok + int(not fields))
            if fields:
                result.disagreements.append({"item_id": item_id, "reviewers": reviewers, "fields": fields})
                continue
        # Every reviewer of the item is recorded, not the first copy's alone.
        item = {**copies[0], "reviewed_by": [r for r in reviewers if r != "?"]}
        if item["decision"] == "reject":
            result.rejected.append(item_id)
            continue
        # What the loader defaults (slice, split) is defaulted here too; a reference is needed
        # only by a case the corpus can answer.
        missing = [f for f in ("reviewer",) if not item.get(f)]
        if item.get("answerable") is None:
            missing.append("answerable")
        elif item["answerable"]:
            missing += [f for f in ("reference", "gold_docs") if not item.get(f)]
        if missing:
            result.incomplete.append({"item_id": item_id, "reason": "fill " + ", ".join(missing)})
            continue
        ready.append(item)
    known_ids = {c.id for c in golden.cases}
    corrections = [item for item in ready if item["origin"] == "failed_case" and item.get("case_id") in known_ids]
    relabelled = {item["case_id"]: item for item in corrections}
    new_items = [item for item in ready if item not in corrections]
    # Near duplicates: of a golden case, or of an item accepted before it in this batch. Every
    # question is encoded once; an accepted item's vector joins the ones later items are held to.
    # A holdout case counts like any other, but is never named: its id would point at its text.
    names: list[str | None] = [None if withheld(c) else c.id for c in golden.cases]
    known = _unit_vectors([c.question for c in golden.cases], embedder)
    candidates = _unit_vectors([item["question"] for item in new_items], embedder)
    accepted: list[dict] = []
    for item, vector in zip(new_items, candidates):
        row = known @ vector if len(known) else np.zeros(0)
        close = [j for j in np.argsort(-row, kind="stable") if row[j] >= duplicate_threshold]
        holdout = [j for j in close if names[j] is None]
        if holdout:
            # Held back even with duplicate_ok: it would put a holdout question into another split.
            result.duplicates.append({"item_id": item["item_id"], "of": None, "similarity": None})
            continue
        if close and not item["duplicate_ok"]:
            result.duplicates.append({"item_id": item["item_id"], "of": names[close[0]], "similarity": float(row[close[0]])})
            continue
        accepted.append(item)
        names.append(None if item.get("split") == HOLDOUT else item.get("id") or f"tri-{item['item_id']}")
        known = np.vstack([known, vector[None, :]]) if len(known) else vector[None, :]
    if not accepted and not relabelled:
        return result
    today = datetime.now(UTC).date().isoformat()
    versions = {s: store.served.manifest_hash(s) for s in source_ids}
    cases = [_case_from(item, versions, today) for item in accepted]
    # The snapshot keeps the old revision's text as it is (its revision is the hash of its bytes).
    text = golden_path.read_text(encoding="utf-8")
    new_text = _relabel(golden_path, relabelled, versions, today)
    new_text += ("" if new_text.endswith("\n") or not new_text else "\n") + "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    # Validated like any golden file (gold ids against every document ever seen) before it is written.
    with tempfile.TemporaryDirectory() as folder:
        candidate = Path(folder) / golden_path.name
        candidate.write_text(new_text, encoding="utf-8")
        try:
            load_golden_set(candidate, known_documents=store.ledger.document_history())
        except GoldenSetError as exc:
            # Named as the file it would become (the temporary copy is gone by the time anyone reads this).
            raise GoldenSetError(str(exc).replace(str(candidate), f"{golden_path} (as accepting would write it)")
                                 + f"\nnothing was written; correct the reviewed items ({', '.join(map(str, review_files))}) "
                                 "whose case ids are named, then run accept again") from None
        result.new_revision = file_revision(candidate)
    result.accepted = sorted(relabelled) + [c["id"] for c in cases]
    by = ", ".join(sorted({r for item in [*accepted, *relabelled.values()] for r in item["reviewed_by"]}))
    # Recorded before the file is replaced, together: a kill in between leaves the old file whole, and
    # the same accept run again converges (the change and the log entry are not recorded twice).
    with store.transaction():
        store.records.snapshot_golden(golden.revision, str(golden_path), text)
        store.records.snapshot_golden(result.new_revision, str(golden_path), new_text)
        store.records.record_golden_change("accept-reviewed", result.accepted, result.old_revision, result.new_revision,
                                           by, f"triage: {len(cases)} reviewed case(s)")
        _log_revision(store, result)
    kill_point("accept:recorded")
    write_text_atomically(golden_path, new_text, fault="accept:written")
    return result


def _log_revision(store: Store, result: AcceptResult) -> None:
    """The new golden revision in the experiment log (a revision change, not a system change)."""
    store.records.log_experiment({
        "experiment_id": f"golden-{result.new_revision}", "created_at": datetime.now(UTC).replace(tzinfo=None),
        "component": "golden_set", "hypothesis": "new golden revision from triage (not a system change)",
        "config_diff": {"golden_revision": [result.old_revision, result.new_revision], "added_cases": result.accepted},
        "baseline_eval": None, "candidate_eval": None, "deltas": {}, "worst_slice": None, "worst_slice_delta": None,
        "decision": "revision change: baselines of the old revision do not gate the new one", "bundle": False,
    })
