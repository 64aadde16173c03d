"""Reading a source safely: links, loops, special files, limits; nothing outside the root is opened."""

import os

import pytest

from rag_pipeline.core.ingestion.discovery import discover_files
from rag_pipeline.core.ingestion.source_tree import DocumentReadError, SourceTree


@pytest.fixture
def layout(tmp_path):
    root, outside = tmp_path / "src", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / ".versions").mkdir()
    outside.mkdir()
    (root / "page.md").write_text("# Page\n\ntext\n")
    (root / ".versions" / "v3.md").write_text("# Version 3\n\nonly reachable through a link\n")
    (outside / "secret.md").write_text("# Secret\n\nOUTSIDE-MARKER\n")
    os.mkfifo(outside / "pipe.md")
    links = {
        "alias.md": "page.md",                     # inside, target read under its own path
        "current.md": ".versions/v3.md",           # inside, target not walked on its own: read through the link
        "latest.md": ".versions/v3.md",            # a second link to the same target: read once
        "escape.md": "../outside/secret.md",       # leaves the root
        "passwd.md": "/etc/passwd",                # leaves the root
        "to-pipe.md": "../outside/pipe.md",        # a FIFO outside: opening it would hang the run
        "dangling.md": "missing.md",
        "loop-a.md": "loop-b.md",
        "loop-b.md": "loop-a.md",
        "sub/up.md": "../page.md",                 # inside, relative from a subfolder
        "folder": "../outside",                    # a folder link: never walked
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    os.mkfifo(root / "local-pipe.md")
    return root


def _by_path(root, **options):
    return {f.rel_path: f for f in discover_files("s", root, **options)}


def test_links_are_read_only_inside_the_root_and_only_once(layout):
    files = _by_path(layout)
    assert files["page.md"].supported and files["page.md"].error is None
    assert "read under its own path" in files["alias.md"].skip_reason
    assert "read under its own path" in files["sub/up.md"].skip_reason
    assert files["current.md"].supported and files["current.md"].error is None
    assert "already read through current.md" in files["latest.md"].skip_reason
    for name in ("escape.md", "passwd.md", "to-pipe.md"):
        assert "outside the source root: not read" in files[name].skip_reason, name
    assert "dangling symbolic link to missing.md" in files["dangling.md"].error and files["dangling.md"].supported
    assert "symbolic link loop" in files["loop-a.md"].skip_reason
    assert "folders behind links are not walked" in files["folder"].skip_reason
    assert "FIFO" in files["local-pipe.md"].skip_reason
    # Nothing of what lies outside was hashed or described as content.
    assert not any("secret" in f.abs_path for f in files.values() if f.supported)


def test_never_follow_reads_no_link(layout):
    files = _by_path(layout, follow_symlinks="never")
    assert all("follow_symlinks: never" in files[n].skip_reason for n in ("alias.md", "current.md", "escape.md", "dangling.md"))


def test_read_applies_the_same_rules_as_the_walk(layout):
    tree = SourceTree("s", layout)
    assert b"only reachable" in tree.read("current.md")
    for name, reason in [("escape.md", "outside the source root"), ("passwd.md", "outside the source root"),
                         ("dangling.md", "dangling"), ("local-pipe.md", "FIFO"), ("loop-a.md", "loop")]:
        with pytest.raises(DocumentReadError, match=reason):
            tree.read(name)


def test_a_folder_swapped_for_a_link_after_discovery_is_refused(layout, tmp_path):
    (layout / "sub" / "real.md").write_text("# Real\n")
    tree = SourceTree("s", layout)
    assert tree.read("sub/real.md") == b"# Real\n"
    (layout / "sub" / "up.md").unlink()
    (layout / "sub" / "real.md").unlink()
    (layout / "sub").rmdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "real.md").write_text("# Not ours\n")
    os.symlink(tmp_path / "elsewhere", layout / "sub")
    with pytest.raises(DocumentReadError, match="became a symbolic link"):
        tree.read("sub/real.md")


def test_size_limit_fails_the_file_without_reading_it(tmp_path):
    (tmp_path / "big.md").write_bytes(b"# Big\n" + b"x" * 3000)
    (tmp_path / "small.md").write_text("# Small\n")
    files = _by_path(tmp_path, max_file_bytes=1024)
    assert "over the 0.0 MB limit (limits.max_file_mb)" in files["big.md"].error
    assert files["big.md"].content_hash.startswith("unread:")
    assert files["small.md"].error is None


