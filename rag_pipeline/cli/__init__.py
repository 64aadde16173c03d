"""The command line, one module per command group; `main` builds the parser (`rag-pipeline = rag_pipeline.cli:main`)."""

from rag_pipeline.cli.main import main

__all__ = ["main"]
