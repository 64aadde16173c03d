"""The undo actions as jobs an operator launches from the UI's launchpad, without a shell: restore a
source's index state (and pin it), unpin, disable, enable. Each does what `rag-pipeline index` does
(`core/ingestion/undo.py`) and says so on the source's search_index partition."""

import dagster as dg

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.gating.baselines import baseline_index_state
from rag_pipeline.core.ingestion import undo
from rag_pipeline.core.render import printable
from rag_pipeline.defs.common import STORE_POOL
from rag_pipeline.defs.failures import explained
from rag_pipeline.defs.resources import PipelineSettings, StoreResource


class SourceAction(dg.Config):
    """Which source, who acts and why (shown to everyone while it holds)."""

    source: str
    by: str
    reason: str = ""


class RestoreAction(SourceAction):
    # A state id (`rag-pipeline index list --source S`), or `baseline`: the state the promoted baseline measured.
    to: str = "baseline"


def _said(context: dg.OpExecutionContext, source_id: str, what: str) -> None:
    context.log.info(what)
    context.log_event(dg.AssetObservation(asset_key="search_index", partition=source_id, description=what))


@dg.op(pool=STORE_POOL)
def restore_state(context: dg.OpExecutionContext, config: RestoreAction, settings: PipelineSettings,
                  store: StoreResource) -> None:
    """Serve a kept state of the source again and pin it there."""
    with explained(context):
        pipeline, db = settings.load(), store.get()
        source_id = pipeline.source(config.source).source_id
        state = undo.resolve(db, source_id, config.to, baseline_index_state(db, pipeline.golden_set))
        done = undo.restore(db, source_id, state, config.by, config.reason)
    _said(context, source_id, printable(done.summary()))


@dg.op(pool=STORE_POOL)
def disable_serving(context: dg.OpExecutionContext, config: SourceAction, settings: PipelineSettings,
                    store: StoreResource) -> None:
    """Serve nothing of the source until it is enabled."""
    with explained(context):
        source_id = settings.load().source(config.source).source_id
        done = undo.disable(store.get(), source_id, config.by, config.reason)
    _said(context, source_id, printable(done.summary()))


@dg.op(pool=STORE_POOL)
def follow_files(context: dg.OpExecutionContext, config: SourceAction, settings: PipelineSettings,
                 store: StoreResource) -> None:
    """Let a pinned or disabled source follow its files again (its next ingestion serves them)."""
    with explained(context):
        source_id = settings.load().source(config.source).source_id
        if store.get().states.pinned(source_id) is None:
            raise InputError(f"source {source_id!r} is not pinned or disabled: nothing to undo")
        pin = undo.unpin(store.get(), source_id)
    _said(context, source_id, f"{source_id} follows its files again ({pin.kind} by {pin.pinned_by} before; now by "
                              f"{printable(config.by)}): its next ingestion serves what they hold")


@dg.job(description="Serve a kept index state of one source again (`to`: a state id, or `baseline`) and pin it "
                    "there, as `rag-pipeline index restore` does.")
def restore_index_state():
    restore_state()


@dg.job(description="Serve nothing of one source (a leak, a poisoned source) until `enable_source`, as "
                    "`rag-pipeline index disable` does.")
def disable_source():
    disable_serving()


@dg.job(description="Let a pinned or disabled source follow its files again, as `rag-pipeline index unpin` and "
                    "`enable` do: its next ingestion serves what they hold.")
def unpin_source():
    follow_files()


undo_jobs = [restore_index_state, disable_source, unpin_source]
