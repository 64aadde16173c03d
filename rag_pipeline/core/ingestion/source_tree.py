"""The safe source tree: a source's files walked without leaving its root, and read within limits.

Links are resolved to real paths: one leaving the root is skipped with the reason, one inside is
read once; loops, folder links, FIFOs and sockets are never opened, and a file is read only if it
is still the regular file discovery saw, and no larger than the source's limit. A file with more
than one name (a hard link, `st_nlink > 1`) may have its other name outside the root, where
anyone who can write there can change what is served: it is skipped with the reason unless the
source allows hard links (`allow_hard_links: true`).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from rag_pipeline.core.errors import UnavailableError

# File types the pipeline reads (parsing.py says how); everything else is recorded as skipped.
SUPPORTED_TYPES: dict[str, str] = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".rst": "rst",
    ".rest": "rst",
    ".ipynb": "ipynb",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}


SIDECAR_SUFFIX = ".meta.yaml"
# The real user the walk's readability check (`os.access`) asks about.
_UID = os.getuid()


class SourceUnavailableError(UnavailableError):
    """The source cannot be trusted for this run (missing, unreadable, emptied, mass deletion, most
    of its files of types the pipeline does not read).

    Raised before anything is written, so the index keeps serving its previous state.
    """


def _is_excluded(rel_path: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(rel_path, pattern) for pattern in patterns)


class DocumentReadError(OSError):
    """One document cannot be read safely; the message is the reason recorded in the ledger."""


@dataclass(frozen=True)
class TreeEntry:
    """One name under a source root, and what may be read for it.

    `real_path` is the file to open (the target of a link inside the root); `skip_reason` marks
    a name that is not a document (a link leaving the root, a folder link, a special file);
    `error` a document that cannot be read (dangling link, permission denied, over the size limit).
    `ctime_ns` and `inode` (of the file read) tell, with size and time, whether it can have changed
    since it was last read (`discovery.stat_key`).
    """

    rel_path: str
    # A string, not a Path: the walk makes one per file, and a Path costs more than the file's stat.
    real_path: str | None
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    inode: int = 0
    link_target: str | None = None
    skip_reason: str | None = None
    error: str | None = None


class SourceTree:
    """Safe access to the files under one source root: nothing outside the root is ever opened.

    Paths are resolved to real paths and checked against the real root; folders that are
    symbolic links are never walked; a link to a file is followed only with
    `follow_symlinks="within_root"` and only when its target lies inside the root; special files
    (FIFOs, sockets, devices) are never opened; files over `max_file_bytes` are never read.
    """

    def __init__(
        self, source_id: str, root: Path, follow_symlinks: str = "within_root",
        max_file_bytes: int | None = None, exclude: Iterable[str] = (), allow_hard_links: bool = False,
    ) -> None:
        self.source_id = source_id
        self.allow_hard_links = allow_hard_links
        self.configured_root = Path(root)
        self.follow_symlinks = follow_symlinks
        self.max_file_bytes = max_file_bytes
        self.exclude = tuple(exclude)
        self.root = Path(os.path.realpath(root))
        self._root = str(self.root)

    def walk(self) -> tuple[list[TreeEntry], list[str]]:
        """Every name under the root in path order, and the folders that could not be listed.

        Hidden folders (`.git`, `.cache`...) are not walked. A link inside the root to a file that
        is discovered under its own path is skipped as a duplicate, and several links to one
        target are read once, through the first.
        """
        _check_root_readable(self.source_id, self.configured_root)
        entries: list[TreeEntry] = []
        unreadable: list[str] = []

        def on_error(error: OSError) -> None:
            if error.filename and Path(error.filename) != self.root:
                unreadable.append(self._rel(Path(error.filename)))
                return
            raise SourceUnavailableError(
                f"source {self.source_id!r}: cannot read {error.filename}: {error.strerror}; nothing was changed"
            ) from error

        root = str(self.root)
        for dirpath, dirnames, filenames in os.walk(root, onerror=on_error):
            folder = Path(dirpath)
            # Relative names by string (a Path per file is most of a walk's time on a large source).
            prefix = "" if dirpath == root else dirpath[len(root) + 1:].replace(os.sep, "/") + "/"
            # Checked once per folder, not once per file (`resolve` checks a single name's folder).
            parent_is_real = os.path.realpath(dirpath) == dirpath
            visible = sorted(d for d in dirnames if not d.startswith("."))
            dirnames[:] = [d for d in visible if not (folder / d).is_symlink()]
            for name in visible:
                if (folder / name).is_symlink():
                    rel = self._rel(folder / name)
                    if not _is_excluded(rel, self.exclude):
                        target = os.readlink(folder / name)
                        entries.append(TreeEntry(rel, None, link_target=target,
                                                 skip_reason=f"symbolic link to a folder ({target}): folders behind links are not walked"))
            for name in sorted(filenames):
                rel = prefix + name
                if not _is_excluded(rel, self.exclude):
                    entries.append(self._resolve(rel, parent_is_real, f"{dirpath}/{name}"))
        return self._read_links_once(entries), sorted(unreadable)

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _read_links_once(self, entries: list[TreeEntry]) -> list[TreeEntry]:
        regular = {e.rel_path for e in entries
                   if e.link_target is None and e.real_path is not None and _is_document_name(e.rel_path)}
        first_reader: dict[str, str] = {}
        result = []
        for entry in entries:
            if entry.link_target is not None and entry.real_path is not None and entry.error is None:
                target_rel = self._rel(Path(entry.real_path))
                if target_rel in regular:
                    entry = replace(entry, real_path=None,
                                    skip_reason=f"symbolic link to {target_rel}, which is read under its own path")
                elif entry.real_path in first_reader:
                    entry = replace(entry, real_path=None, skip_reason=(
                        f"symbolic link to {target_rel}, already read through {first_reader[entry.real_path]}"))
                else:
                    first_reader[entry.real_path] = entry.rel_path
            result.append(entry)
        return result

    def resolve(self, rel_path: str) -> TreeEntry:
        """What `rel_path` is, and which real file (if any) may be read for it."""
        parent = (self.root / rel_path).parent
        return self._resolve(rel_path, os.path.realpath(parent) == str(parent))

    def _resolve(self, rel_path: str, parent_is_real: bool, path: str | None = None) -> TreeEntry:
        path = path or f"{self._root}/{rel_path}"
        # The walk never enters folders behind links; a folder swapped for a link since must not lead out.
        if not parent_is_real:
            return TreeEntry(rel_path, None, error="a folder on its path became a symbolic link; not read")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return TreeEntry(rel_path, None, error="the file vanished while the source was read")
        except OSError as exc:
            return TreeEntry(rel_path, None, error=f"cannot be read: {exc.strerror}")
        if stat.S_ISLNK(st.st_mode):
            return self._resolve_link(rel_path, path)
        if not stat.S_ISREG(st.st_mode):
            return TreeEntry(rel_path, None, skip_reason=f"not a regular file ({_file_kind(st.st_mode)}): never opened")
        if st.st_nlink > 1 and not self.allow_hard_links:
            return TreeEntry(rel_path, None, skip_reason=_hard_link_reason(rel_path, st.st_nlink))
        return self._sized(TreeEntry(rel_path, path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino), st)

    def _resolve_link(self, rel_path: str, path: str) -> TreeEntry:
        target = os.readlink(path)
        if self.follow_symlinks == "never":
            return TreeEntry(rel_path, None, link_target=target,
                             skip_reason=f"symbolic link to {target} (follow_symlinks: never)")
        try:
            real = Path(os.path.realpath(path, strict=True))
        except FileNotFoundError:
            return TreeEntry(rel_path, None, link_target=target, error=f"dangling symbolic link to {target}: the target does not exist")
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return TreeEntry(rel_path, None, link_target=target, skip_reason=f"symbolic link loop ({target})")
            return TreeEntry(rel_path, None, link_target=target, error=f"symbolic link to {target} cannot be resolved: {exc.strerror}")
        if not real.is_relative_to(self.root):
            return TreeEntry(rel_path, None, link_target=target,
                             skip_reason=f"symbolic link to {real}, outside the source root: not read")
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode):
            return TreeEntry(rel_path, None, link_target=target,
                             skip_reason=f"symbolic link to {_file_kind(st.st_mode)} {self._rel(real) or '.'}: not read")
        if st.st_nlink > 1 and not self.allow_hard_links:
            return TreeEntry(rel_path, None, link_target=target,
                             skip_reason=_hard_link_reason(self._rel(real), st.st_nlink))
        return self._sized(TreeEntry(rel_path, str(real), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                                     link_target=target), st)

    def _sized(self, entry: TreeEntry, st: os.stat_result) -> TreeEntry:
        # Known without reading: a file nobody may read is seen by the walk (and so changes the
        # source's fingerprint), not only when a run happens to open it. A file of this process's
        # user with its owner's read bit is readable (the owner's class decides, ACLs included):
        # asked of the system only otherwise, as it is a call per file.
        owned = st.st_uid == _UID and st.st_mode & stat.S_IRUSR
        if not owned and not os.access(entry.real_path, os.R_OK):
            return replace(entry, error="cannot be read: permission denied (check the file's owner and mode)")
        if self.max_file_bytes is not None and entry.size > self.max_file_bytes:
            return replace(entry, error=(
                f"file is {_mb(entry.size)}, over the {_mb(self.max_file_bytes)} limit (limits.max_file_mb): "
                "not read; raise the source's limit or remove the file"))
        return entry

    def exists(self, rel_path: str) -> bool:
        return os.path.lexists(self.root / rel_path)

    def read(self, rel_path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of one document, read through the same checks as the walk; DocumentReadError if not allowed."""
        entry = self.resolve(rel_path)
        if entry.skip_reason or entry.error or entry.real_path is None:
            raise DocumentReadError(entry.error or entry.skip_reason or "not readable")
        return self.read_entry(entry, max_bytes)

    def read_entry(self, entry: TreeEntry, max_bytes: int | None = None) -> bytes:
        limit = max_bytes if max_bytes is not None else self.max_file_bytes
        try:
            # O_NOFOLLOW: a file swapped for a link since it was resolved is refused;
            # O_NONBLOCK: a file swapped for a FIFO cannot hang the run (and is refused below).
            fd = os.open(entry.real_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise DocumentReadError("the file vanished while the source was read") from None
        except PermissionError:
            raise DocumentReadError("cannot be read: permission denied (check the file's owner and mode)") from None
        except OSError as exc:
            raise DocumentReadError(f"cannot be read: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise DocumentReadError(f"not a regular file ({_file_kind(st.st_mode)}): never read")
            data = handle.read() if limit is None else handle.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise DocumentReadError(f"file grew over the {_mb(limit)} limit (limits.max_file_mb) while it was read")
        return data


def name_and_suffix(rel_path: str) -> tuple[str, str]:
    """The file name of a relative POSIX path and its suffix, as `PurePosixPath` gives them (without
    building one: discovery asks for every file of the source on every run)."""
    name = rel_path.rpartition("/")[2]
    dot = name.rfind(".")
    return name, name[dot:] if 0 < dot < len(name) - 1 else ""


def _is_document_name(rel_path: str) -> bool:
    """A name the walk treats as a document: not hidden, not a sidecar, of a supported type."""
    name, suffix = name_and_suffix(rel_path)
    return not name.startswith(".") and not name.endswith(SIDECAR_SUFFIX) and suffix.lower() in SUPPORTED_TYPES


def _hard_link_reason(rel_path: str, links: int) -> str:
    """Why a file with several names is not read, and how to allow it."""
    return (f"{rel_path} is a hard link ({links} names for one file): its other names may lie outside the source "
            "root, where whoever writes there changes what is served; not read. If every name of it is trusted, "
            "set allow_hard_links: true on the source, or copy the file instead of linking it")


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB"


def _check_root_readable(source_id: str, root: Path) -> None:
    if not root.exists():
        raise SourceUnavailableError(
            f"source {source_id!r}: root {root} does not exist (unmounted or moved?); "
            "nothing was deleted; fix the path in the config or remove the source"
        )
    if not root.is_dir():
        hint = "; for a BEIR corpus.jsonl set `kind: beir` on the source" if root.suffix == ".jsonl" else ""
        raise SourceUnavailableError(f"source {source_id!r}: root {root} is not a folder; nothing was changed{hint}")
    if not os.access(root, os.R_OK | os.X_OK):
        raise SourceUnavailableError(f"source {source_id!r}: root {root} is not readable; nothing was changed")
