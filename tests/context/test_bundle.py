"""Table and property tests for the bundle accumulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.bundle import (
    AddResult,
    BundleAccumulator,
    BundleConfig,
    ContextItem,
    calculate_priority_score,
    calculate_recency_score,
)
from proxy.errors import ConfigError

NOW = datetime(2026, 1, 15, tzinfo=UTC)


def item(name: str, salience: float, age_days: float = 0.0) -> ContextItem:
    return ContextItem(name, f"content {name}", salience, NOW - timedelta(days=age_days))


@pytest.mark.parametrize(
    ("config", "max_items", "threshold"),
    [
        (BundleConfig.default(), 20, 0.1),
        (BundleConfig.token_efficient(), 10, 0.3),
        (BundleConfig.comprehensive(), 50, 0.0),
        (BundleConfig(15, 0.6, 0.3, 0.3, 14.0), 15, 0.3),
    ],
)
def test_presets(config: BundleConfig, max_items: int, threshold: float) -> None:
    assert (config.max_items, config.min_salience_threshold) == (max_items, threshold)
    acc = BundleAccumulator(config, now=NOW)
    for n in range(100):
        acc.add(item(str(n), 0.5 + n / 1000))
    assert len(acc.to_bundle()) == max_items


@pytest.mark.parametrize(
    ("bad", "param"),
    [({"max_items": 0}, "max_items"), ({"recency_half_life_days": 0}, None)],
)
def test_invalid_config_is_rejected(bad: dict[str, float], param: str | None) -> None:
    with pytest.raises(ConfigError) as raised:
        BundleConfig(**bad)  # type: ignore[arg-type]
    assert raised.value.param == param


def test_add_results_cover_every_outcome() -> None:
    acc = BundleAccumulator(BundleConfig(max_items=2, min_salience_threshold=0.2), now=NOW)
    assert acc.add(item("a", 0.5)) is AddResult.ADDED
    assert acc.add(item("b", 0.6)) is AddResult.ADDED
    assert acc.add(item("low", 0.1)) is AddResult.REJECTED_BELOW_THRESHOLD
    assert acc.add(item("c", 0.3)) is AddResult.REJECTED_LOWEST_PRIORITY
    assert acc.add(item("d", 0.9)) is AddResult.ADDED_WITH_EVICTION
    assert [i.id for i in acc.to_bundle()] == ["d", "b"]
    assert [(i.id, r) for i, r in acc.dropped()] == [
        ("low", AddResult.REJECTED_BELOW_THRESHOLD),
        ("c", AddResult.REJECTED_LOWEST_PRIORITY),
        ("a", AddResult.ADDED_WITH_EVICTION),
    ]
    stats = acc.stats()
    assert (stats.size, stats.total_seen, stats.added, stats.evicted) == (2, 5, 3, 1)
    assert (stats.rejected_below_threshold, stats.rejected_lowest_priority) == (1, 1)
    assert AddResult.ADDED_WITH_EVICTION.accepted
    assert not AddResult.REJECTED_LOWEST_PRIORITY.accepted


@pytest.mark.parametrize(
    ("age_days", "half_life", "expected"),
    [(0, 7, 1.0), (7, 7, 0.5), (14, 7, 0.25), (14, 14, 0.5), (-3, 7, 1.0)],
)
def test_recency_half_life(age_days: float, half_life: float, expected: float) -> None:
    created = NOW - timedelta(days=age_days)
    assert calculate_recency_score(created, NOW, half_life) == pytest.approx(expected)


def test_unknown_age_is_neutral() -> None:
    assert calculate_recency_score(None, NOW, 7.0) == 0.5


def test_priority_combines_recency_and_salience() -> None:
    config = BundleConfig(recency_weight=0.6, salience_weight=0.3)
    assert calculate_priority_score(item("x", 0.8, 7.0), config, NOW) == pytest.approx(
        0.6 * 0.5 + 0.3 * 0.8
    )


def test_recent_item_beats_stale_one_with_more_salience() -> None:
    config = BundleConfig(max_items=1, recency_weight=0.6, salience_weight=0.3)
    bundle = BundleAccumulator.from_items(
        [item("old", 0.9, 60), item("new", 0.7, 0)], config, now=NOW
    )
    assert [i.id for i in bundle] == ["new"]


saliences = st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=60)


@given(saliences, st.integers(min_value=1, max_value=15))
def test_bundle_keeps_the_top_priorities_sorted(values: list[float], cap: int) -> None:
    config = BundleConfig(max_items=cap, recency_weight=0.0, salience_weight=1.0)
    items = [item(str(n), v) for n, v in enumerate(values)]
    acc = BundleAccumulator(config, now=NOW)
    for one in items:
        acc.add(one)
    bundle = acc.to_bundle()
    kept = [i.salience for i in bundle if i.salience >= 0.1]
    eligible = sorted((v for v in values if v >= 0.1), reverse=True)
    assert kept == eligible[:cap]
    assert len(bundle) == min(cap, len(eligible))
    assert len(bundle) + len(acc.dropped()) == len(values)
