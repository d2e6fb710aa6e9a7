"""Clipped cosine similarity (``proxy.memory.vectors``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.memory.vectors import clip_similarity, similarities, similarity


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 0], [1, 0], 1.0),
        ([1, 0], [0, 1], 0.0),
        ([1, 0], [-1, 0], 0.0),
        ([3, 4], [0.6, 0.8], 1.0),
    ],
)
def test_similarity_is_a_clipped_cosine(a: list[float], b: list[float], expected: float) -> None:
    assert similarity(np.asarray(a, dtype=np.float32), b) == pytest.approx(expected, abs=1e-6)


def test_similarities_match_one_at_a_time() -> None:
    query = np.asarray([0.6, 0.8], dtype=np.float32)
    rows = [[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0], [0.0, 0.0]]
    assert similarities(query, rows) == pytest.approx([similarity(query, r) for r in rows])
    assert similarities(query, []) == []


@given(st.floats(-10, 10))
def test_clip_similarity_stays_in_unit_range(score: float) -> None:
    assert 0.0 <= clip_similarity(score) <= 1.0
