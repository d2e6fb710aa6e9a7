"""Property tests for the bundle stage on whole lists (``shortlist``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from proxy.context.bundle import AddResult, BundleAccumulator, ContextItem
from proxy.context.shortlist import BundleConfig, priorities_of, shortlist

NOW = datetime(2026, 1, 15, tzinfo=UTC)
# Few distinct values, so priorities tie and the arrival order has to break the ties.
SALIENCES = st.lists(
    st.sampled_from([0.0, 0.1, 0.15, 0.5, 0.9]) | st.floats(min_value=0.0, max_value=1.0),
    max_size=30,
)


@given(
    SALIENCES,
    st.integers(min_value=1, max_value=12),
    st.sampled_from([0.0, 0.2]),
    st.sampled_from([0.0, 0.3]),
)
def test_shortlist_equals_one_accumulator_add_per_item(
    saliences: list[float], max_items: int, floor: float, recency_weight: float
) -> None:
    config = BundleConfig(
        max_items=max_items,
        recency_weight=recency_weight,
        salience_weight=0.9,
        min_salience_threshold=floor,
    )
    items = [ContextItem(str(i), "", s, NOW - timedelta(days=i)) for i, s in enumerate(saliences)]
    accumulator = BundleAccumulator(config, now=NOW)
    results = [accumulator.add(item) for item in items]
    created = [item.created_at for item in items]
    picked = shortlist(saliences, priorities_of(saliences, created, config, NOW), config)
    assert picked.stats == accumulator.stats()
    assert picked.kept == sorted(int(item.id) for item in accumulator.to_bundle())
    eligible = [r for r in results if r is not AddResult.REJECTED_BELOW_THRESHOLD]
    if len(eligible) <= max_items:  # the case shortlist settles without a heap
        assert all(r is AddResult.ADDED for r in eligible)


@given(SALIENCES, st.sampled_from([0.0, 0.3]))
def test_priorities_of_equals_the_accumulators_priority(
    saliences: list[float], recency_weight: float
) -> None:
    config = BundleConfig(recency_weight=recency_weight, salience_weight=0.7)
    items = [ContextItem(str(i), "", s, NOW - timedelta(days=i)) for i, s in enumerate(saliences)]
    accumulator = BundleAccumulator(config, now=NOW)
    created = [item.created_at for item in items]
    expected = [accumulator.priority(item) for item in items]
    assert priorities_of(saliences, created, config, NOW) == expected
