"""Ingestion: a source's files through discovery, parsing, chunking and embedding, then the verified switch."""
