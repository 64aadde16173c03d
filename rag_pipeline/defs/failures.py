"""Failures the data causes, shown as Dagster failures with their reason, not as stack traces.

A source that vanished, a golden file with a bad line, a store that is busy: these are facts about
the data and the deployment, and the on-call person needs their words, not the code's. Inside
`explained`, such an error becomes a `dg.Failure` whose description is the error's text (the
run's failure headline) and whose metadata says where; the asset partition also gets an
observation carrying the same reason, so its page says why it failed, not only "Run failed", and
the run a tag with it (`rag_pipeline/failure`), which the runs list shows.
Any other exception is a bug and keeps its stack trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import dagster as dg

from rag_pipeline.config import ConfigError
from rag_pipeline.core.evaluation.evaluate import EvaluationError
from rag_pipeline.core.evaluation.golden.cases import GoldenSetError
from rag_pipeline.core.evaluation.golden.holdout import HoldoutError
from rag_pipeline.core.ingestion.source_tree import SourceUnavailableError
from rag_pipeline.core.render import cut, printable
from rag_pipeline.core.storage import SourceBusyError
from rag_pipeline.core.storage.schema import SchemaError
from rag_pipeline.core.storage.store import StoreConfigError
from rag_pipeline.defs.common import tag_failure

# Errors that describe the data or the deployment. Core raises ValueError (and its subclasses)
# for bad input by convention, and FileNotFoundError/PermissionError for files it was told to
# read; a KeyError reaches here only from a lookup by a configured name (a source partition that
# left the config).
DOMAIN_ERRORS: tuple[type[BaseException], ...] = (
    SourceUnavailableError, SourceBusyError, GoldenSetError, EvaluationError, HoldoutError, ConfigError,
    StoreConfigError, SchemaError, FileNotFoundError, PermissionError, ValueError, KeyError,
)
MAX_DESCRIPTION_CHARS = 2000


def reason_of(error: BaseException) -> str:
    """The error's own words, one printable line (a KeyError's message without its quotes)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return cut(printable(text or type(error).__name__), MAX_DESCRIPTION_CHARS)


@contextmanager
def explained(context: dg.AssetExecutionContext,
              details: Callable[[], Mapping[str, object]] | None = None) -> Iterator[None]:
    """Turn a domain error raised inside into a `dg.Failure` of this asset, with its reason and
    `details()` (what is still served, where the source lives...) as metadata."""
    try:
        yield
    except dg.Failure:
        raise
    except DOMAIN_ERRORS as error:
        reason = reason_of(error)
        metadata: dict[str, object] = {"reason": dg.MetadataValue.text(reason),
                                       "error": dg.MetadataValue.text(type(error).__name__)}
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
