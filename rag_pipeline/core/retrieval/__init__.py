"""Retrieval over a store's served index: dense, BM25, fusion and filters; used by ingestion's probe, evaluation and monitoring."""
