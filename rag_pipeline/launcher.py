"""The `rag-pipeline` command's entry: in the warm process when one serves this installation,
else here. Only the standard library is imported before that choice (see `rag_pipeline.warm`)."""

from __future__ import annotations

import sys


def main() -> int:
    from rag_pipeline.warm import run_in_warm_process

    code = run_in_warm_process(sys.argv[1:])
    if code is not None:
        return code
    from rag_pipeline.cli import main as run_here

    return run_here()
