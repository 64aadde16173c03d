"""Typed pipeline settings, loaded from one YAML file.

The file is `data/pipeline.yaml` by default, or the path in the environment variable
`RAG_PIPELINE_CONFIG`. Relative paths in the file resolve against the file's own folder, so a
config works from any working directory. An invalid file fails at load with the field and reason.
"""

from rag_pipeline.config.flat import flat_settings, settings_diff
from rag_pipeline.config.limits import DocumentLimits, TypeSizeLimits
from rag_pipeline.config.loading import (
    as_written,
    config_path_from_env,
    load_config,
    parse_source_overrides,
    with_overlay,
)
from rag_pipeline.config.sections import (
    CONFIG_ENV_VAR,
    DEFAULT_CONFIG_PATH,
    DEFAULT_MODEL,
    MAX_CONFIG_BYTES,
    PROJECT_ROOT,
    AnswersConfig,
    AutomationConfig,
    ChunkingConfig,
    ConfigError,
    EmbeddingConfig,
    EvaluationConfig,
    LifecycleConfig,
    MonitoringConfig,
    PipelineConfig,
    RetrievalConfig,
    SourceConfig,
    SourceDefaults,
    StorageConfig,
    slugify_source_id,
)

__all__ = [
    "CONFIG_ENV_VAR", "DEFAULT_CONFIG_PATH", "DEFAULT_MODEL", "MAX_CONFIG_BYTES", "PROJECT_ROOT", "AnswersConfig",
    "AutomationConfig", "ChunkingConfig", "ConfigError", "DocumentLimits", "EmbeddingConfig", "EvaluationConfig",
    "LifecycleConfig", "MonitoringConfig", "PipelineConfig", "RetrievalConfig", "SourceConfig", "SourceDefaults",
    "StorageConfig", "TypeSizeLimits", "as_written", "config_path_from_env", "flat_settings", "load_config",
    "parse_source_overrides", "settings_diff", "slugify_source_id", "with_overlay",
]
