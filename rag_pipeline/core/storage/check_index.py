"""The one statement the project runs on Dagster's own storage, kept with the rest of its SQL.

Dagster's check index keeps one run-less row per (asset, check, partition) and inserts without
replacing, so the Dagster layer removes the previous row before it reports a check evaluation
outside any run (`defs/runs.report_runless_check`). The table is Dagster's SQLAlchemy table,
handed in by the caller, so this module imports no Dagster; SQLAlchemy writes the statement for a
SQLite and a PostgreSQL instance alike.
"""

from __future__ import annotations


def delete_runless_check_row(connection, table, asset_key: str, check_name: str, partition: str | None) -> None:
    """Delete the run-less row of `check_name` on `asset_key` (its string form) for `partition`
    from Dagster's check index `table`, through the index `connection`."""
    connection.execute(table.delete().where(
        (table.c.asset_key == asset_key) & (table.c.check_name == check_name)
        & (table.c.run_id == "") & (table.c.partition == partition)))
