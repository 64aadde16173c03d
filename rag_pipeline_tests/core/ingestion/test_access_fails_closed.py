"""Access metadata fails closed, through the real ingestion and the real search, on both backends.

The corpus of rag_pipeline_tests/harness/access_probes.py: every odd value x access field x front matter or sidecar x
four kinds of source defaults, each on a page indexed good first and on a page that arrives odd.
Every caller (another tenant's customer, the same tenant's employee, anonymous, an employee who
reads drafts) searches for every page: no page may come back to a caller its good metadata does
not admit, and every page an admitted caller should find must be found (else the probes would
prove nothing).
"""

from __future__ import annotations

import pytest

from rag_pipeline.config import EmbeddingConfig
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline_tests.conftest import BACKENDS, make_store
from rag_pipeline_tests.harness.access_probes import CALLERS, FIELDS, ODD_VALUES, SOURCE_DEFAULTS, WHERE, run_probes

# The one odd value with a documented meaning: `tenant: null` is "shared by all tenants", which a
# shared source's pages are anyway. Everywhere else an odd value is an error of the page.
NULLS = ("`null`", "`~`")
ACCEPTED = {("tenant", null, source) for null in NULLS for source in ("shared_public", "shared_drafts")}


@pytest.fixture(scope="module", params=BACKENDS)
def probes(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"probes_{request.param}")
    store = make_store(request, request.param, folder)
    return run_probes(store, make_embedder(EmbeddingConfig(kind="hashing")), folder / "corpus", request.param)


def test_no_page_reaches_a_caller_its_good_metadata_does_not_admit(probes):
    pages = len(ODD_VALUES) * len(FIELDS) * len(WHERE) * len(SOURCE_DEFAULTS) * 2
    assert len(probes.pages) == pages
    assert probes.searches == pages * len(CALLERS)
    assert not probes.not_found, probes.not_found[:5]
    assert not probes.leaks, list(probes.leaks.values())[:5]


def test_an_odd_value_is_an_error_of_its_page_naming_the_field(probes):
    for page in probes.pages:
        accepted = (page.field, page.odd, page.source) in ACCEPTED
        assert probes.outcome[page.doc_id] == ("accepted" if accepted else "error"), (page, probes.reason[page.doc_id])
        if not accepted:
            assert page.field in probes.reason[page.doc_id], (page, probes.reason[page.doc_id])


def test_the_last_good_version_stays_served_and_an_odd_new_page_is_not_served(probes):
    for page in probes.pages:
        served = probes.served_meta[page.doc_id]
        if probes.outcome[page.doc_id] == "accepted":
            assert served == probes.good_meta.get(page.doc_id, served) and served[0] is None, page
        elif page.was_good:
            assert served == probes.good_meta[page.doc_id], page
        else:
            assert served is None, page


def test_the_outcome_table_is_what_the_pages_got(probes):
    table = {row["value"]: row for row in probes.outcome_table()}
    for null in NULLS:
        assert table[null]["tenant"] == "error; accepted under shared_drafts, shared_public"
    assert all(row[f] == "error" for odd, row in table.items() for f in FIELDS if not (f == "tenant" and odd in NULLS))
