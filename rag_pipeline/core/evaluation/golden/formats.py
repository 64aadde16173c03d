"""Golden cases from other tools' dataset shapes (the export to RAGAS is `ragas_export.py`).

Import (`import_cases`) reads JSON (a list of records, or an object holding one under
`goldens`, `test_cases`, `samples`, `data`, `rows` or `examples`), JSONL (one record a line) or
CSV (a header row; list columns as JSON or Python list literals). Shapes:

- `ragas`: question `user_input` | `question`; reference `reference` | `ground_truth` |
  `ground_truths` (a list, joined by newlines); gold contexts `reference_contexts` (a list of
  texts); slice from `synthesizer_name` | `evolution_type`. A RAGAS 0.1 testset, as
  `TestsetGenerator` writes it (`question, contexts, ground_truth, evolution_type, metadata,
  episode_done`), holds its gold contexts in `contexts`: in a file with generator columns
  (`evolution_type`, `episode_done`) and no answer column, `contexts` are gold; its `metadata`
  (a list of the source documents' metadata) gives gold files by `source`, `file_path`,
  `filename` or `file_name`.
- `deepeval`: question `input`; reference `expected_output`; gold from `source_file` (a file
  name) and `context` (texts).

What the tested system produced is never a label: RAGAS `response` / `answer` are not imported,
and RAGAS `retrieved_contexts`, `contexts` outside a generated testset, and DeepEval
`retrieval_context` never become gold documents. A record whose only contexts are retrieved ones
has its retrieved contexts listed in `unmapped` ("retrieved contexts are not labels"), and is
left out unless it names its gold documents another way.
- `handwritten`: question `question` | `query` | `input` | `user_input`; reference `reference` |
  `expected_answer` | `answer` | `ground_truth` | `expected_output`; gold from `gold_pids`,
  `expected_document_ids`, `gold_docs` (document ids) and `source_doc` | `source_docs` | `file`
  (file names or relative paths).
- `auto`: the shape whose keys the records use (an error when it cannot tell).

In every shape the hand-written gold keys are honoured, and our own fields (`id`, `slice`,
`split`, `weight`, `tenant`, `roles`, `answerable`, `forbidden_docs`, `gold_spans`) are copied
as they are, from the top level or else from RAGAS's `metadata` or DeepEval's
`additional_metadata` object (record_fields.py), to be validated when the file is written (`answerable` may also be one of the
strings "true", "false", "yes", "no", in any case; any other value leaves the record out). An
unanswerable case is written `answerable: false` at the top level, or inside RAGAS's `metadata`
or DeepEval's `additional_metadata` object; it needs no reference and no gold. A case without
`id` gets `<file stem>-<first 10 hex digits of sha256(question)>`; a RAGAS case without `slice`
takes its `synthesizer_name` or `evolution_type`; `slice` and `split`, when still absent, are
left to the loader's documented defaults. The summary says where the cases' ids, slices and
splits came from.

References are resolved against the known documents by the resolver shared with the golden-file
loader (doc_refs.py: ids, chunk ids, file names and paths, context texts).

Nothing is dropped silently: every reference that cannot be mapped is in `unmapped` with its
line, a case that cannot be written (no question, no reference for an answerable case, an
`answerable` that is not a boolean, or answerable with no gold document mapped) is in `left_out`
with its line and the reason, and a question asked twice with other labels (another reference,
other gold documents, another answerability) is in `warnings` with both lines.
`ImportResult.write` validates the cases as the loader would, naming the input file's lines, and
writes nothing when one is invalid. Reading is bounded like a golden file's: a file over
`dataset_records.MAX_IMPORT_FILE_BYTES` is refused, and in JSONL and CSV a line over MAX_GOLDEN_LINE_BYTES is an
error naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.golden.cases import BOOLEAN_VALUES, GoldenSetError
from rag_pipeline.core.evaluation.golden.dataset_records import read_records

# The resolver is shared with the golden-file loader and other systems' runs; its names stay importable here.
from rag_pipeline.core.evaluation.golden.doc_refs import ContextMatcher, Resolver, known_documents  # noqa: F401
from rag_pipeline.core.evaluation.golden.record_fields import metadata_objects, origin_summary, team_fields
from rag_pipeline.core.evaluation.golden.record_fields import texts as _texts
from rag_pipeline.core.evaluation.golden.validation import validate_cases

if TYPE_CHECKING:
    from rag_pipeline.core.storage import Store

SHAPES = ("ragas", "deepeval", "handwritten", "auto")
_ID_KEYS = ("gold_pids", "expected_document_ids", "gold_docs")
_FILE_KEYS = ("source_doc", "source_docs", "file")
# The tested system's retrieved contexts: its output, never gold (see the module docstring).
_RETRIEVED = {"ragas": ("retrieved_contexts", "contexts"), "deepeval": ("retrieval_context",), "handwritten": ()}
# Columns only a testset generator writes (RAGAS 0.1's TestsetGenerator); with them and no answer,
# `contexts` are the contexts the questions were generated from: gold.
_GENERATOR_COLUMNS = ("evolution_type", "episode_done")
_ANSWER_COLUMNS = ("answer", "response", "actual_output")
# Keys of a source document's metadata that name its file (LangChain `source`, LlamaIndex `file_path`).
_METADATA_FILE_KEYS = ("source", "file_path", "filename", "file_name")
_QUESTION = {"ragas": ("user_input", "question"), "deepeval": ("input",),
             "handwritten": ("question", "query", "input", "user_input")}
_REFERENCE = {"ragas": ("reference", "ground_truth", "ground_truths"), "deepeval": ("expected_output",),
              "handwritten": ("reference", "expected_answer", "answer", "ground_truth", "expected_output")}
# Keys that tell the shapes apart (auto); the hand-written gold keys are allowed in every shape.
_SIGNATURES = {
    "ragas": {"user_input", "ground_truth", "ground_truths", "reference_contexts", "retrieved_contexts", "contexts",
              "synthesizer_name", "evolution_type", "episode_done"},
    "deepeval": {"input", "expected_output", "context", "retrieval_context", "source_file", "actual_output"},
    "handwritten": set(_ID_KEYS) | set(_FILE_KEYS),
}


class Mapped(NamedTuple):
    line: int
    reference: str
    doc_id: str
    how: str


class Unmapped(NamedTuple):
    line: int
    reference: str
    reason: str


class LeftOut(NamedTuple):
    line: int
    case: str
    reason: str


@dataclass
class ImportResult:
    """Cases as dicts in the golden-set schema, with how every reference was resolved."""

    path: Path
    shape: str
    cases: list[dict]
    mapped_by: list[Mapped] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    # Problems that do not stop a case: the same question asked twice with other labels.
    warnings: list[str] = field(default_factory=list)
    # (field, where it came from) -> cases written: `("slice", "metadata.slice")` (record_fields.py).
    origins: Counter = field(default_factory=Counter)
    # The input line of each case in `cases`, so that a problem names the line a person can fix.
    lines: list[int] = field(default_factory=list)
    # Document id -> skip reason (None for a document) of every document ever seen, when known
    # (`import_from_store`): `write` then checks gold and forbidden ids as the loader does.
    known_documents: Mapping[str, str | None] | None = None

    def write(self, out: Path | str) -> Path:
        """Write the cases as golden-set JSONL (one object a line), once they are valid.

        The cases are checked as `load_golden_set` checks a file, problems naming the input
        file's lines; when one is invalid, GoldenSetError and nothing is written, so that a
        corrected import can be run again. The file is written whole or not at all."""
        out = Path(out)
        texts = [json.dumps(c, ensure_ascii=False) for c in self.cases]
        # Checked as they will be read back (through JSON), at the input line each came from.
        lines = self.lines if len(self.lines) == len(texts) else list(range(1, len(texts) + 1))
        _, problems = validate_cases(((f"{self.path.name} line {n}", n, json.loads(t)) for n, t in zip(lines, texts)),
                                     self.known_documents)
        if problems:
            raise GoldenSetError(f"{self.path}: {len(problems)} problem(s); nothing written to {out} (fix the input and "
                                 "import again):\n  " + "\n  ".join(problems))
        out.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write("".join(t + "\n" for t in texts))
            os.replace(temporary, out)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return out

    def summary(self) -> str:
        """e.g. `imported 12 of 14 records (shape ragas) | references: 20 mapped (15 by ...), 3 unmapped | left out 2`."""
        total = len(self.cases) + len(self.left_out)
        ways = Counter(_kind(m.how) for m in self.mapped_by)
        parts = [f"imported {len(self.cases)} of {total} records from {self.path.name} (shape {self.shape})",
                 f"references: {len(self.mapped_by)} mapped"
                 + (" (" + ", ".join(f"{n} {how}" for how, n in ways.most_common()) + ")" if ways else "")
                 + f", {len(self.unmapped)} unmapped"]
        parts += origin_summary(self.origins)
        if self.left_out:
            parts.append(f"left out {len(self.left_out)}")
        if self.warnings:
            parts.append(f"{len(self.warnings)} warning(s)")
        return " | ".join(parts)

    def problems(self) -> list[str]:
        """One line per unmapped reference, per case left out and per warning, naming its line."""
        return ([f"line {u.line}: {u.reference!r}: {u.reason}" for u in self.unmapped]
                + [f"line {x.line} ({x.case}): left out: {x.reason}" for x in self.left_out]
                + self.warnings)


def _kind(how: str) -> str:
    return how.split(" (", 1)[0]


# ---- the known documents -----------------------------------------------------------------------


def import_from_store(path: Path | str, shape: str, store: Store, source_prefix: str | None = None) -> ImportResult:
    """`import_cases` against a store's documents and served chunk texts (read only if a context needs them)."""
    result = import_cases(path, shape, known_documents(store), store.served.chunk_texts, source_prefix)
    result.known_documents = store.ledger.document_history()
    return result


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- reading records ---------------------------------------------------------------------------


