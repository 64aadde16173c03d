"""The golden set: frozen, versioned evaluation cases, validated line by line.

One JSON object per line: `id`, `question`, `reference`, `gold_docs`, optional `gold_spans`,
`slice`, `weight` (default 1), `split` (dev / validation / holdout), `tenant`, `roles`,
`answerable`, optional `forbidden_docs` (documents this caller must never retrieve),
`prohibited_claims` (statements an answer to this question must never make: a wrong policy that
users were once told, a promise the corpus does not give), `provenance`. The revision is the
content hash of the file.

A minimal case is `id`, `question`, `reference` and `gold_docs`; an unanswerable case
(`answerable: false`) needs neither `reference` nor `gold_docs`. Document ids are
`<source>:<relative path>` (`handbook:people/benefits.md`); when the loader is given the documents
the sources have held (`known_documents`), a gold, forbidden or span document may also be written
as a path relative to the source's root or to the repository (`docs/middleware.md`), resolved as
`golden import` resolves it (doc_refs.py), with "did you mean" on a miss. Defaults, reported by
`GoldenSet.summary()`:

- `slice`: `"general"`.
- `split`: from the id alone, so a case keeps its split however often the file is re-loaded or
  re-ordered: `n = int(sha256(id).hexdigest()[:8], 16) % 100`; n < 75 is dev, else validation.
  A default never puts a case in holdout: holdout promises that nobody tuned on a case, which
  only the person who wrote it can promise (`split: holdout`); a hidden fifth of a small set
  would also hide its failures.
- `weight` 1, `answerable` true, no tenant, roles or spans.

A field that is present must be valid: an unknown split value is an error, never a default.

Blank lines and lines whose first non-blank character is `#` (comments) are skipped, and a UTF-8
byte-order mark at the start is ignored. Every reader of a golden file (this loader,
`release-holdout`, `golden accept`) reads it with `read_golden_lines`, so they agree on what a
line is, and a file one of them writes the others read. Reading is streamed and bounded: a file
over MAX_GOLDEN_FILE_BYTES or with more than MAX_GOLDEN_CASES cases is refused, a line over
MAX_GOLDEN_LINE_BYTES is an error of that line, and the problems listed stop at
MAX_REPORTED_PROBLEMS."""

from __future__ import annotations

import json
import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rag_pipeline.core.bounded import InputTooLargeError
from rag_pipeline.core.evaluation.golden.cases import (
    DEFAULT_SLICE,
    SPLITS,
    GoldenCase,
    GoldenSet,
    GoldenSetError,
    GoldSpan,
    default_split,
    file_revision,
)
from rag_pipeline.core.evaluation.golden.doc_refs import KnownDocuments
from rag_pipeline.core.evaluation.golden.lines import read_golden_lines

_REQUIRED = ("id", "question")
_DEFAULTED = ("slice", "split")
_KNOWN = set(_REQUIRED) | set(_DEFAULTED) | {"reference", "gold_docs", "gold_spans", "weight", "tenant", "roles",
                                             "answerable",
                                             "forbidden_docs", "provenance",
                                             # Written by `golden accept`: who reviewed the case, when, from
                                             # what, on which source versions; claims an answer must not make.
                                             "reviewed", "prohibited_claims"}
MAX_GOLDEN_CASES = 100_000
MAX_REPORTED_PROBLEMS = 100


def load_golden_set(
    path: Path | str,
    served_hashes: Mapping[str, str] | None = None,
    known_documents: Mapping[str, str | None] | None = None,
) -> GoldenSet:
    """Parse and validate a golden set; raise GoldenSetError naming every bad line and field.

    When `served_hashes` is given (document id -> content hash of the indexed version), labels the
    index no longer supports are reported as stale on their cases, not as errors: the corpus
    moved, not the file. Stale cases are scored apart, never counted as misses.
    When `known_documents` is given (every document id the ledger has ever seen -> its skip
    reason, or None for a document), document references that are not ids are resolved as paths
    (doc_refs.py), and a gold or forbidden document that no source has ever held is an error
    with the closest id offered: a typo must not pass as "stale".
    """
    path = Path(path)
    if not path.is_file():
        raise GoldenSetError(f"golden set {path} does not exist")
    entries = ((f"{path.name} line {line.number}", line.number, line.record, line.error)
               for line in read_golden_lines(path) if not line.skipped)
    outcome = _validate(entries, known_documents, served_hashes)
    if outcome.errors:
        raise GoldenSetError(f"golden set {path} has {outcome.problem_count()}:\n  " + "\n  ".join(outcome.errors))
    if not outcome.cases:
        raise GoldenSetError(f"golden set {path} holds no cases")
    golden = GoldenSet(path, file_revision(path), outcome.cases,
                       defaults_applied={name: outcome.defaulted[name] for name in ("split", "slice") if outcome.defaulted[name]},
                       resolved=outcome.resolved)
    if served_hashes is not None:
        golden.stale = stale_labels(outcome.cases, served_hashes)
    return golden


