"""`gate waive` and `gate waivers`: exceptions to one gate rule, with an owner, a reason and an end date."""

from __future__ import annotations

import argparse

from rag_pipeline.cli.common import configured_store, gate_policy, print_json
from rag_pipeline.config import PipelineConfig, load_config
from rag_pipeline.core.render import printable, text_table


def _slices(config: PipelineConfig, store) -> set[str]:
    """The slice names the gate may report: the golden file's (its default included) and those of
    every stored evaluation's latest summary."""
    from rag_pipeline.core.evaluation.golden.cases import DEFAULT_SLICE
    from rag_pipeline.core.evaluation.golden.lines import read_golden_lines

    slices = {DEFAULT_SLICE}
    if config.golden_set is not None and config.golden_set.is_file():
        slices |= {str(line.record["slice"]) for line in read_golden_lines(config.golden_set)
                   if line.record is not None and line.record.get("slice")}
    latest = store.records.latest_evaluation()
    if latest is not None:
        slices |= set(store.records.evaluation_summary(latest).get("by_slice", {}))
    return slices


def cmd_waive(args: argparse.Namespace) -> int:
    """Record a waiver of one rule until a day (inclusive, UTC); exit 2 for an unknown rule, a day
    already past, or an empty --by or --reason."""
    from rag_pipeline.core.evaluation.gating.waivers import known_rules, new_waiver, utc_today

    config = load_config(args.config)
    store = configured_store(config)
    known = known_rules(gate_policy(config, args.policy), _slices(config, store))
    waiver = new_waiver(args.rule, args.by, args.reason, args.until, utc_today(), known)
    store.records.add_waiver(waiver.rule, waiver.waived_by, waiver.reason, waiver.until)
    print(f"WAIVED {printable(waiver.rule)}: {printable(waiver.describe())}")
    print("until then its regression is shown as WAIVED and does not fail the gate (nor is it promoted); "
          "after that day the rule gates again")
    return 0


def cmd_waivers(args: argparse.Namespace) -> int:
    """List every waiver, active ones first, then the expired ones."""
    from rag_pipeline.core.evaluation.gating.waivers import Waiver, utc_today, waiver_rows

    store = configured_store(load_config(args.config), read_only=True)
    rows = waiver_rows([Waiver.from_row(row) for row in store.records.waivers()], utc_today())
    if args.json:
        print_json(rows)
    elif rows:
        print(text_table(rows, ["rule", "state", "by", "until", "reason"], max_cell_chars=80))
    else:
        print("no waiver: every rule gates")
    return 0