def detect_shape(records: Sequence[tuple[int, dict]], container: str | None = None) -> str:
    """The shape whose distinctive keys the records use; ValueError when none or two tool shapes match."""
    if container in ("goldens", "test_cases"):
        return "deepeval"
    keys = set().union(*(r.keys() for _, r in records)) if records else set()
    found = {shape: sorted(keys & sig) for shape, sig in _SIGNATURES.items() if keys & sig}
    tools = [s for s in ("ragas", "deepeval") if s in found]
    if len(tools) == 1:
        return tools[0]
    if len(tools) > 1:
        raise InputError("cannot tell the shape: " + "; ".join(f"{s} keys {found[s]}" for s in tools)
                         + "; name it with --shape")
    if "handwritten" in found:
        return "handwritten"
    raise InputError(f"cannot tell the shape from the keys {sorted(keys)}; name it with --shape")


# ---- importing ---------------------------------------------------------------------------------


def import_cases(
    path: Path | str,
    shape: str,
    documents: Mapping[str, Mapping[str, Any]],
    chunk_texts: Mapping[str, Sequence[str]] | Callable[[], Mapping[str, Sequence[str]]] | None = None,
    source_prefix: str | None = None,
) -> ImportResult:
    """Read a RAGAS, DeepEval or hand-written dataset into golden-set cases (see the module docstring).

    `documents`: doc id -> `{rel_path, title, indexed}` (`known_documents(store)`); `chunk_texts`:
    doc id -> its chunk texts, or a function returning that (needed only to map context texts).
    """
    path = Path(path)
    if shape not in SHAPES:
        raise InputError(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    records, container = read_records(path)
    if shape == "auto":
        shape = detect_shape(records, container)
    resolver = Resolver(documents, chunk_texts, source_prefix)
    result = ImportResult(path, shape, [])
    stem = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-") or "case"
    columns = set().union(*(r.keys() for _, r in records)) if records else set()
    generated = shape == "ragas" and bool(columns & set(_GENERATOR_COLUMNS)) and not columns & set(_ANSWER_COLUMNS)
    seen: dict[str, int] = {}
    asked: dict[str, tuple[int, str, str]] = {}  # question -> (line, case id, its labels)
    for line, record in records:
        case = _convert(record, line, shape, resolver, result, stem, path.name, seen, generated)
        if case is not None:
            seen[case["id"]] = line
            result.cases.append(case)
            result.lines.append(line)
            _check_asked_before(case, line, asked, result)
    return result


def _check_asked_before(case: dict, line: int, asked: dict[str, tuple[int, str, str]], result: ImportResult) -> None:
    """A warning when the question was asked on an earlier line with other labels: two cases then
    grade one question two ways, and one of them is wrong (or the questions need telling apart)."""
    question = " ".join(re.findall(r"\w+", case["question"].lower()))
    labels = json.dumps([sorted(case.get("gold_docs") or []), case.get("answerable", True),
                         " ".join(str(case.get("reference") or "").split())])
    earlier = asked.get(question)
    if earlier is None:
        asked[question] = (line, case["id"], labels)
        return
    if earlier[2] != labels:
        before, now = json.loads(earlier[2]), json.loads(labels)
        differ = [name for name, a, b in zip(("gold_docs", "answerable", "reference"), before, now) if a != b]
        result.warnings.append(f"line {line} ({case['id']}): the question of line {earlier[0]} ({earlier[1]}) again, with "
                               f"other {', '.join(differ)}: keep one, or make the questions distinct")


def _first(record: Mapping[str, Any], keys: Iterable[str]) -> tuple[str | None, Any]:
    for key in keys:
        value = record.get(key)
        if value not in (None, "", []):
            return key, value
    return None, None


def _convert(record: dict, line: int, shape: str, resolver: Resolver, result: ImportResult, stem: str,
             file_name: str, seen: Mapping[str, int], generated: bool = False) -> dict | None:
    """One record as a case, or None (then listed in `left_out`); references go to `result`.
    `generated`: the file is a RAGAS 0.1 testset, whose `contexts` are gold."""
    _, question = _first(record, _QUESTION[shape])
    reference_key, reference = _first(record, _REFERENCE[shape])
    question = " ".join(_texts(question)) if question is not None else ""
    reference = "\n".join(_texts(reference)) if reference is not None else ""
    metadata = [item for _, item, _ in metadata_objects(record)]
    ours, origins = team_fields(record)
    given_id = str(ours.pop("id", "")).strip()
    case_id = given_id or f"{stem}-{hashlib.sha256(question.encode()).hexdigest()[:10]}"
    if given_id and given_id in seen:
        result.left_out.append(LeftOut(line, case_id, f"duplicate id (first on line {seen[case_id]})"))
        return None
    base_id, n = case_id, 2
    while case_id in seen:  # a generated id: the same question asked twice
        case_id, n = f"{base_id}-{n}", n + 1
    if not question:
        result.left_out.append(LeftOut(line, case_id, f"no question ({' / '.join(_QUESTION[shape])})"))
        return None
    # bool("false") is True: a value that is no boolean must not decide whether gold is needed.
    if not isinstance(ours.get("answerable", True), bool):
        result.left_out.append(LeftOut(line, case_id, f"field 'answerable': {json.dumps(ours['answerable'])} is not a "
                                                      f"boolean; write {BOOLEAN_VALUES}"))
        return None
    if not reference and ours.get("answerable", True):
        result.left_out.append(LeftOut(line, case_id, f"no reference answer ({' / '.join(_REFERENCE[shape])}); only an "
                                                      "unanswerable case (answerable: false) may leave it out"))
        return None

    references: list[tuple[str, str]] = []  # (kind, reference): kind is id, file or context
    references += [("id", r) for key in _ID_KEYS for r in _texts(record.get(key))]
    references += [("file", r) for key in _FILE_KEYS for r in _texts(record.get(key))]
    gold_from = []
    labels = {"ragas": (("reference_contexts", "context"),) + ((("contexts", "context"),) if generated else ()),
              "deepeval": (("source_file", "file"), ("context", "context")), "handwritten": ()}[shape]
    for key, kind in labels:
        if _texts(record.get(key)):
            references += [(kind, r) for r in _texts(record[key])]
            gold_from.append(key)
    if shape == "ragas":
        files = [str(m[k]) for m in metadata for k in _METADATA_FILE_KEYS if isinstance(m.get(k), str) and m[k].strip()]
        if files:
            references += [("file", f) for f in dict.fromkeys(files)]
            gold_from.append("metadata")
    answerable = ours.get("answerable", True)
    retrieved_keys = [k for k in _RETRIEVED[shape] if not (generated and k == "contexts")]
    retrieved = [key for key in retrieved_keys if _texts(record.get(key))] if answerable and not references else []
    for key in retrieved:
        # Once per record and column: a dataset of the system's outputs must not pass for a labelled one.
        result.unmapped.append(Unmapped(line, f"{key} ({len(_texts(record[key]))} text(s))",
                                        "ignored: retrieved contexts are the tested system's output, not labels; gold "
                                        f"comes from {' / '.join(k for k, _ in labels)} or document-id / file-name fields"))
    gold: list[str] = []
    for kind, ref in references:
        shown = _short(ref) if kind == "context" else ref
        if not answerable:
            result.unmapped.append(Unmapped(line, shown, "ignored: the case is marked unanswerable"))
            continue
        resolve = {"id": resolver.document_id, "file": resolver.file, "context": resolver.context}[kind]
        doc_id, how = resolve(ref)
        if doc_id is None:
            result.unmapped.append(Unmapped(line, shown, how))
            continue
        result.mapped_by.append(Mapped(line, shown, doc_id, how))
        if doc_id not in gold:
            gold.append(doc_id)
    if answerable and not gold:
        why = (f"none of its {len(references)} gold reference(s) could be mapped" if references
               else f"answerable, but it names no gold document or context (only {', '.join(retrieved)}, not labels)"
               if retrieved else "answerable, but it names no gold document or context")
        result.left_out.append(LeftOut(line, case_id, why))
        return None
    slice_key, slice_name = _first(record, ("synthesizer_name", "evolution_type")) if shape == "ragas" else (None, None)
    provenance = f"imported from {file_name} line {line} (shape {shape}"
    provenance += (f", reference from {reference_key}" if reference_key else ", no reference") + (
        f", gold from {', '.join(gold_from)}" if gold_from else "") + ")"
    if record.get("provenance"):
        provenance = f"{record['provenance']}; {provenance}"
    case = {"id": case_id, "question": question, "gold_docs": gold}
    if reference:
        case["reference"] = reference
    if slice_name and "slice" not in ours:
        case["slice"], origins["slice"] = str(slice_name), str(slice_key)
    origins.setdefault("id", "id" if given_id else "generated")
    result.origins.update((name, origins.get(name, "default")) for name in ("id", "slice", "split"))
    return case | ours | {"provenance": provenance}


# ---- export ------------------------------------------------------------------------------------


