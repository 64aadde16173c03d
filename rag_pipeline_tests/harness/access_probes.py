"""Tenant and role probes: careless access metadata must never widen who may read a page.

A corpus is generated over the cross product of odd values (null, empty, YAML booleans and
numbers, lists, mappings, a key given twice) x access fields (tenant, visibility, roles, status) x
where they are written (front matter, sidecar) x source defaults (a tenant's internal pages, a
tenant's public pages, a shared public source, a shared source of drafts). Each case is one page
that was first indexed with good metadata (the source's defaults) and then given the odd value,
and one page that arrives with the odd value. After the second ingestion every page is searched
for (its own unique words, through the real hybrid retrieval with the caller's filters) as several
callers: another tenant's customer, the same tenant's employee, anonymous, and an employee who may
read drafts. A leak is a page returned to a caller its good metadata does not admit.

Used by the tests (rag_pipeline_tests/core/ingestion/test_access_fails_closed.py) and by
benchmarks/guarantees.py, which writes the counts into docs/guarantees.md.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rag_pipeline.config import ChunkingConfig, LifecycleConfig, RetrievalConfig, SourceConfig, SourceDefaults
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store

FIELDS = ("tenant", "visibility", "roles", "status")
WHERE = ("front matter", "sidecar")
# Source defaults: name -> the `defaults:` of the source.
SOURCE_DEFAULTS: dict[str, dict] = {
    "acme_internal": {"tenant": "acme", "visibility": "internal", "roles": ["employee"]},
    "acme_public": {"tenant": "acme"},
    "shared_public": {},
    "shared_drafts": {"status": "draft"},
}
# A value of a field that is of the wrong type but not falsy: a list where one value is due.
_LIST_OF_ONE = {"tenant": "[acme]", "visibility": "[internal]", "status": "[published]", "roles": "[[employee]]"}
# A key given twice: a restrictive value, then a wider one (PyYAML's safe_load keeps the last).
_TWICE = {"tenant": ("acme", "null"), "visibility": ("internal", "public"), "roles": ("[employee]", "[customer]"),
          "status": ("draft", "published")}
# Odd value label -> the metadata lines that give it to a field.
ODD_VALUES: dict[str, Callable[[str], str]] = {
    "`null`": lambda f: f"{f}: null",
    "`~`": lambda f: f"{f}: ~",
    "`''` (empty text)": lambda f: f"{f}: ''",
    "`no`": lambda f: f"{f}: no",
    "`false`": lambda f: f"{f}: false",
    "`0`": lambda f: f"{f}: 0",
    "`'false'` (quoted)": lambda f: f"{f}: 'false'",
    "`[]`": lambda f: f"{f}: []",
    "a list where one value is due (`[internal]`; roles: `[[employee]]`)": lambda f: f"{f}: {_LIST_OF_ONE[f]}",
    "a mapping (`{name: acme}`)": lambda f: f"{f}: {{name: acme}}",
    "a number (`42`)": lambda f: f"{f}: 42",
    "the key given twice": lambda f: f"{f}: {_TWICE[f][0]}\n{f}: {_TWICE[f][1]}",
}


@dataclass(frozen=True)
class Caller:
    name: str
    tenant: str | None
    roles: tuple[str, ...]
    statuses: tuple[str, ...] = ("published",)

    @property
    def filters(self) -> SearchFilters:
        return SearchFilters(tenant=self.tenant, roles=self.roles, statuses=self.statuses)

    def may_read(self, tenant: str | None, visibility: str, roles: tuple[str, ...], status: str) -> bool:
        """The access rule of the product, written out: what the caller's filters must admit."""
        tenant_ok = tenant is None or tenant == self.tenant
        return tenant_ok and (visibility == "public" or bool(set(roles) & set(self.roles))) and status in self.statuses


CALLERS = (
    Caller("another tenant's customer", "globex", ("customer",)),
    Caller("same tenant's employee", "acme", ("employee",)),
    Caller("anonymous", None, ()),
    Caller("employee reading drafts", "acme", ("employee",), ("published", "draft")),
)


@dataclass(frozen=True)
class Page:
    """One probe page: where its odd value is, and whether it was indexed good first."""

    source: str
    field: str
    odd: str
    where: str
    was_good: bool
    rel_path: str
    words: str  # unique to this page: what a search for it asks

    @property
    def doc_id(self) -> str:
        return f"{self.source}:{self.rel_path}"


@dataclass
class ProbeReport:
    backend: str
    pages: list[Page] = field(default_factory=list)
    searches: int = 0
    # (page, caller) pairs where the page came back to a caller its good metadata does not admit.
    leaks: dict[tuple[str, str], str] = field(default_factory=dict)
    # Pages whose good version an admitted caller could not find: the probes would prove nothing.
    not_found: list[str] = field(default_factory=list)
    # Per page: "error" (refused, with the reason) or "accepted"; and what is served of it.
    outcome: dict[str, str] = field(default_factory=dict)
    reason: dict[str, str] = field(default_factory=dict)
    served_meta: dict[str, tuple | None] = field(default_factory=dict)
    good_meta: dict[str, tuple] = field(default_factory=dict)

    def outcome_table(self) -> list[dict[str, str]]:
        """Per odd value, per field: what a page given it gets, over every source and place."""
        rows = []
        for odd in ODD_VALUES:
            row = {"value": odd}
            for name in FIELDS:
                pages = [p for p in self.pages if p.odd == odd and p.field == name]
                errors = [p for p in pages if self.outcome[p.doc_id] == "error"]
                accepted = sorted({p.source for p in pages if self.outcome[p.doc_id] == "accepted"})
                if len(errors) == len(pages):
                    row[name] = "error"
                elif errors:
                    row[name] = "error; accepted under " + ", ".join(accepted)
                else:
                    row[name] = "accepted"
            rows.append(row)
        return rows


