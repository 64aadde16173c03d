"""What the end-to-end tests and the benchmarks start and drive: a real local Dagster deployment
(webserver, daemon, an instance in SQLite or PostgreSQL), Celery workers over a real Redis broker,
the nightly scenario of the bundled sample, and the access-metadata probe corpus.

Imported as the installed package (`rag_pipeline_tests.harness`), never through `sys.path`.
"""
