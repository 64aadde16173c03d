"""Real documentation trees for tests, fetched once from PyPI into a cache outside the repository.

A source distribution on PyPI ships its project's docs: `sphinx_docs("click", "8.1.7")` downloads
it with pip (the one network the tests may use), keeps only its `docs/` folder under
`~/.cache/rag_pipeline/corpora/<name>-<version>/` (or `$RAG_PIPELINE_CORPORA`), and returns that
folder on every later call. Nothing of it is committed.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

CORPORA = Path(os.environ.get("RAG_PIPELINE_CORPORA", Path.home() / ".cache" / "rag_pipeline" / "corpora"))


def sphinx_docs(name: str, version: str) -> Path:
    """The `docs/` folder of `name==version`'s source distribution (downloaded on first use)."""
    target = CORPORA / f"{name}-{version}"
    done = target / ".complete"
    if done.exists():
        return target / "docs"
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test processes started at once download it once
        if not done.exists():
            _download(name, version, target)
            done.touch()
    return target / "docs"


def _download(name: str, version: str, target: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
                   f"{name}=={version}", "-d", folder]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            done = None
        archives = list(Path(folder).glob("*.tar.gz"))
        if done is None or done.returncode != 0 or not archives:
            said = (done.stderr.strip().splitlines() or ["no output"])[-1] if done is not None else "timed out after 600 s"
            pytest.fail(f"could not download the source distribution of {name}=={version} from PyPI with pip "
                        f"(its docs/ folder is this test's corpus): {said}. With no access to PyPI, extract the sdist's "
                        f"docs/ folder to {target / 'docs'} and create {target / '.complete'}")
        with tarfile.open(archives[0]) as archive:
            prefix = f"{archives[0].name[: -len('.tar.gz')]}/docs/"
            members = [m for m in archive.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
            for member in members:
                member.name = "docs/" + member.name[len(prefix):]
            archive.extractall(target, members=members, filter="data")
