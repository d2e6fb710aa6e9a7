"""Reciprocal rank fusion: Qdrant's formula, deterministic ties, and agreement with the shard."""

from __future__ import annotations

from pathlib import Path

import pytest
import qdrant_edge as qe
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import ConfigError
from proxy.memory import lexical
from proxy.memory.edge import EdgeStore
from proxy.memory.edge_query import scope_filter
from proxy.memory.fusion import RRF_K, fuse_ranks, fused_keys
from proxy.memory.points import DENSE_VECTOR, SPARSE_VECTOR
from proxy.memory.store import SearchQuery
from tests.memory.support import record, vector_for, vectors_for

K = 60


@pytest.mark.parametrize(
    ("rankings", "limit", "expected"),
    [
        ([], 5, []),
        ([["a", "b"]], 5, [("a", 1 / 60), ("b", 1 / 61)]),
        ([["a", "b"], ["b", "a"]], 5, [("a", 1 / 60 + 1 / 61), ("b", 1 / 61 + 1 / 60)]),
        ([["a", "b"], ["c", "b"]], 5, [("b", 2 / 61), ("a", 1 / 60), ("c", 1 / 60)]),
        ([["a", "b", "c"], ["d"]], 2, [("a", 1 / 60), ("d", 1 / 60)]),
        ([["a", "a", "b"]], 5, [("a", 1 / 60), ("b", 1 / 62)]),  # a repeat counts once
        ([["a"]], 0, []),
    ],
)
def test_fuse_ranks(
    rankings: list[list[str]], limit: int, expected: list[tuple[str, float]]
) -> None:
    got = fuse_ranks(rankings, k=K, limit=limit)
    assert [key for key, _ in got] == [key for key, _ in expected]
    assert [score for _, score in got] == pytest.approx([score for _, score in expected])


def test_the_constant_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        fuse_ranks([["a"]], k=0, limit=1)


rankings_strategy = st.lists(st.lists(st.integers(0, 30), max_size=20, unique=True), max_size=4)


@given(rankings_strategy, st.integers(0, 40))
def test_fusion_properties(rankings: list[list[int]], limit: int) -> None:
    got = fuse_ranks(rankings, k=K, limit=limit)
    keys = [key for key, _ in got]
    everything = {key for ranking in rankings for key in ranking}
    assert len(keys) == len(set(keys)) == min(limit, len(everything))
    scores = [score for _, score in got]
    assert scores == sorted(scores, reverse=True)
    for key, score in got:
        expected = sum(1 / (K + r.index(key)) for r in rankings if key in r)
        assert score == pytest.approx(expected)
    # Nothing left out scores higher than what was kept.
    if got:
        full = dict(fuse_ranks(rankings, k=K, limit=len(everything)))
        assert all(full[key] <= scores[-1] + 1e-12 for key in everything - set(keys))


async def test_python_fusion_scores_equal_the_shards_fused_query(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=32)
    try:
        topics = ["weather", "music", "travel to Nairobi", "dogs", "the deadline with Ben"]
        records = [
            record(f"m{i}", content=f"note {i} about {topics[i % len(topics)]} and item {i % 7}")
            for i in range(120)
        ]
        await store.add(records, vectors_for(records))
        shard = store._shard  # comparing against the engine itself
        for text in ["what about Nairobi", "Ben deadline", "item 3 music", "dogs and weather"]:
            query = SearchQuery(vector_for(text), text, "u1", None, 20)
            scope = scope_filter("t1", query)
            dense = qe.Query.Nearest(query.vector.tolist(), using=DENSE_VECTOR)
            indices, values = lexical.encode_query(text)
            sparse = qe.Query.Nearest(qe.SparseVector(indices, values), using=SPARSE_VECTOR)
            fused = shard.query(
                qe.QueryRequest(
                    limit=20,
                    prefetches=[
                        qe.Prefetch(limit=20, query=dense, filter=scope),
                        qe.Prefetch(limit=20, query=sparse, filter=scope),
                    ],
                    query=qe.Fusion.Rrf(k=RRF_K),  # type: ignore[arg-type]
                )
            )
            branches = [
                [str(p.id) for p in shard.query(qe.QueryRequest(limit=20, query=q, filter=scope))]
                for q in (dense, sparse)
            ]
            mine = dict(fuse_ranks(branches, k=RRF_K, limit=10_000))
            assert fused
            for point in fused:  # every fused score equals ours (ties may order differently)
                assert mine[str(point.id)] == pytest.approx(point.score, abs=1e-6)
    finally:
        await store.close()


def fused_one_key_at_a_time(rankings: list[list[int]], k: int) -> list[tuple[int, float]]:
    """The plain per-key loop ``fuse_ranks`` must equal to the bit."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        seen: set[int] = set()
        for rank, key in enumerate(ranking):
            if key not in seen:
                seen.add(key)
                scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


@given(st.lists(st.lists(st.integers(0, 30), max_size=20), max_size=4), st.integers(0, 40))
def test_fusion_equals_the_per_key_sums_exactly(rankings: list[list[int]], limit: int) -> None:
    """Same keys, same order, same floats (repeats within a ranking included): a search's
    results must not move when fusion gets faster."""
    assert fuse_ranks(rankings, k=K, limit=limit) == fused_one_key_at_a_time(rankings, K)[:limit]


unique_ranking = st.lists(st.integers(0, 30), max_size=45, unique=True)


@given(unique_ranking, unique_ranking, st.integers(0, 50))
def test_fused_keys_are_the_keys_of_fuse_ranks(
    dense: list[int], lexical: list[int], limit: int
) -> None:
    """A hybrid search's two branches (keys without repeats, as dicts' keys): the same keys
    in the same order, ties included, as the general fusion."""
    expected = [key for key, _ in fuse_ranks([dense, lexical], k=K, limit=limit)]
    assert fused_keys(dict.fromkeys(dense), dict.fromkeys(lexical), k=K, limit=limit) == expected


def test_fused_keys_take_a_positive_constant_only() -> None:
    with pytest.raises(ConfigError):
        fused_keys(["a"], ["b"], k=0, limit=1)
