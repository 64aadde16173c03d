"""Plain-Python logic of rag_pipeline. Never imports dagster (a test checks it)."""