def _words(index: int) -> str:
    """Three made-up words no other page holds (BM25 finds the page by them)."""
    letters = string.ascii_lowercase
    code = "".join(letters[(index // 26**i) % 26] for i in range(3))
    return f"zorblat{code} quenvix{code} drumhal{code}"


def probe_pages() -> list[Page]:
    pages = []
    for source in SOURCE_DEFAULTS:
        for field_name in FIELDS:
            for odd_index, odd in enumerate(ODD_VALUES):
                for where in WHERE:
                    for was_good in (True, False):
                        tag = f"{field_name}-{odd_index:02d}-{'fm' if where == 'front matter' else 'sc'}-" \
                              f"{'changed' if was_good else 'new'}"
                        pages.append(Page(source, field_name, odd, where, was_good, f"{tag}.md", _words(len(pages))))
    return pages


def _body(page: Page) -> str:
    return f"# Probe {page.rel_path}\n\nThis page is about {page.words} and nothing else.\n"


def write_corpus(root: Path, pages: list[Page], odd: bool) -> None:
    """The sources' folders: with `odd`, every page carries its odd value (new pages appear);
    without, the pages that were good first are written with no metadata of their own."""
    for page in pages:
        folder = root / page.source
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / page.rel_path
        sidecar = folder / (page.rel_path + ".meta.yaml")
        if not odd:
            if page.was_good:
                path.write_text(_body(page))
            continue
        lines = ODD_VALUES[page.odd](page.field)
        if page.where == "front matter":
            path.write_text(f"---\n{lines}\n---\n{_body(page)}")
        else:
            path.write_text(_body(page))
            sidecar.write_text(lines + "\n")


def _sources(root: Path) -> list[SourceConfig]:
    return [SourceConfig(name=name, path=root / name, defaults=SourceDefaults(**defaults))
            for name, defaults in SOURCE_DEFAULTS.items()]


def run_probes(store: Store, embedder: Embedder, root: Path, backend: str) -> ProbeReport:
    """Index the good corpus, give every page its odd value, index again, search as every caller."""
    pages = probe_pages()
    report = ProbeReport(backend, pages)
    chunking, lifecycle = ChunkingConfig(), LifecycleConfig()
    write_corpus(root, pages, odd=False)
    for source in _sources(root):
        ingest_source(source, store, embedder, chunking, lifecycle, "probe-good")
    good = report.good_meta = _served_meta(store)
    write_corpus(root, pages, odd=True)
    for source in _sources(root):
        ingest_source(source, store, embedder, chunking, lifecycle, "probe-odd")
    served = _served_meta(store)
    failures = {}
    for source in SOURCE_DEFAULTS:
        failures.update({doc_id: row["reason"] for doc_id, row in store.ledger.failures(source).items()})
    for page in pages:
        report.outcome[page.doc_id] = "error" if page.doc_id in failures else "accepted"
        report.reason[page.doc_id] = failures.get(page.doc_id, "")
        report.served_meta[page.doc_id] = served.get(page.doc_id)
    retriever = Retriever(store, embedder, RetrievalConfig(k=10))
    queries = [p.words for p in pages]
    by_doc = {p.doc_id: p for p in pages}
    for caller in CALLERS:
        results = retriever.search_many(queries, [caller.filters] * len(queries), "hybrid")
        report.searches += len(queries)
        for page, result in zip(pages, results):
            returned = {hit.doc_id for hit in result.hits}
            for doc_id in returned:
                # The rule is judged on the good metadata (the source's defaults): the odd value must not widen it.
                intended = good.get(doc_id) or _defaults_meta(by_doc[doc_id].source)
                if not caller.may_read(*intended):
                    report.leaks.setdefault((doc_id, caller.name), f"{doc_id} returned to {caller.name} for {page.words!r} "
                                                                   f"(served as {served.get(doc_id)})")
            intended = good.get(page.doc_id)
            if intended is not None and caller.may_read(*intended) and page.doc_id not in returned:
                report.not_found.append(f"{page.doc_id} not found by {caller.name}")
    return report


def _defaults_meta(source: str) -> tuple:
    """(tenant, visibility, roles, status) a page of the source gets from the defaults alone."""
    defaults = SOURCE_DEFAULTS[source]
    visibility = defaults.get("visibility", "public")
    roles = tuple(defaults.get("roles") or (("employee",) if visibility == "internal" else ()))
    return defaults.get("tenant"), visibility, roles, defaults.get("status", "published")


def _served_meta(store: Store) -> dict[str, tuple]:
    """doc id -> (tenant, visibility, roles, status) of what is served now."""
    served = {}
    for source in SOURCE_DEFAULTS:
        for row in store.served.indexed_documents(source):
            served[row["doc_id"]] = (row["tenant"], row["visibility"], tuple(row["roles"] or ()), row["status"])
    return served
