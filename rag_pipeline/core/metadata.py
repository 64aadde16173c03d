"""A document's metadata: front matter and sidecars read strictly, and the access fields failing closed.

The fields that decide who may read a document (`tenant`, `visibility`, `roles`, `status`) are
never guessed. A key that is given must carry a definite value of its type: null, empty, a YAML
boolean or number (`no`, `false`, `0`), a list where a name is due, a mapping, or a key given
twice is an error of the document, never a fallback to a default (the fallbacks were the most
open values: public, shared by all tenants, published). The one documented null is `tenant:
null`, "shared by all tenants": it is honoured where the source itself is shared (no tenant in its
defaults) and refused under a tenant's source, where it would widen the page. A key that is absent
takes the source's default; the source defaults are validated by the same rules at config load.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from dataclasses import fields
from datetime import date

import yaml

from rag_pipeline.core.models import DocumentMeta

STATUSES = ("published", "draft", "superseded")
VISIBILITIES = ("public", "internal")
ACCESS_FIELDS = ("tenant", "visibility", "roles", "status")
META_FIELDS = frozenset(DocumentMeta.__dataclass_fields__)
# Metadata is a few lines: a sidecar or front matter past these sizes is refused, not parsed.
MAX_SIDECAR_BYTES = 256 * 1024
MAX_FRONT_MATTER_CHARS = 64 * 1024
# Words YAML 1.1 (PyYAML) reads as null or booleans, and a bare zero: quoted, they are strings, but
# as a tenant or role name they are a slip (`tenant: "none"`), never a name anyone holds.
_REMOVE_HINT = "(or remove the key to use the source's default)"
_NOT_A_NAME = frozenset({"", "~", "null", "none", "nil", "false", "no", "off", "true", "yes", "on", "0"})


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (safe_load keeps the last one
    silently, so `visibility: internal` followed by `visibility: public` would publish the page)."""

    # The file's line number of the text's first line (front matter starts on line 2).
    first_line = 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges another mapping: its keys are overridden, by design
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + self.first_line
            try:
                first = seen.setdefault(key, line)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if first != line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (lines {first} and {line}): keep one", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_mapping(text: str, what: str, first_line: int = 1) -> dict:
    """A YAML mapping from `text` (empty: {}); ValueError naming `what` and the line otherwise
    (`first_line`: the line of the file that `text` starts on)."""
    loader = None
    try:
        # Inside the `try`: the loader's reader refuses a control character as it is built.
        loader = _StrictLoader(text)
        loader.first_line = first_line
        data = loader.get_single_data()
    except yaml.reader.ReaderError as exc:
        raise ValueError(_unreadable_character(text, exc, what, first_line)) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + first_line}" if mark is not None else ""
        raise ValueError(f"{what} is not valid YAML{where}: {yaml_problem(exc)}") from exc
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a YAML mapping (key: value lines)")
    return data


_CONTROL_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "BS", 0x0B: "VT", 0x0C: "FF", 0x1B: "ESC", 0x7F: "DEL"}


def _unreadable_character(text: str, error: yaml.reader.ReaderError, what: str, first_line: int) -> str:
    """The sentence for a character YAML refuses to read (a control character: an ESC left by a
    terminal colour code, a BEL, a NUL), with its line and column in the file."""
    position = error.position if isinstance(error.position, int) and 0 <= error.position <= len(text) else 0
    line = text.count("\n", 0, position) + first_line
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    code = error.character if isinstance(error.character, int) else ord(text[position]) if position < len(text) else 0
    name = f" ({_CONTROL_NAMES[code]})" if code in _CONTROL_NAMES else ""
    kind = "control character" if code < 0x20 or 0x7F <= code <= 0x9F else "character"
    hint = " (a terminal colour code pasted with the text?)" if code == 0x1B else ""
    return (f"{what} holds the {kind} U+{code:04X}{name} at line {line}, column {column}, which YAML cannot read: "
            f"delete it{hint} and run again")


def yaml_problem(error: yaml.YAMLError) -> str:
    """The one-line gist of a YAML error (PyYAML's own text spans several lines with a caret)."""
    problem = getattr(error, "problem", None)
    context = getattr(error, "context", None)
    if problem:
        return f"{context}, {problem}" if context else problem
    return " ".join(str(error).split())


