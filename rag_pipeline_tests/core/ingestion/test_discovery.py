from datetime import date

import pytest

from rag_pipeline.core.ingestion.discovery import (
    SourceUnavailableError,
    diff_manifest,
    discover_beir_corpus,
    discover_files,
    meta_to_json,
    split_front_matter,
)
from rag_pipeline.core.ingestion.lifecycle import mass_deletion_refusal
from rag_pipeline.core.models import ManifestDiff
from rag_pipeline_tests.conftest import write_tree


def test_ids_types_metadata_and_skips(tmp_path):
    write_tree(tmp_path, {
        "guide/intro.md": "---\ntitle: Intro\ntenant: acme\nstatus: superseded\neffective_date: 2024-01-31\n---\n# Hi\n",
        "page.html": "<html><body><h1>P</h1></body></html>",
        "page.html.meta.yaml": "visibility: internal\nroles: [support]\n",
        "logo.png": b"\x89PNG\r\n",
        "style.css": "body{}",
        ".hidden.md": "x",
        ".git/config": "ignored folder",
        "orphan.pdf.meta.yaml": "title: nothing here",
        "partials/nav.html": '{% import "nav-item.html" as item %}\n<nav>{{ config.site_name }}</nav>',
        "jinja-help.html": "<html><body><p>Use loops:</p><pre>{% for x in items %}{{ x }}{% endfor %}</pre></body></html>",
    })
    files = {f.rel_path: f for f in discover_files("docs", tmp_path)}
    assert set(files) == {"guide/intro.md", "page.html", "logo.png", "style.css", ".hidden.md", "orphan.pdf.meta.yaml",
                          "partials/nav.html", "jinja-help.html"}
    assert "template" in files["partials/nav.html"].skip_reason
    assert files["jinja-help.html"].supported  # template syntax inside a code sample is content
    intro = files["guide/intro.md"]
    assert intro.doc_id == "docs:guide/intro.md" and intro.supported and intro.file_type == "md"
    assert (intro.meta.title, intro.meta.tenant, intro.meta.status) == ("Intro", "acme", "superseded")
    assert intro.meta.effective_date == date(2024, 1, 31)
    assert files["page.html"].meta.visibility == "internal" and files["page.html"].meta.roles == ("support",)
    assert "unsupported file type '.png'" in files["logo.png"].skip_reason
    assert files[".hidden.md"].skip_reason == "hidden file"
    assert "sidecar" in files["orphan.pdf.meta.yaml"].skip_reason


def test_source_defaults_apply_and_internal_pages_need_a_role(tmp_path):
    write_tree(tmp_path, {"a.md": "# A\n", "b.md": "---\nvisibility: public\n---\n# B\n"})
    files = {f.rel_path: f for f in discover_files("hb", tmp_path, {"visibility": "internal"})}
    assert files["a.md"].meta.visibility == "internal" and files["a.md"].meta.roles == ("employee",)
    assert files["b.md"].meta.visibility == "public"


def test_bad_metadata_is_a_per_document_error_with_the_reason(tmp_path):
    write_tree(tmp_path, {"a.md": "---\nstatus: archived\n---\n# A\n", "b.md": "---\ntitle: [unclosed\n---\n", "c.md": "# fine"})
    files = {f.rel_path: f for f in discover_files("s", tmp_path)}
    assert "status is 'archived', not one of published" in files["a.md"].error
    assert "not valid YAML at line" in files["b.md"].error
    assert files["c.md"].error is None


def test_a_byte_order_mark_does_not_hide_front_matter(tmp_path):
    # Read as body text, this front matter would serve an HR page of tenant acme to everyone.
    page = "---\nvisibility: internal\nroles: [hr]\ntenant: acme\n---\n# Salaries\n\nSalary bands.\n"
    write_tree(tmp_path, {"bom.md": b"\xef\xbb\xbf" + page.encode(), "utf16.md": page.encode("utf-16")})
    for name, item in {f.rel_path: f for f in discover_files("s", tmp_path)}.items():
        assert (item.meta.visibility, item.meta.roles, item.meta.tenant, item.error) == ("internal", ("hr",), "acme", None), name


