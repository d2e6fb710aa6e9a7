"""``bench/memory_costs.py`` re-runs the store's search step by step: it must find what the store
finds, or its per-part timings describe some other search."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench import memory_costs
from bench import pipeline as bench_pipeline
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.store import SearchQuery

QUESTIONS = (
    "What did I tell you about my trip to Lisbon?",
    "Remind me what Ben said about the budget.",
    "Which hotels options did we discuss for the Osaka project?",
)


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder:
    return StaticEmbedder()


async def test_search_parts_finds_what_the_store_finds(
    tmp_path: Path, embedder: StaticEmbedder
) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=embedder.dimensions)
    try:
        tenant = bench_pipeline.bench_tenant()
        await bench_pipeline.seed_store(store, embedder, tenant, 400, "synthetic")
        scope = memory_costs.Scope(store, Counter(), 400)
        for question in QUESTIONS:
            vector = embedder.embed_sync([question])[0]
            expected = store.search_sync(
                tenant, SearchQuery(vector, question, "", None, 50), vector
            )
            hits, parts, facts = memory_costs.search_parts(
                scope, embedder, question, 50, None, max_df=1.0
            )
            assert [h.record.id for h in hits] == [c.record.id for c in expected]
            assert [h.similarity for h in hits] == pytest.approx([c.similarity for c in expected])
            assert set(parts) == {
                "embed",
                "encode_query",
                "dense",
                "sparse",
                "fuse_rescore",
                "records",
            }
            assert facts["bm25_terms"] > 0
    finally:
        await store.close()


def test_memo_matcher_finds_the_same_words() -> None:
    words = frozenset({"trip", "lisbon", "budget"})
    plain = memory_costs.plain_query_matcher(words, stemmed=True)
    memo = memory_costs.memo_query_matcher(words, stemmed=True)
    for text in ("Trips to Lisbon, on a budget!", "Café in Lisbon: trip budgets", "nothing here"):
        assert memo(text) == plain(text)


async def test_reopened_scope_meets_no_text_for_the_first_time(
    tmp_path: Path, embedder: StaticEmbedder
) -> None:
    """The profile's store is warmed as a served one: its texts are profiled before a search."""
    from proxy.context.profiles import text_profile

    text_profile.cache_clear()
    scope = await memory_costs.reopened_scope("synthetic", 200, embedder, tmp_path)
    try:
        assert text_profile.cache_info().currsize >= 100  # the warm-up profiled the texts
        misses = text_profile.cache_info().misses
        vector = embedder.embed_sync([QUESTIONS[0]])[0]
        hits = scope.store.search_sync(
            bench_pipeline.bench_tenant(), SearchQuery(vector, QUESTIONS[0], "", None, 50), vector
        )
        text_profile.each([hit.record.content for hit in hits])
        assert text_profile.cache_info().misses == misses
    finally:
        await scope.store.close()


def test_assemble_again_restores_the_pipeline_and_counts_each_call() -> None:
    from proxy.pipeline import pipeline as pipeline_module

    engine = pipeline_module.assemble
    rows = memory_costs.assemble_again("synthetic", 60, 4)
    assert pipeline_module.assemble is engine
    assert [row["requests"] for row in rows] == ["0-1", "1-2", "2-3", "3-4"]
    assert all(row["line_misses"] >= 0 for row in rows)
