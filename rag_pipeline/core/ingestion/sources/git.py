"""A ref of a git repository as a `DocumentSource`.

Everything is read from the repository's objects (`rev-parse`, `ls-tree`, `cat-file`): its working
copy, index and checked-out branch are never read nor touched. A repository given by URL is
mirrored into the source's cache folder (`git clone --mirror`, then `git fetch` each run). Each
document's version is its blob id, so discovery fetches exactly the blobs that differ between the
commit it read last and the one the ref names now (what `git diff` would list; a rename is a
deletion plus an addition, a branch moved back by a force-push just another commit); the commit is
the listing's revision.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from rag_pipeline.config.source_kinds import GitSourceConfig
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.ingestion.sources.base import (
    DocumentReadError,
    DocumentSource,
    FetchedDocument,
    ListedDocument,
    Listing,
    SourceContext,
    SourceUnavailableError,
)

# A URL `git clone` understands (scheme://... or user@host:path); anything else is a local path.
_URL = re.compile(r"^[\w+.-]+://|^[^/]+@[^/]+:")
# A mirror's fetch of a large repository over a slow link may take minutes, never forever.
NETWORK_TIMEOUT_S = 900
LOCAL_TIMEOUT_S = 120
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


class GitRefError(InputError):
    """The configured ref names no commit of the repository (a typo, a branch deleted)."""


class GitSource(DocumentSource):
    """The files under `path` at `ref` of `repo`."""

    def __init__(self, config: GitSourceConfig, context: SourceContext) -> None:
        self.config = config
        self.context = context
        self.location = f"git {config.repo} {config.ref}" + (f":{config.path}" if config.path else "")
        self._git_dir: Path | None = None
        self._batch: subprocess.Popen | None = None

    # ---- the repository ----------------------------------------------------------------------

    def _git(self, *args: str, git_dir: Path | None = None, timeout: float = LOCAL_TIMEOUT_S,
             check: bool = True) -> subprocess.CompletedProcess:
        prefix = ["git", f"--git-dir={git_dir or self._git_dir}"] if (git_dir or self._git_dir) else ["git"]
        try:
            done = subprocess.run([*prefix, *args], capture_output=True, timeout=timeout,
                                  env={**os.environ, **_GIT_ENV}, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SourceUnavailableError(f"source {self.context.source_id!r}: git {args[0]} on {self.config.repo} took "
                                         f"over {timeout:.0f} s; nothing was changed") from None
        except FileNotFoundError:
            raise SourceUnavailableError("git is not installed (no `git` on PATH): a git source cannot be read") from None
        if check and done.returncode != 0:
            raise SourceUnavailableError(
                f"source {self.context.source_id!r}: git {args[0]} failed on {self.config.repo}: "
                f"{done.stderr.decode(errors='replace').strip() or f'exit code {done.returncode}'}; nothing was changed")
        return done

    def _repository(self) -> Path:
        """The git directory to read: the local repository's own, or the source's mirror of a URL."""
        if self._git_dir is not None:
            return self._git_dir
        repo = self.config.repo
        if _URL.match(repo):
            mirror = self.context.cache_dir / "mirror.git"
            if (mirror / "HEAD").exists():
                self._git("fetch", "--prune", "--force", "--quiet", "origin", git_dir=mirror, timeout=NETWORK_TIMEOUT_S)
            else:
                mirror.parent.mkdir(parents=True, exist_ok=True)
                partial = mirror.with_name("mirror.git.partial")
                if partial.exists():
                    import shutil

                    shutil.rmtree(partial)  # a clone killed half way: start again
                self._git("clone", "--mirror", "--quiet", "--", repo, str(partial), timeout=NETWORK_TIMEOUT_S)
                partial.rename(mirror)
            self._git_dir = mirror
            return mirror
        path = Path(repo)
        if not path.exists():
            raise SourceUnavailableError(
                f"source {self.context.source_id!r}: git repository {repo} does not exist (moved, unmounted?); "
                "nothing was deleted; fix git.repo in the config or remove the source")
        done = self._git("-C", str(path), "rev-parse", "--absolute-git-dir", check=False)
        if done.returncode != 0:
            raise SourceUnavailableError(
                f"source {self.context.source_id!r}: {repo} is not a git repository "
                f"({done.stderr.decode(errors='replace').strip()}); nothing was deleted")
        self._git_dir = Path(done.stdout.decode().strip())
        return self._git_dir

    def _commit(self) -> str:
        done = self._git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{self.config.ref}^{{commit}}",
                         check=False)
        if done.returncode != 0:
            branches = self._git("for-each-ref", "--format=%(refname:short)", "--count=20", "refs/heads", "refs/tags",
                                 check=False).stdout.decode().split()
            raise GitRefError(
                f"source {self.context.source_id!r}: ref {self.config.ref!r} names no commit of {self.config.repo} "
                f"(branches and tags: {', '.join(branches) or 'none'}); nothing was deleted; fix git.ref in the config")
        return done.stdout.decode().strip()

    # ---- the interface -------------------------------------------------------------------------

    def list(self) -> Listing:
        self._repository()
        commit = self._commit()
        folder = self.config.path
        if folder and self._git("cat-file", "-e", f"{commit}:{folder}", check=False).returncode != 0:
            raise SourceUnavailableError(
                f"source {self.context.source_id!r}: folder {folder!r} does not exist at {self.config.ref} "
                f"(commit {commit[:12]}) of {self.config.repo}; nothing was deleted; fix git.path, or remove the source")
        args = ["ls-tree", "-r", "-z", "--long", "--full-tree", commit]
        if folder:
            args += ["--", f"{folder}/"]
        out = self._git(*args).stdout
        documents = []
        for record in out.split(b"\0"):
            if not record:
                continue
            info, _, raw_path = record.partition(b"\t")
            mode, kind, blob, size = info.split()
            path = raw_path.decode("utf-8", errors="surrogateescape")
            rel_path = path[len(folder) + 1:] if folder else path
            if kind != b"blob":
                continue  # a submodule is another repository, not a document of this one
            error = None
            if mode == b"120000":
                error = "a symbolic link in the repository: its target is not read"
            elif any("\udc80" <= c <= "\udcff" for c in path):
                error = "its name is not valid UTF-8: rename it"
            documents.append(ListedDocument(rel_path, blob.decode(), int(size) if size != b"-" else None, error=error))
        return Listing(tuple(documents), revision=commit)

    def fetch(self, document: ListedDocument) -> FetchedDocument:
        """The blob `document.version`, through one `git cat-file --batch` kept open."""
        self._repository()
        if self._batch is None:
            self._batch = subprocess.Popen(["git", f"--git-dir={self._git_dir}", "cat-file", "--batch"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           env={**os.environ, **_GIT_ENV})
        assert self._batch.stdin is not None and self._batch.stdout is not None
        self._batch.stdin.write(document.version.encode() + b"\n")
        self._batch.stdin.flush()
        header = self._batch.stdout.readline().split()
        if len(header) != 3 or header[1] != b"blob":
            raise DocumentReadError(f"blob {document.version} is not in the repository (rerun the source)")
        size = int(header[2])
        limit = self.context.max_document_bytes
        if size > limit:
            remaining = size + 1
            while remaining:  # drained, so that the next request reads its own answer
                remaining -= len(self._batch.stdout.read(min(remaining, 1 << 20)))
            raise DocumentReadError(f"{size / 2**20:.1f} MB, over the {limit / 2**20:.1f} MB limit (limits.max_file_mb): not read")
        data = self._batch.stdout.read(size)
        self._batch.stdout.read(1)
        return FetchedDocument(data)

    def close(self) -> None:
        if self._batch is not None:
            self._batch.stdin.close()
            self._batch.wait(timeout=10)
            self._batch = None