@pytest.mark.parametrize(("front_matter", "reason"), [
    ("visiblity: internal\nroles: [hr]", "key 'visiblity' looks like 'visibility'"),
    ("Visibility: internal\nroles: [hr]", "key 'Visibility' looks like 'visibility'"),
    ("tennant: acme", "key 'tennant' looks like 'tenant'"),
    ("role: hr\nvisibility: internal", "key 'role' looks like 'roles'"),
    ("roles: [hr]", "roles ['hr'] on a public document restrict nothing"),
])
def test_a_misspelt_or_contradictory_access_field_is_an_error_not_a_public_page(tmp_path, front_matter, reason):
    write_tree(tmp_path, {"a.md": f"---\n{front_matter}\n---\n# A\n\ntext\n", "b.md": "---\ntags: [x]\n---\n# B\n"})
    files = {f.rel_path: f for f in discover_files("s", tmp_path)}
    assert reason in files["a.md"].error
    assert files["b.md"].error is None  # other keys of a page's own are its business


def test_front_matter_reports_the_lines_it_used():
    meta, body, lines = split_front_matter("---\na: 1\nb: 2\n---\n# Title\ntext\n")
    assert meta == {"a": 1, "b": 2} and body.startswith("# Title") and lines == 4
    with pytest.raises(ValueError, match="never closed"):
        split_front_matter("---\na: 1\n")


def test_diff_against_previous_manifest(tmp_path):
    write_tree(tmp_path, {"same.md": "# same", "edited.md": "# new text", "new.md": "# new", "meta.md": "---\ntenant: x\n---\n# m"})
    files = discover_files("s", tmp_path)
    by_id = {f.doc_id: f for f in files}
    previous = {
        "s:same.md": (by_id["s:same.md"].content_hash, meta_to_json(by_id["s:same.md"].meta)),
        "s:edited.md": ("old-hash", meta_to_json(by_id["s:edited.md"].meta)),
        "s:meta.md": (by_id["s:meta.md"].content_hash, "{}"),
        "s:gone.md": ("h", "{}"),
    }
    diff = diff_manifest(files, previous)
    assert diff == ManifestDiff(("s:new.md",), ("s:edited.md", "s:meta.md"), ("s:same.md",), ("s:gone.md",))


def test_missing_root_fails_before_anything_happens(tmp_path):
    with pytest.raises(SourceUnavailableError, match="does not exist"):
        discover_files("s", tmp_path / "unmounted")


@pytest.mark.parametrize(("deleted", "kept", "refused"), [(6, 4, True), (4, 6, False), (10, 0, True), (5, 5, False)])
def test_mass_deletion_guard_per_run(deleted, kept, refused):
    diff = ManifestDiff((), (), tuple(f"s:k{i}" for i in range(kept)), tuple(f"s:d{i}" for i in range(deleted)))
    served = {*diff.unchanged, *diff.deleted}
    reason = mass_deletion_refusal("s", diff, served, 0.5)
    assert (reason is not None) == refused
    if refused:
        assert "Nothing was deleted" in reason and "s:d0" in reason


def test_the_guard_counts_served_documents_not_failed_ones():
    # 10 served and 10 broken files that never served; 8 served ones go: 80% of what is served,
    # though only 40% of the manifest.
    served = {f"s:good{i}" for i in range(10)}
    diff = ManifestDiff((), (), ("s:good8", "s:good9", *(f"s:bad{i}" for i in range(10))),
                        tuple(f"s:good{i}" for i in range(8)))
    assert "8 of 10 served documents would be deleted" in mass_deletion_refusal("s", diff, served, 0.5)
    # Broken files that were never served may go without the guard: nothing served is lost.
    gone_broken = ManifestDiff((), (), tuple(sorted(served)), tuple(f"s:bad{i}" for i in range(10)))
    assert mass_deletion_refusal("s", gone_broken, served, 0.5) is None


