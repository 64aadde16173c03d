"""Running the command line as a CI job would: a real subprocess, real exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "UNSTRUCTURED_DISABLE_NOTICE": "1"}


def unprivileged_prefix() -> list[str]:
    """A command prefix that takes away root's power to read any file (the tests run as root).

    `setpriv` (util-linux) drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set,
    so the process is bound by file modes like any user, while still owning its files.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("the tests run as root and need setpriv (util-linux) to drop file-read privileges")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: int = 600,
            unprivileged: bool = False, python_options: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """`python [python_options] -m rag_pipeline.cli args` offline (options such as `-X importtime`
    apply to that interpreter only, not to the processes it starts)."""
    full_env = {**os.environ, **OFFLINE, **(env or {})}
    if env is None or "DAGSTER_HOME" not in env:
        full_env.pop("DAGSTER_HOME", None)
    prefix = unprivileged_prefix() if unprivileged else []
    return subprocess.run(
        [*prefix, sys.executable, *python_options, "-m", "rag_pipeline.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=full_env, timeout=timeout,
    )
