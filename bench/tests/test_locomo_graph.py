"""``bench/locomo.py --indexed``: the gate's small store gets a graph holding every point, which
the product layout (its indexing threshold) would leave an exact scan."""

from __future__ import annotations

from pathlib import Path

from bench import locomo
from bench import pipeline as bench_pipeline
from proxy.memory.edge import EdgeStore
from proxy.memory.edge_maintenance import unindexed_points
from proxy.memory.embedders import StaticEmbedder

MEMORIES = 300


async def seeded(where: Path, embedder: StaticEmbedder) -> int:
    """Seed ``where`` (the product layout, then ``optimize``); return its unindexed points."""
    store = await EdgeStore.open(where, dimensions=embedder.dimensions)
    try:
        tenant = bench_pipeline.bench_tenant()
        await bench_pipeline.seed_store(store, embedder, tenant, MEMORIES, "synthetic")
        return unindexed_points(store._shard)
    finally:
        await store.close()


async def test_build_graph_indexes_every_point_of_a_small_store(tmp_path: Path) -> None:
    embedder = StaticEmbedder()
    left_out = await seeded(tmp_path, embedder)
    assert left_out > 0  # the product layout leaves a store this small unindexed

    graph = await locomo.build_graph(tmp_path)

    assert graph["in_graph"] == graph["points"] > 0
    # A server reopens it with the product layout: the graph stays.
    store = await EdgeStore.open(tmp_path, dimensions=embedder.dimensions)
    try:
        assert unindexed_points(store._shard) == 0
    finally:
        await store.close()
