"""A model folder's own files say how its vectors are made; what the ONNX engine cannot follow is named."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from rag_pipeline.config import DEFAULT_MODEL
from rag_pipeline.core.embedding.model_folder import UnsupportedModel, read_layout, resolve_model_path
from rag_pipeline.core.embedding.onnx_engine import pool

BUNDLED = Path(resolve_model_path(DEFAULT_MODEL))


@pytest.fixture
def model(tmp_path) -> Path:
    """The bundled model's small files, copied (the weights are not needed to read a layout)."""
    folder = tmp_path / "model"
    shutil.copytree(BUNDLED, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    return folder


def _edit(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_the_bundled_model_is_mean_pooled_normalised_and_cut_at_256_tokens():
    layout = read_layout(BUNDLED)
    assert (layout.pooling, layout.normalize, layout.max_seq_length, layout.do_lower_case) == (("mean",), True, 256, False)
    assert read_layout(BUNDLED, max_seq_length=16).max_seq_length == 16


def test_pooling_is_read_in_both_config_spellings(model):
    pooling = model / "1_Pooling" / "config.json"
    _edit(pooling, pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    assert read_layout(model).pooling == ("cls",)
    pooling.write_text(json.dumps({"embedding_dimension": 384, "pooling_mode": ["cls", "max"]}))
    assert read_layout(model).pooling == ("cls", "max")


@pytest.mark.parametrize(("change", "reason"), [
    (lambda m: _edit(m / "1_Pooling" / "config.json", pooling_mode="weightedmean"), "pooling mode weightedmean"),
    (lambda m: (m / "modules.json").write_text(json.dumps(
        [*json.loads((m / "modules.json").read_text()), {"idx": 3, "name": "3", "path": "3_Dense",
                                                          "type": "sentence_transformers.models.Dense"}])), "module(s) Dense"),
    (lambda m: (m / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: "}, "default_prompt_name": "query"})), "default prompt 'query'"),
    (lambda m: (m / "tokenizer.json").unlink(), "no tokenizer.json"),
    (lambda m: (m / "modules.json").unlink(), "no modules.json"),
    (lambda m: (m / "modules.json").write_text("{not json"), "is not a list of modules"),
])
def test_what_the_onnx_engine_cannot_follow_is_named(model, change, reason):
    change(model)
    with pytest.raises(UnsupportedModel, match=re.escape(reason)):
        read_layout(model)


def test_a_hub_name_is_not_a_folder_to_export():
    with pytest.raises(UnsupportedModel, match="not a model folder"):
        read_layout("sentence-transformers/some-model-on-a-hub")


def test_pooling_leaves_padding_out():
    # Two texts of three and one tokens; the second is padded with vectors that must not count.
    tokens = np.array([[[1.0, 4.0], [3.0, -2.0], [5.0, 1.0]],
                       [[2.0, 2.0], [100.0, 100.0], [-100.0, -100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    np.testing.assert_allclose(pool(tokens, mask, ["mean"]), [[3.0, 1.0], [2.0, 2.0]])
    np.testing.assert_allclose(pool(tokens, mask, ["max"]), [[5.0, 4.0], [2.0, 2.0]])
    np.testing.assert_allclose(pool(tokens, mask, ["mean_sqrt_len_tokens"]), [[9 / np.sqrt(3), 3 / np.sqrt(3)], [2.0, 2.0]])
    np.testing.assert_allclose(pool(tokens, mask, ["cls", "mean"]), [[1.0, 4.0, 3.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    # Padding on the left: the first real token is the CLS token.
    np.testing.assert_allclose(pool(tokens, np.array([[0, 1, 1], [0, 0, 1]]), ["cls"]), [[3.0, -2.0], [-100.0, -100.0]])