def test_beir_corpus_records_become_documents(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "title": "T", "text": "body"}\nnot json\n{"_id": "d2", "text": "x"}\n')
    files = discover_beir_corpus("sci", corpus)
    assert [f.doc_id for f in files] == ["sci:d1", "sci:line-2", "sci:d2"]
    assert files[0].inline_title == "T" and files[0].inline_text == "body"
    assert "line 2" in files[1].error


def test_a_beir_line_over_what_its_text_limit_allows_is_not_read(tmp_path):
    import tracemalloc

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"_id": "d1", "text": "fine"}\n{"_id": "big", "text": "' + b"x" * 20_000_000 + b'"}\n'
                       b'{"_id": "d2", "text": "also fine"}\n')
    tracemalloc.start()
    try:
        files = discover_beir_corpus("sci", corpus, max_text_chars=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [f.doc_id for f in files] == ["sci:d1", "sci:line-2", "sci:d2"]
    assert "line 2: a line of 19.1 MB, over the 70 KB a record within the text limit" in files[1].error
    assert peak < 4 * 1024 * 1024, peak


def _files(tmp_path, names: list[str]):
    write_tree(tmp_path / "src", {name: f"# {name}\n\nSome text of {name}.\n" for name in names})
    return discover_files("docs", tmp_path / "src", exclude=["drafts/*"])


@pytest.mark.parametrize(("names", "refused"), [
    (["a.md"] + [f"p{n}.rst.bak" for n in range(10)], "10 of 11 files are of types this pipeline does not read: .bak 10"),
    (["a.md", "b.md"] + [f"i{n}.dat" for n in range(9)], None),  # most, but fewer than 10 of them
    (["a.md", "b.md"] + [f"_static/i{n}.{s}" for n in range(10) for s in ("png", "css", "js", "woff2")], None),  # assets never count
    (["a.md", "b.md", "LICENSE"], None),  # one of three
    (["LICENSE", "NOTICE"], "2 of 2 files are of types this pipeline does not read: (no extension) 2"),  # nothing readable
    ([f"p{n}.md" for n in range(10)] + [f"i{n}.dat" for n in range(10)], None),  # exactly half is not most
    (["a.md"] + [f"drafts/p{n}.foo" for n in range(30)], None),  # excluded files are never counted
    ([".gitignore", ".nojekyll", "a.md"] + [f"i{n}.dat" for n in range(10)], "10 of 13 files"),  # hidden files count as files
    (["a.md", "logo.png"] + [f"i{n}.dat" for n in range(10)], "10 of 11 files"),  # an asset is in neither count
])
def test_a_source_of_mostly_unread_types_is_refused(tmp_path, names, refused):
    from rag_pipeline.core.ingestion.discovery import refuse_mostly_unsupported

    files = _files(tmp_path, names)
    if refused is None:
        refuse_mostly_unsupported("docs", files, 0.5, 10)
        return
    with pytest.raises(SourceUnavailableError) as raised:
        refuse_mostly_unsupported("docs", files, 0.5, 10)
    assert refused in str(raised.value) and "nothing was changed" in str(raised.value)
    refuse_mostly_unsupported("docs", files, 1.0, 10)  # a share of 1: never refused


def test_the_refusal_names_the_exclude_patterns_that_silence_it(tmp_path):
    from rag_pipeline.core.ingestion.discovery import refuse_mostly_unsupported

    files = _files(tmp_path, ["a.md", "Makefile"] + [f"d/p{n}.rst.txt.foo" for n in range(6)] + [f"i{n}.DAT" for n in range(4)]
                   + ["i.dat"])
    with pytest.raises(SourceUnavailableError) as raised:
        refuse_mostly_unsupported("docs", files, 0.5, 10)
    assert ("source 'docs': 12 of 13 files are of types this pipeline does not read: .foo 6, .dat 5, (no extension) 1; "
            "exclude them in the source's config (exclude: ['*.foo', '*.dat', '*.DAT', 'Makefile']) or convert them") \
        in str(raised.value)
    import fnmatch

    for item in files:  # each pattern excludes what it names, at any depth (as the walk matches them)
        if not item.supported:
            assert any(fnmatch.fnmatchcase(item.rel_path, p) for p in ("*.foo", "*.DAT", "*.dat", "Makefile")), item.rel_path
