"""The model on ONNX Runtime: tokenized by `tokenizers`, pooled as the model folder says.

The transformer itself is the ONNX graph exported from the model's weights (`onnx_export`); what
sentence-transformers does around it (lower-casing, truncation to the token limit, padding to the
longest text of a batch, pooling, normalising) is done here as its config files describe it
(`model_folder.ModelLayout`). Whether the result equals the library's is checked once per model,
at export, and by a test on real texts.

Threads: one text (a query) runs on one thread, since on a busy machine a thread team costs more
than it saves on so little work; batches use every CPU this process may run on. Idle pool
threads sleep instead of spinning, so the parser worker beside an ingestion keeps its core.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag_pipeline.core.embedding.model_folder import ModelLayout, UnsupportedModel, read_json
from rag_pipeline.core.embedding.onnx_optimized import create_session

# The inputs a Hugging Face encoder takes, in the order they are given to the exported graph.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class EngineLoadError(RuntimeError):
    """ONNX Runtime could not load the exported model file (damaged, or of another ONNX version)."""

    def __init__(self, model_file: Path, reason: str) -> None:
        super().__init__(f"ONNX Runtime cannot load {model_file} ({reason})")
        self.model_file = model_file


def bulk_threads() -> int:
    """Threads for a batch: the CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class OnnxEncoder:
    """Sentence vectors from an exported transformer (`model_file`) and its folder's `layout`."""

    def __init__(self, model_file: Path, layout: ModelLayout, batch_size: int = 32) -> None:
        from tokenizers import Tokenizer

        self.model_file = Path(model_file)
        self.layout = layout
        self.batch_size = batch_size
        self._tokenizer = Tokenizer.from_file(str(layout.tokenizer_file))
        # The file's own padding, as the tokenizer read it (not the file parsed a second time).
        padding = self._tokenizer.padding or {}
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(layout.max_seq_length, direction=layout.truncation_side)
        pad_token = _pad_token(self._tokenizer, layout, padding.get("pad_token"))
        self._tokenizer.enable_padding(pad_id=self._tokenizer.token_to_id(pad_token), pad_token=pad_token,
                                       direction=layout.padding_side)
        self._sessions: dict[int, object] = {}
        self._lock = threading.Lock()

    def session(self, threads: int):
        """The ONNX Runtime session with `threads` intra-op threads (made on first use)."""
        with self._lock:
            if threads not in self._sessions:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                # Memory patterns pre-plan a run's buffers for inputs of one shape; batches differ
                # in length, so they only held a quarter more memory (1,051 MB against 787 MB
                # peak for 320 passages), at the same speed.
                options.enable_mem_pattern = False
                try:
                    # From the graph optimized once and saved beside the export (onnx_optimized.py).
                    self._sessions[threads] = create_session(self.model_file, options, ["CPUExecutionProvider"])
                except Exception as exc:  # noqa: BLE001 - ONNX Runtime's load errors share no type
                    raise EngineLoadError(self.model_file, str(exc).strip().splitlines()[0][:300]) from exc
            return self._sessions[threads]

    @property
    def dimension(self) -> int:
        with self._lock:
            made = next(iter(self._sessions.values()), None)
        hidden = (made or self.session(1)).get_outputs()[0].shape[-1]
        return int(hidden) * len(self.layout.pooling)

    def encode(self, texts: Sequence[str], normalize: bool) -> np.ndarray:
        """float32 matrix, one row per text, in the order given."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        session = self.session(1 if len(texts) == 1 else bulk_threads())
        # Longest first, as the library batches: texts of a batch are padded to its longest.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        rows: list[np.ndarray] = []
        for start in range(0, len(order), self.batch_size):
            batch = [texts[i] for i in order[start : start + self.batch_size]]
            rows.append(self._encode_batch(session, batch))
        vectors = np.empty((len(texts), rows[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(rows)
        if normalize or self.layout.normalize:
            vectors = _l2_normalised(vectors)
        return vectors

    def _encode_batch(self, session, texts: list[str]) -> np.ndarray:
        if self.layout.do_lower_case:
            texts = [text.lower() for text in texts]
        encodings = self._tokenizer.encode_batch(texts)
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        feeds = {given.name: arrays[given.name] for given in session.get_inputs()}
        tokens = session.run(None, feeds)[0]
        return pool(np.asarray(tokens, dtype=np.float32), arrays["attention_mask"], self.layout.pooling)


def pool(tokens: np.ndarray, mask: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """sentence-transformers' Pooling over (batch, tokens, hidden) token vectors, padding masked out:
    each mode's vector, concatenated in the order given."""
    weights = mask[..., None].astype(np.float32)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    pooled = []
    for mode in modes:
        if mode == "cls":  # the first real token (padding may be on the left)
            pooled.append(tokens[np.arange(len(tokens)), mask.argmax(axis=1)])
        elif mode == "max":
            pooled.append(np.where(weights > 0, tokens, -np.inf).max(axis=1))
        elif mode == "mean":
            pooled.append((tokens * weights).sum(axis=1) / counts)
        elif mode == "mean_sqrt_len_tokens":
            pooled.append((tokens * weights).sum(axis=1) / np.sqrt(counts))
        else:
            raise UnsupportedModel(f"pooling mode {mode!r}")
    return np.concatenate(pooled, axis=1).astype(np.float32, copy=False)


def _l2_normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows divided by their length, as torch's `F.normalize` does (a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def _pad_token(tokenizer, layout: ModelLayout, own: str | None = None) -> str:
    """The tokenizer's padding token: `own` (its file's padding settings), else the folder's token files."""
    folder = layout.transformer_folder
    candidates = [own, read_json(folder / "tokenizer_config.json").get("pad_token"),
                  read_json(folder / "special_tokens_map.json").get("pad_token")]
    for token in candidates:
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            return token
    raise UnsupportedModel(f"no padding token in {folder} (tokenizer.json, tokenizer_config.json, special_tokens_map.json)")