def test_a_file_gone_between_walk_and_read_fails_alone(tmp_path):
    (tmp_path / "a.md").write_text("# A\n")
    tree = SourceTree("s", tmp_path)
    entries, _ = tree.walk()
    (tmp_path / "a.md").unlink()
    with pytest.raises(DocumentReadError, match="vanished"):
        tree.read_entry(entries[0])


def test_a_sidecar_that_links_outside_is_a_metadata_error(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (tmp_path / "meta.yaml").write_text("tenant: acme\n")
    (root / "page.html").write_text("<html><body><h1>P</h1><p>text</p></body></html>")
    os.symlink(tmp_path / "meta.yaml", root / "page.html.meta.yaml")
    [page] = discover_files("s", root)
    assert "outside the source root" in page.error and page.meta.tenant is None


def test_unreadable_folders_are_reported_not_fatal(tmp_path, monkeypatch):
    (tmp_path / "open").mkdir()
    (tmp_path / "open" / "a.md").write_text("# A\n")
    (tmp_path / "closed").mkdir()
    (tmp_path / "closed" / "b.md").write_text("# B\n")
    tree = SourceTree("s", tmp_path)
    original = os.scandir

    def refuse(path="."):
        if str(path).endswith("closed"):
            raise PermissionError(13, "Permission denied", str(path))
        return original(path)

    monkeypatch.setattr(os, "scandir", refuse)
    entries, unreadable = tree.walk()
    assert [e.rel_path for e in entries] == ["open/a.md"]
    assert unreadable == ["closed"]


def test_a_file_with_several_names_is_skipped_unless_the_source_allows_hard_links(tmp_path):
    root, outside = tmp_path / "src", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nwritten from outside the root\n")
    os.link(outside / "secret.md", root / "linked.md")
    os.symlink("linked.md", root / "alias.md")
    (root / "page.html").write_text("<html><body><h1>P</h1><p>text</p></body></html>")
    (outside / "meta.yaml").write_text("tenant: acme\n")
    os.link(outside / "meta.yaml", root / "page.html.meta.yaml")
    (root / "plain.md").write_text("# Plain\n\none name only\n")
    files = {f.rel_path: f for f in discover_files("s", root)}
    assert not files["linked.md"].supported
    assert files["linked.md"].skip_reason.startswith(
        "linked.md is a hard link (2 names for one file): its other names may lie outside the source root")
    assert "set allow_hard_links: true on the source" in files["linked.md"].skip_reason
    assert not files["alias.md"].supported and "linked.md is a hard link" in files["alias.md"].skip_reason
    assert "page.html.meta.yaml is a hard link" in files["page.html"].error and files["page.html"].meta.tenant is None
    assert files["plain.md"].supported and files["plain.md"].error is None
    with pytest.raises(DocumentReadError, match="hard link"):
        SourceTree("s", root).read("linked.md")
    # Allowed explicitly: each name is read (the symbolic link once, as the file is read under its own path).
    allowed = {f.rel_path: f for f in discover_files("s", root, allow_hard_links=True)}
    assert allowed["linked.md"].supported and allowed["linked.md"].error is None
    assert allowed["page.html"].error is None and allowed["page.html"].meta.tenant == "acme"
    assert "read under its own path" in allowed["alias.md"].skip_reason


def test_a_file_its_owner_may_not_read_is_asked_about(tmp_path, monkeypatch):
    """The walk trusts the owner's read bit of a file of this user without a call; a file without it
    (or of another user) is asked of the system, and one the system refuses fails with the reason."""
    from rag_pipeline.core.ingestion import source_tree

    (tmp_path / "open.md").write_text("# Open\n")
    (tmp_path / "closed.md").write_text("# Closed\n")
    (tmp_path / "closed.md").chmod(0o200)
    asked = []
    def access(path, mode):  # the root is readable, every file asked about is refused
        if os.path.isdir(path):
            return True
        asked.append(os.path.basename(path))
        return False

    monkeypatch.setattr(source_tree.os, "access", access)
    entries = {e.rel_path: e for e in SourceTree("s", tmp_path).walk()[0]}
    assert asked == ["closed.md"]
    assert entries["open.md"].error is None
    assert "permission denied" in entries["closed.md"].error