def split_front_matter(text: str) -> tuple[dict | None, str, int]:
    """Split YAML front matter from a text file.

    Returns (front matter mapping or None, body, number of lines the front matter occupied),
    so that line numbers in the body can be mapped back to the file. Raises ValueError with the
    line of a YAML error, for a key given twice, and for front matter not closed within
    `MAX_FRONT_MATTER_CHARS` (only that much of the file is looked at).
    """
    if not text.startswith("---"):
        return None, text, 0
    head = text[: MAX_FRONT_MATTER_CHARS + 1]
    lines = head.splitlines(keepends=True)
    if lines[0].strip() != "---":
        return None, text, 0
    consumed = len(lines[0])
    for index in range(1, len(lines)):
        line = lines[index]
        consumed += len(line)
        # A line cut by the window is not a whole line: it cannot close the front matter.
        whole = line != line.rstrip("\r\n") or consumed == len(text)
        if whole and line.strip() in ("---", "..."):
            # Lines counted in the file: the opening `---` is line 1.
            data = load_mapping("".join(lines[1:index]), "front matter", first_line=2)
            return data, text[consumed:], index + 1
    if len(text) > MAX_FRONT_MATTER_CHARS:
        raise ValueError(f"front matter opened with '---' on line 1 is not closed within its first "
                         f"{MAX_FRONT_MATTER_CHARS // 1024} KB (the limit for metadata): close it with '---', or "
                         "move the text out of the front matter")
    raise ValueError("front matter opened with '---' on line 1 but never closed")


def _check_access_keys(raw: Mapping) -> None:
    """A misspelt access key is an error, never ignored: ignored, it would leave the page to the default."""
    for key in raw:
        if not isinstance(key, str) or key in META_FIELDS:
            continue
        close = [f for f in ACCESS_FIELDS if key.strip().lower() == f or difflib.SequenceMatcher(None, key.lower(), f).ratio() >= 0.8]
        if close:
            raise ValueError(f"key {key!r} looks like {close[0]!r}, which decides who may read the document: spell it "
                             f"{close[0]!r} (until then the document is not indexed, so it cannot be served to everyone)")


def _kind(value: object) -> str:
    """What a YAML value is, in the words of an error message."""
    if value is None:
        return "null (empty)"
    if isinstance(value, bool):
        return f"the YAML boolean {str(value).lower()} (unquoted no, off, false, yes, on and true are booleans)"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}" if value else "an empty list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, date):
        return f"the date {value.isoformat()}"
    if isinstance(value, str):
        return "an empty text" if not value.strip() else f"{value!r}"
    return type(value).__name__


def _name(field: str, value: object, what: str, hint: str) -> str:
    """A tenant or role name: a non-empty text that is no YAML null or boolean word."""
    if not isinstance(value, str) or value.strip().lower() in _NOT_A_NAME:
        raise ValueError(f"{what} is {_kind(value)}, not a name: {field} decides who may read the document, so it must "
                         f"be a name such as {'acme' if field == 'tenant' else 'employee'} {hint}")
    return value.strip()


def access_value(field: str, value: object, *, shared_source: bool, hint: str = _REMOVE_HINT) -> str | tuple[str, ...] | None:
    """The validated value of one access field given explicitly; ValueError with the reason.

    `shared_source`: the source has no tenant of its own, so `tenant: null` means what its
    default means (shared by all tenants) and is allowed; under a tenant's source it is refused.
    `hint`: what else the author may do, ending the message.
    """
    if field == "tenant":
        if value is None and shared_source:
            return None
        if value is None:
            raise ValueError("tenant is null: under this source's tenant it would share the page with every tenant; "
                             "name the tenant, or remove the key to keep the source's tenant")
        return _name(field, value, "tenant", hint)
    if field in ("visibility", "status"):
        allowed = VISIBILITIES if field == "visibility" else STATUSES
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"{field} is {_kind(value)}, not one of {', '.join(allowed)}: write one of them {hint}")
        return value
    if field == "roles":
        if isinstance(value, str) and "," not in value and value.strip().lower() not in _NOT_A_NAME:
            return (value.strip(),)  # one role written without brackets
        if isinstance(value, str) and "," in value:
            raise ValueError(f"roles is the text {value!r}: write the roles as a list, e.g. [employee, support]")
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError(f"roles is {_kind(value)}: list the roles that may read the document, e.g. [employee] {hint}")
        names = tuple(_name("roles", item, f"role {index + 1} of roles", hint) for index, item in enumerate(value))
        return tuple(dict.fromkeys(names))
    raise KeyError(field)


