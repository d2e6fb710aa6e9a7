"""Cosine similarity as the stores report it: clipped to [0, 1].

Opposite directions are simply unrelated for memory ranking, so a similarity never goes below 0;
stored vectors are normalised, but a query vector need not be.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def clip_similarity(score: float) -> float:
    """Clip a cosine to [0, 1]."""
    return min(1.0, max(0.0, score))


def similarity(query: np.ndarray, stored: Sequence[float] | np.ndarray) -> float:
    """Return the clipped cosine of two vectors."""
    vec = np.asarray(stored, dtype=np.float32)
    norm = float(np.linalg.norm(query)) * float(np.linalg.norm(vec))
    return clip_similarity(float(np.dot(query, vec)) / norm if norm else 0.0)


def similarities(query: np.ndarray, rows: Sequence[Sequence[float]]) -> list[float]:
    """Return the clipped cosines of ``query`` to each row, in one matrix product."""
    if not rows:
        return []
    matrix = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    cosines = (matrix @ query) / np.where(norms > 0, norms, 1.0)
    return [clip_similarity(float(c)) for c in cosines]
