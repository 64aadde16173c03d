"""rag_pipeline: a Dagster pipeline that keeps a RAG index honest and measured."""
