"""Failures the data causes, shown as Dagster failures with their reason, not as stack traces.

A source that vanished, a golden file with a bad line, a store that is busy: these are facts about
the data and the deployment (`core/errors.py`: a `DomainError`), and the on-call person needs their
words, not the code's. Inside `explained`, such an error becomes a `dg.Failure` whose description
is the error's text (the run's failure headline) and whose metadata says where and carries the
step's outcome; the asset partition also gets an observation carrying the same reason, so its page
says why it failed, not only "Run failed", and the run a tag with it (`rag_pipeline/failure`),
which the runs list shows. Any other exception is a bug and keeps its stack trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import dagster as dg

from rag_pipeline.core.errors import DomainError
from rag_pipeline.core.outcomes import StepOutcome
from rag_pipeline.core.render import cut, plain_text
from rag_pipeline.defs.common import tag_failure
from rag_pipeline.defs.metadata import outcome as outcome_metadata

MAX_DESCRIPTION_CHARS = 2000


def reason_of(error: BaseException) -> str:
    """The error's own words as plain text (its lines kept, other control characters escaped), cut to
    what a description shows."""
    return cut(plain_text(str(error) or type(error).__name__), MAX_DESCRIPTION_CHARS)


@contextmanager
def explained(context: dg.AssetExecutionContext,
              details: Callable[[], Mapping[str, object]] | None = None) -> Iterator[None]:
    """Turn a domain error raised inside into a `dg.Failure` of this asset, with its reason, its
    outcome (`core/outcomes.py`) and `details()` (what is still served, where the source lives...)
    as metadata. Any other exception passes through: a bug keeps its stack trace, and Dagster's
    retry policy applies to it."""
    try:
        yield
    except dg.Failure:
        raise
    except DomainError as error:
        reason = reason_of(error)
        outcome = StepOutcome.of_error(error, reason)
        metadata: dict[str, object] = {"reason": dg.MetadataValue.text(reason),
                                       "fault": dg.MetadataValue.text(outcome.fault), **outcome_metadata(outcome)}
        if details is not None:
            try:
                metadata |= dict(details())
            except Exception as extra:  # noqa: BLE001 - the details are a courtesy; the reason must get out
                metadata["details_unavailable"] = dg.MetadataValue.text(reason_of(extra))
        for key in context.selected_asset_keys:
            context.log_event(dg.AssetObservation(
                asset_key=key, partition=context.partition_key if context.has_partition_key else None,
                description=f"failed: {reason}", metadata=metadata,
            ))
        tag_failure(context, reason)
        raise dg.Failure(description=reason, metadata=metadata, allow_retries=False) from None
