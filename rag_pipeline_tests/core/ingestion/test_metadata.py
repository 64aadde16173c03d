"""A document's own metadata: read strictly (a key given twice, oversized blocks) and access fields checked."""

from __future__ import annotations

import re

import pytest

from rag_pipeline.core.ingestion.discovery import discover_files
from rag_pipeline.core.metadata import (
    MAX_FRONT_MATTER_CHARS,
    MAX_SIDECAR_BYTES,
    build_meta,
    split_front_matter,
)
from rag_pipeline_tests.conftest import write_tree

ACME_INTERNAL = {"tenant": "acme", "visibility": "internal", "roles": ("employee",)}


def test_a_key_given_twice_is_an_error_with_the_files_lines(tmp_path):
    write_tree(tmp_path, {
        "fm.md": "---\ntitle: T\nvisibility: internal\nvisibility: public\n---\n# A\n\ntext\n",
        "sc.html": "<html><body><p>x</p></body></html>",
        "sc.html.meta.yaml": "tenant: acme\ntitle: T\ntenant: globex\n",
        "nested.md": "---\nextra:\n  a: 1\n  a: 2\n---\n# A\n\ntext\n",
    })
    files = {f.rel_path: f for f in discover_files("s", tmp_path, ACME_INTERNAL)}
    assert "key 'visibility' is given twice (lines 3 and 4)" in files["fm.md"].error
    assert "sidecar sc.html.meta.yaml" in files["sc.html"].error
    assert "key 'tenant' is given twice (lines 1 and 3)" in files["sc.html"].error
    assert "key 'a' is given twice" in files["nested.md"].error  # anywhere: the last one silently won


def test_a_yaml_merge_key_is_no_duplicate():
    meta, _, _ = split_front_matter("---\nbase: &b {title: A}\n<<: *b\ntitle: B\n---\nbody\n")
    assert meta["title"] == "B"


@pytest.mark.parametrize(("raw", "expected"), [
    ({"roles": "support"}, ("support",)),
    ({"roles": ["support", "support", " hr "]}, ("support", "hr")),
    ({"tenant": " acme "}, ("employee",)),
])
def test_plain_values_are_read_as_written(raw, expected):
    meta = build_meta({"visibility": "internal", **raw}, ACME_INTERNAL)
    assert meta.roles == expected and meta.tenant == "acme" and meta.visibility == "internal"


@pytest.mark.parametrize(("raw", "reason"), [
    ({"roles": "employee, hr"}, "write the roles as a list"),
    ({"roles": ["employee", None]}, "role 2 of roles is null"),
    ({"tenant": "None"}, "tenant is 'None', not a name"),
    ({"visibility": "Internal"}, "visibility is 'Internal', not one of public, internal"),
    ({"stauts": "draft"}, "key 'stauts' looks like 'status'"),
])
def test_values_that_are_no_names_or_slips_are_errors(raw, reason):
    with pytest.raises(ValueError, match=reason):
        build_meta(raw, ACME_INTERNAL)


def test_tenant_null_means_shared_only_where_the_source_is_shared():
    assert build_meta({"tenant": None}, {}).tenant is None  # the sample corpus's documented convention
    with pytest.raises(ValueError, match="would share the page with every tenant"):
        build_meta({"tenant": None}, ACME_INTERNAL)


def test_front_matter_is_read_within_its_limit_only(tmp_path):
    body = "# Big\n\n" + "words " * (MAX_FRONT_MATTER_CHARS // 3)
    unclosed = "---\ntitle: T\n" + body
    with pytest.raises(ValueError, match="not closed within its first 64 KB"):
        split_front_matter(unclosed)
    meta, rest, lines = split_front_matter("---\ntitle: T\n---\n" + body)  # a long body is no problem
    assert meta == {"title": "T"} and rest == body and lines == 3
    # A closing line that the window cuts in two is not taken for a whole one.
    cut = "---\n" + "a: " + "x" * (MAX_FRONT_MATTER_CHARS - 8) + "\n----- more\n"
    with pytest.raises(ValueError, match="not closed"):
        split_front_matter(cut)


def test_a_sidecar_over_its_limit_is_an_error_of_its_document(tmp_path):
    write_tree(tmp_path, {"a.md": "# A\n\ntext\n", "a.md.meta.yaml": "title: " + "x" * MAX_SIDECAR_BYTES + "\n",
                          "b.md": "# B\n\ntext\n"})
    files = {f.rel_path: f for f in discover_files("s", tmp_path)}
    assert "sidecar a.md.meta.yaml is 256 KB, over the 256 KB limit for metadata: not read" in files["a.md"].error
    assert files["b.md"].error is None


def test_a_control_character_in_metadata_fails_its_document_alone(tmp_path):
    # An ESC from a pasted terminal colour code, a BEL: YAML's reader refuses them before parsing.
    write_tree(tmp_path, {
        "colour.md": "---\ntitle: T\ntenant: \x1b[31macme\x1b[0m\n---\n# A\n\ntext\n",
        "bell.html": "<html><body><p>x</p></body></html>",
        "bell.html.meta.yaml": "title: Bell\nroles: [employee\x07]\n",
        "fine.md": "---\ntitle: Fine\n---\n# B\n\ntext\n",
    })
    files = {f.rel_path: f for f in discover_files("s", tmp_path, ACME_INTERNAL)}
    assert files["colour.md"].error == (
        "metadata: front matter holds the control character U+001B (ESC) at line 3, column 9, which YAML cannot "
        "read: delete it (a terminal colour code pasted with the text?) and run again")
    assert ("sidecar bell.html.meta.yaml holds the control character U+0007 (BEL) at line 2, column 17"
            in files["bell.html"].error)
    assert files["fine.md"].error is None and files["fine.md"].meta.title == "Fine"
    # A document whose metadata failed is read again next time: none of them is carried over.
    assert files["colour.md"].stat_key is None and files["bell.html"].stat_key is None


@pytest.mark.parametrize(("text", "where"), [
    ("a: 1\nb: x\x00y\n", "U+0000 (NUL) at line 2, column 5"),
    ("\x7f: 1\n", "U+007F (DEL) at line 1, column 1"),
    ("a: '\ufffe'\n", "the character U+FFFE at line 1, column 5"),
])
def test_a_character_yaml_cannot_read_is_named_with_its_line(text, where):
    from rag_pipeline.core.metadata import load_mapping

    with pytest.raises(ValueError, match=f"^sidecar x holds .*{re.escape(where)}, which YAML cannot read: delete it"):
        load_mapping(text, "sidecar x")
