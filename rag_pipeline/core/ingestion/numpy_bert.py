"""A sentence-transformers BERT model run by numpy: a few texts encoded without importing torch.

Importing sentence-transformers (with torch and transformers) costs 5 to 8 s on this machine;
a one-page edit or a single search encodes one to a few texts, which numpy does in milliseconds
from the same weights. This module runs the same computation as the library for the models it
can prove it understands, and says why for any other (`unsupported_reason`): the embedder then
loads the library as before.

The computation, for a BERT encoder followed by mean or CLS pooling (and an optional Normalize):

    x_0  = LayerNorm(word[ids] + position[0..n) + token_type[0])
    per layer l:
      A   = softmax(Q K^T / sqrt(d_head) + mask) V          (12 heads of Q = x W_q + b_q, ...)
      x'  = LayerNorm(x + A W_o + b_o)
      x   = LayerNorm(x' + GELU(x' W_1 + b_1) W_2 + b_2)     GELU(h) = h/2 (1 + erf(h / sqrt 2))
    mean pooling = sum over real tokens of x / their count;   CLS pooling = x[0]

with the tokenizer of the model's own `tokenizer.json`, truncated at max_seq_length (special
tokens included), as the library does. Tests compare its vectors with the library's
(`core/ingestion/test_numpy_bert.py`): they agree within 1e-6. Throughput is about a third of
torch's on long batches, so the embedder only uses it for small jobs (`NUMPY_MAX_TEXTS`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
# Texts per forward pass: sorted by length first, so that a batch pads little.
_BATCH = 16


def _read_json(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def unsupported_reason(folder: str | Path) -> str | None:
    """Why this module cannot run the model in `folder` as the library would, or None if it can.

    Anything it does not recognise is a reason: a model it misread would give other vectors
    under the same identity, silently."""
    folder = Path(folder)
    modules = _read_json(folder / "modules.json")
    if not isinstance(modules, list) or not modules:
        return "no modules.json"
    types = [m.get("type") if isinstance(m, dict) else None for m in modules]
    if types[:2] != [_TRANSFORMER, _POOLING] or any(t != _NORMALIZE for t in types[2:]):
        return f"module stack {types} is not Transformer, Pooling[, Normalize]"
    if modules[0].get("path", "") != "":
        return "the Transformer module is not at the model's root"
    config = _read_json(folder / "config.json")
    if not isinstance(config, dict):
        return "no config.json"
    expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, value in expected.items():
        if config.get(key, value if key == "position_embedding_type" else None) != value:
            return f"config.json {key} is {config.get(key)!r}, not {value!r}"
    pooling = _read_json(folder / modules[1].get("path", "") / "config.json")
    if not isinstance(pooling, dict) or _pooling_mode(pooling) is None:
        return "pooling is not exactly one of mean or CLS"
    settings = _read_json(folder / "sentence_bert_config.json") or {}
    if not isinstance(settings, dict) or settings.get("do_lower_case"):
        return "sentence_bert_config.json lower-cases texts"
    library = _read_json(folder / "config_sentence_transformers.json") or {}
    if not isinstance(library, dict) or library.get("default_prompt_name"):
        return "the model prepends a default prompt"
    for name in ("tokenizer.json", "model.safetensors"):
        if not (folder / name).is_file():
            return f"no {name}"
    return None


def _pooling_mode(pooling: dict) -> str | None:
    modes = [key for key, value in pooling.items() if key.startswith("pooling_mode_") and value is True]
    return {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}.get(modes[0]) if len(modes) == 1 else None


class NumpyBert:
    """The model of a sentence-transformers folder, for `encode` (see the module's docstring)."""

    def __init__(self, folder: str | Path, max_seq_length: int) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(folder)
        reason = unsupported_reason(folder)
        if reason:
            raise ValueError(f"{folder}: {reason}")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        pooling = json.loads((folder / modules[1].get("path", "") / "config.json").read_text(encoding="utf-8"))
        self.pooling = _pooling_mode(pooling)
        self.normalized = len(modules) > 2
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dimension = int(config["hidden_size"])
        self.max_seq_length = min(max_seq_length, int(config.get("max_position_embeddings", max_seq_length)))
        weights = load_file(str(folder / "model.safetensors"))
        # Some exports name the encoder's weights "bert.embeddings...", others "embeddings...".
        self._weights = {name.removeprefix("bert."): value for name, value in weights.items()}
        self._transposed: dict[str, np.ndarray] = {}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)

    def encode(self, texts: Sequence[str], normalize: bool) -> np.ndarray:
        """float32 matrix, one row per text, in the order given."""
        encodings = self.tokenizer.encode_batch([str(t) for t in texts])
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(encodings), self.dimension), dtype=np.float32)
        for start in range(0, len(order), _BATCH):
            rows = order[start : start + _BATCH]
            out[rows] = self._forward([encodings[i] for i in rows])
        if normalize or self.normalized:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out /= np.maximum(norms, 1e-12)
        return out

    def _forward(self, encodings: list) -> np.ndarray:
        w = self._weights
        batch, length = len(encodings), max(len(e.ids) for e in encodings)
        ids = np.zeros((batch, length), dtype=np.int64)
        types = np.zeros((batch, length), dtype=np.int64)
        mask = np.zeros((batch, length), dtype=np.float32)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n], types[row, :n], mask[row, :n] = encoding.ids, encoding.type_ids, encoding.attention_mask
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length][None]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = self._layer_norm(x, "embeddings.LayerNorm")
        heads, width = self.heads, self.dimension // self.heads
        # Padding gets the lowest float32 score: its softmax weight is exactly 0.
        padding = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = 1.0 / math.sqrt(width)  # a Python float: a numpy float64 would turn float32 arrays into float64

        def split(values: np.ndarray, keys: bool = False) -> np.ndarray:
            values = values.reshape(batch, length, heads, width)
            return np.ascontiguousarray(values.transpose(0, 2, 3, 1) if keys else values.transpose(0, 2, 1, 3))

        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"), keys=True)
            v = split(self._linear(x, p + "attention.self.value"))
            scores = (q @ k) * scale + padding
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, heads * width)
            x = self._layer_norm(x + self._linear(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            hidden = self._linear(x, p + "intermediate.dense")
            hidden = 0.5 * hidden * (1.0 + _erf(hidden * (1.0 / math.sqrt(2.0))))
            x = self._layer_norm(x + self._linear(hidden, p + "output.dense"), p + "output.LayerNorm")
        if self.pooling == "cls":
            return x[:, 0]
        return (x * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        # One 2-D product over all tokens (BLAS); the weight is stored (out, in), used as (in, out).
        if name not in self._transposed:
            self._transposed[name] = np.ascontiguousarray(self._weights[name + ".weight"].T)
        shape = x.shape
        product = x.reshape(-1, shape[-1]) @ self._transposed[name] + self._weights[name + ".bias"]
        return product.reshape(*shape[:-1], -1)

    def _layer_norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + self.eps) * self._weights[name + ".weight"] + self._weights[name + ".bias"]


def _erf(values: np.ndarray) -> np.ndarray:
    """erf by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7), evaluated in float32:
    with its rounding, under 6.5e-7 (a grid of 2 million points gives 6.1e-7). numpy has no erf,
    and scipy's costs 0.3 s to import. float64 would cost a 256-token text 40 of its 140 ms, for
    vectors no closer to the library's (both within 2.5e-7 of them on the test texts and 12 httpx passages)."""
    x = np.abs(values)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(values) * (1.0 - poly * np.exp(-x * x))