def validate_defaults(defaults: Mapping) -> dict:
    """A source's defaults, checked by the rules of a document's own fields (ValueError otherwise):
    a source default of `visibility: null` or `tenant: ''` is a config error, not a public source."""
    checked = dict(defaults)
    for field in ACCESS_FIELDS:
        if field in defaults:
            if field == "tenant" and defaults[field] is None:
                raise ValueError("tenant is null: remove the key for a source shared by all tenants, or name the tenant")
            checked[field] = access_value(field, defaults[field], shared_source=True, hint="(or remove the key)")
    return checked


def build_meta(raw: Mapping | None, defaults: Mapping) -> DocumentMeta:
    """Merge a document's own metadata over the source defaults; raise ValueError on bad values.

    `defaults` are the source's (validated at config load; a None there means "not set").
    """
    raw = raw or {}
    _check_access_keys(raw)
    merged = {k: v for k, v in dict(defaults).items() if k in META_FIELDS and v is not None}
    shared_source = merged.get("tenant") is None
    for key, value in raw.items():
        if key in ACCESS_FIELDS:
            merged[key] = access_value(key, value, shared_source=shared_source)
        elif key in META_FIELDS:
            merged[key] = value
    status = merged.get("status", "published")
    visibility = merged.get("visibility", "public")
    if status not in STATUSES or visibility not in VISIBILITIES:  # a default given by code, not config
        raise ValueError(f"source default status {status!r} / visibility {visibility!r} is not allowed")
    roles = merged.get("roles") or ()
    if isinstance(roles, str):
        roles = (roles,)
    if visibility == "public" and raw.get("roles"):
        raise ValueError(f"roles {list(roles)} on a public document restrict nothing: set visibility: internal to "
                         "limit it to these roles, or remove roles")
    if visibility == "internal" and not roles:
        roles = ("employee",)  # an internal page nobody may read is a bug; employees is the safe floor
    effective = merged.get("effective_date")
    if effective is not None and not isinstance(effective, date):
        try:
            effective = date.fromisoformat(str(effective))
        except ValueError as exc:
            raise ValueError(f"effective_date {effective!r} is not a YYYY-MM-DD date") from exc
    tenant = merged.get("tenant")
    return DocumentMeta(
        title=str(merged["title"]) if merged.get("title") else None,
        tenant=str(tenant) if tenant is not None else None,
        visibility=visibility,
        roles=tuple(str(r) for r in roles),
        status=status,
        effective_date=effective,
        supersedes=merged.get("supersedes") or None,
        superseded_by=merged.get("superseded_by") or None,
    )


_META_FIELDS = tuple(f.name for f in fields(DocumentMeta))


@functools.lru_cache(maxsize=4096)
def meta_to_json(meta: DocumentMeta) -> str:
    # Cached: most documents of a source share their metadata (DocumentMeta is immutable).
    # The fields as they are (flat values and a tuple of roles): the JSON of `asdict(meta)`,
    # without its deep copy (once per document at every discovery).
    return json.dumps({name: getattr(meta, name) for name in _META_FIELDS}, sort_keys=True, default=str)


@functools.lru_cache(maxsize=4096)
def meta_from_json(text: str | None) -> DocumentMeta:
    """The inverse of `meta_to_json` (for documents carried over from an earlier discovery or the
    committed manifest). Cached: most documents of a source share their metadata, and the result
    is immutable."""
    raw = json.loads(text) if text else {}
    effective = raw.get("effective_date")
    return DocumentMeta(**{**raw, "roles": tuple(raw.get("roles") or ()),
                           "effective_date": date.fromisoformat(effective) if effective else None})