def validate_cases(records: Iterable[tuple[str, int, dict]],
                   known_documents: Mapping[str, str | None] | None = None) -> tuple[list[GoldenCase], list[str]]:
    """(cases, problems) of records not yet written to a golden file, each given as (where, line,
    object), `where` naming the file and line they came from (e.g. `data.csv line 5`): the checks
    of `load_golden_set`, so a file written from the cases loads."""
    outcome = _validate(((where, line, raw, None) for where, line, raw in records), known_documents)
    return outcome.cases, outcome.errors


@dataclass
class _Validation:
    cases: list[GoldenCase] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    defaulted: Counter[str] = field(default_factory=Counter)
    resolved: dict[str, str] = field(default_factory=dict)
    # Set when the problems listed stopped at MAX_REPORTED_PROBLEMS (the line where they stopped).
    stopped_at: str | None = None

    def problem_count(self) -> str:
        if self.stopped_at is None:
            return f"{len(self.errors)} problem(s)"
        return f"{len(self.errors)} problem(s) before checking stopped at {self.stopped_at}"


def _validate(entries: Iterable[tuple[str, int, dict | None, str | None]],
              known_documents: Mapping[str, str | None] | None,
              served_hashes: Mapping[str, str] | None = None) -> _Validation:
    """Cases, problems, defaulted field counts and resolved references of (where, line number,
    object or None, why not) entries; stops at MAX_REPORTED_PROBLEMS problems or past
    MAX_GOLDEN_CASES cases."""
    out = _Validation()
    documents = KnownDocuments(known_documents, served_hashes) if known_documents is not None else None
    seen: dict[str, int] = {}
    for where, line_number, raw, error in entries:
        if len(out.errors) >= MAX_REPORTED_PROBLEMS:
            out.stopped_at = where
            break
        if raw is None:
            out.errors.append(f"{where}: {error}")
            continue
        if len(seen) >= MAX_GOLDEN_CASES:
            raise InputTooLargeError(f"{where}: more than {MAX_GOLDEN_CASES:,} cases, the bound of a golden file; "
                                     "split the set (a suite per file) or sample it")
        case, problems, applied = _parse_case(raw, line_number)
        if case is not None and documents is not None:
            case, problems = _resolve_case(case, documents, out.resolved)
        named = f" ({raw['id']})" if isinstance(raw.get("id"), str) and raw["id"].strip() else ""
        out.errors.extend(f"{where}{named}: {p}" for p in problems)
        if case is None:
            continue
        if case.id in seen:
            out.errors.append(f"{where}: field 'id': duplicate id {case.id!r} (first on line {seen[case.id]})")
            continue
        seen[case.id] = line_number
        out.defaulted.update(applied)
        out.cases.append(case)
    return out


def _resolve_case(case: GoldenCase, documents: KnownDocuments, resolved: dict[str, str]) -> tuple[GoldenCase | None, list[str]]:
    """(the case with every document reference an id, or None; problems), recording path -> id in `resolved`."""
    problems: list[str] = []
    mapping: dict[str, str] = {}
    named = ([("gold_docs", d) for d in case.gold_docs] + [("forbidden_docs", d) for d in case.forbidden_docs]
             + [(f"gold_spans[{i}].doc_id", s.doc_id) for i, s in enumerate(case.gold_spans)])
    for field_name, ref in named:
        if ref in mapping:
            continue
        doc_id, problem = documents.resolve(ref)
        if problem:
            problems.append(f"field '{field_name}': {problem}")
        elif doc_id is not None:
            mapping[ref] = doc_id
    if problems:
        return None, problems
    renamed = {ref: doc_id for ref, doc_id in mapping.items() if ref != doc_id}
    if not renamed:
        return case, []
    resolved.update(renamed)

    def ids(refs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(renamed.get(r, r) for r in refs))

    spans = tuple(replace(s, doc_id=renamed.get(s.doc_id, s.doc_id)) for s in case.gold_spans)
    return replace(case, gold_docs=ids(case.gold_docs), forbidden_docs=ids(case.forbidden_docs), gold_spans=spans), []


def stale_labels(cases: Iterable[GoldenCase], served_hashes: Mapping[str, str]) -> dict[str, list[str]]:
    """Case id -> what no longer holds: a gold document missing from the index, or a span pinned
    to a content hash its document no longer has."""
    stale: dict[str, list[str]] = {}
    for case in cases:
        problems = [f"{d}: not in the index" for d in case.gold_docs if d not in served_hashes]
        for span in case.gold_spans:
            current = served_hashes.get(span.doc_id)
            if span.content_hash and current is not None and current != span.content_hash:
                where = f"lines {span.lines[0]}-{span.lines[1]}" if span.lines else " > ".join(span.heading_path)
                problems.append(f"{span.doc_id}: changed since its span ({where}) was pinned")
        if problems:
            stale[case.id] = problems
    return stale


def _missing(value: object) -> bool:
    """None, or a string with nothing visible in it: white space and format characters (a
    zero-width space, a byte-order mark) do not make a question."""
    return value is None or (isinstance(value, str)
                             and not any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in value))


def _json_type(value: object) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(type(value), "null")


