"""Scoring retrieval: metrics of one query, the per-case results and their aggregates, run files."""
