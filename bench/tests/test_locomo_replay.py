"""Tests of the replay's token-table embedder (another static model beside the shipped one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.locomo_replay import TableEmbedder


def test_table_embedder_pools_token_rows_and_normalises(tmp_path: Path) -> None:
    """A text is the normalised mean (so also sum) of its tokens' rows; no tokens: the zero row."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "cat": 1, "dog": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    table = np.array([[0, 0, 0], [3, 0, 0], [0, 4, 0]], dtype=np.float16)
    save_file({"embedding.weight": table}, str(tmp_path / "weights.safetensors"))
    embedder = TableEmbedder(tmp_path / "tokenizer.json", tmp_path / "weights.safetensors")

    vectors = embedder.embed_sync(["cat dog", "dog", ""])

    assert embedder.dimensions == 3
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors[0], [0.6, 0.8, 0.0], atol=1e-6)  # (1.5, 2) normalised
    np.testing.assert_allclose(vectors[1], [0.0, 1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(vectors[2], [0.0, 0.0, 0.0])
