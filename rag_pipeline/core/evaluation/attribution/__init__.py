"""Why it moved: for every golden case whose metric changed against the baseline, the cause, from a
fixed vocabulary (`causes.KINDS`), each proven by a counterfactual.

What changed between the two evaluations is read from the store (`evidence.py`): the case's labels
in the two golden revisions, the recorded settings key by key, the embedder's identity, and each
document's version in the index state each evaluation measured. The candidates for a case are
ordered (`candidates.py`): changes that touch every case first (its labels, a setting, the model),
then the gold document's own fate, then the new or changed documents ranked above the gold, the
highest first, then other changed documents. Each candidate is tested by replaying the case with
that one change undone inside `Store.scratch()` (`replay.py`: the same retrieval, filters, mode and
depth as the evaluation); the first whose replay brings the case back to the baseline's value (or
its first gold document back to the baseline's rank) is its cause. None does: `unexplained`, with
every candidate tried. `attribute.py` runs it; `render.py` shows it.
"""