def _strings(raw: dict, name: str, what: str, problems: list[str]) -> list[str]:
    """The list of non-empty strings in `raw[name]` ([] when absent); a problem when it is anything else
    (a string would be read as a list of its characters)."""
    value = raw.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        problems.append(f"field '{name}': must be a list of {what} (strings), not {json.dumps(value)}")
        return []
    return value


def _parse_case(raw: dict, line: int) -> tuple[GoldenCase | None, list[str], list[str]]:
    """(case or None, problems, names of the defaulted fields)."""
    problems: list[str] = []
    for name in _REQUIRED:
        if _missing(raw.get(name)):
            problems.append(f"field '{name}': missing or empty")
        elif not isinstance(raw[name], str):
            problems.append(f"field '{name}': must be a string, not {_json_type(raw[name])} ({json.dumps(raw[name])})")
    problems += [f"field {name!r}: not a field of a golden case; check the spelling (fields: {', '.join(sorted(_KNOWN))})"
                 for name in sorted(set(raw) - _KNOWN)]
    applied = [name for name in _DEFAULTED if _missing(raw.get(name))]
    for name in _DEFAULTED:
        if name not in applied and not isinstance(raw[name], str):
            problems.append(f"field '{name}': must be a string")
    split = raw.get("split")
    if isinstance(split, str) and split.strip() and split not in SPLITS:
        problems.append(f"field 'split': {split!r} is not one of {', '.join(SPLITS)}")
    gold_docs = _strings(raw, "gold_docs", "document ids", problems)
    forbidden_docs = _strings(raw, "forbidden_docs", "document ids", problems)
    answerable = raw.get("answerable", True)
    reference = raw.get("reference")
    if not isinstance(answerable, bool):
        problems.append("field 'answerable': must be true or false")
    elif answerable and not gold_docs:
        problems.append("field 'gold_docs': an answerable case needs at least one gold document "
                        "(or mark it \"answerable\": false)")
    elif not answerable and gold_docs:
        problems.append("field 'gold_docs': an unanswerable case must have no gold documents")
    # What the right answer says: needed to grade an answer, so not for a case that has none.
    if reference is not None and not isinstance(reference, str):
        problems.append(f"field 'reference': must be a string, not {_json_type(reference)} ({json.dumps(reference)})")
    elif answerable is not False and _missing(reference):
        problems.append("field 'reference': missing or empty (only an unanswerable case may leave it out)")
    weight = raw.get("weight", 1)
    # NaN and Infinity parse as JSON numbers here, and would turn every weighted metric into nan.
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight) or weight <= 0:
        problems.append(f"field 'weight': must be a finite positive number, not {json.dumps(weight)}")
    tenant = raw.get("tenant")
    if tenant is not None and not isinstance(tenant, str):
        problems.append(f"field 'tenant': must be a tenant name (a string), not {json.dumps(tenant)}")
        tenant = None
    roles = _strings(raw, "roles", "role names", problems)
    prohibited = raw.get("prohibited_claims") or []
    if not isinstance(prohibited, list) or not all(isinstance(c, str) and c.strip() for c in prohibited):
        problems.append("field 'prohibited_claims': must be a list of non-empty statements")
        prohibited = []
    spans, span_problems = _parse_spans(raw.get("gold_spans") or [], set(gold_docs))
    problems.extend(span_problems)
    if problems:
        return None, problems, applied
    case_id = raw["id"].strip()
    return (
        GoldenCase(
            id=case_id,
            question=raw["question"].strip(),
            reference=(reference or "").strip(),
            gold_docs=tuple(gold_docs),
            slice=DEFAULT_SLICE if "slice" in applied else raw["slice"].strip(),
            split=default_split(case_id) if "split" in applied else split,
            weight=float(weight),
            tenant=tenant or None,
            roles=tuple(roles),
            answerable=answerable,
            gold_spans=spans,
            forbidden_docs=tuple(forbidden_docs),
            prohibited_claims=tuple(c.strip() for c in prohibited),
            provenance=str(raw.get("provenance") or ""),
            line=line,
        ),
        [],
        applied,
    )


def _parse_spans(raw_spans: list, gold_docs: set[str]) -> tuple[tuple[GoldSpan, ...], list[str]]:
    spans, problems = [], []
    if not isinstance(raw_spans, list):
        return (), ["field 'gold_spans': must be a list"]
    for index, raw in enumerate(raw_spans):
        name = f"field 'gold_spans[{index}]'"
        if not isinstance(raw, dict) or not raw.get("doc_id"):
            problems.append(f"{name}: needs a doc_id")
            continue
        if raw["doc_id"] not in gold_docs:
            problems.append(f"{name}: doc_id {raw['doc_id']!r} is not among the case's gold_docs")
        lines = raw.get("lines")
        if lines is not None and (
            not isinstance(lines, list) or len(lines) != 2 or not all(isinstance(n, int) for n in lines) or lines[0] > lines[1]
        ):
            problems.append(f"{name}: 'lines' must be [first, last] line numbers")
            lines = None
        spans.append(GoldSpan(raw["doc_id"], tuple(raw.get("heading_path") or ()), tuple(lines) if lines else None,
                              raw.get("content_hash")))
    return tuple(spans), problems
