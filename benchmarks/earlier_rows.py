"""Rows a run did not measure, kept from the section now on the page with the run that measured them.

A script whose section holds one table row per (size, method) can be re-run for some of them (a
million chunks, one method) without losing the others. Each such table ends with a `measured`
column: `this run` for the rows of the run that writes the section, and, for a row kept from an
earlier section, that run's date, commit and command (from the section's stamp, or from the row
itself when it was kept before). Only the script's own section is read; nothing is typed in by hand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

THIS_RUN = "this run"
# The stamp `write_section` puts under a section's heading: the command, the date, the commit (sections
# written before the commit was stamped have none).
_STAMP = re.compile(r"^`(?P<command>[^`\n]*)`, (?P<date>\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC)(?:, commit (?P<commit>[^,\s]+))?,",
                    re.MULTILINE)


def section(script: str, page: Path) -> str | None:
    """The text of `script`'s section on `page`, or None when the page has none."""
    if not page.exists():
        return None
    found = re.search(rf"<!-- {re.escape(script)} -->\n(.*?)<!-- /{re.escape(script)} -->", page.read_text(), re.DOTALL)
    return found.group(1) if found else None


def earlier_run(text: str) -> str:
    """How a kept row names the run that measured it: its date, commit and command."""
    stamp = _STAMP.search(text)
    if stamp is None:
        return "an earlier run (not stamped)"
    commit = f"commit {stamp['commit']}" if stamp["commit"] else "commit not recorded"
    return f"{stamp['date']}, {commit}, `{stamp['command']}`"


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split(" | ")]


def with_earlier_rows(table: Sequence[str], earlier: str | None, key_cells: int) -> list[str]:
    """`table` (header, separator, this run's rows: markdown lines without the `measured` column) with
    that column added, and after its rows those of the same table in `earlier` (a section's text,
    found by the same header) whose first `key_cells` cells this run did not measure."""
    header, rule, *rows = table
    out = [f"{header} measured |", f"{rule}---|", *(f"{row} {THIS_RUN} |" for row in rows)]
    if not earlier:
        return out
    lines = earlier.splitlines()
    width = len(cells(header))
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if start is None:
        return out
    measured = {tuple(cells(row)[:key_cells]) for row in rows}
    run = earlier_run(earlier)
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        row = cells(line)
        if tuple(row[:key_cells]) in measured:
            continue
        if len(row) == width:  # written before the column existed: the section's own run
            out.append(f"{line.rstrip()} {run} |")
        elif len(row) == width + 1 and row[-1] != THIS_RUN:  # kept before: it names its run
            out.append(line.rstrip())
        elif len(row) == width + 1:
            out.append(f"| {' | '.join(row[:-1])} | {run} |")
    return out


def kept_keys(table: Sequence[str], key_cells: int) -> set[tuple[str, ...]]:
    """The keys of the rows of a merged table that an earlier run measured."""
    return {tuple(cells(row)[:key_cells]) for row in table[2:] if cells(row)[-1] != THIS_RUN}
