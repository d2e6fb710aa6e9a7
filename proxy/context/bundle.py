"""Seed compatibility: the bundle accumulator (a Python port of the Rust seed), over the engine.

``BundleAccumulator(config, now=...)`` (``now`` passed in, never read), ``add(item) ->
AddResult``, ``to_bundle() -> list[ContextItem]`` (highest priority first), ``stats() ->
BundleStats``, ``dropped()`` (evicted and rejected items, for explain mode) and
``BundleAccumulator.from_items(items, config, now=...)``. The priority, the admission and
eviction rule and the counters are the engine's (``shortlist``: ``priority``, ``offer``,
``bundle_stats``); this layer keeps the items and reads their loose timestamps (a naive time is
UTC, an ISO string is parsed, anything else is an unknown age).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from proxy.context import shortlist
from proxy.context.ranking import UNKNOWN_AGE_RECENCY
from proxy.context.scorer import parse_time
from proxy.context.shortlist import AddResult, BundleConfig, BundleStats, Entry, bundle_stats, offer

__all__ = [
    "AddResult",
    "BundleAccumulator",
    "BundleConfig",
    "BundleStats",
    "ContextItem",
    "ContextItemType",
    "calculate_priority_score",
    "calculate_recency_score",
]


class ContextItemType(Enum):
    """What a context item holds (the Rust seed's episode/pattern, plus our memories)."""

    MEMORY = "memory"
    EPISODE = "episode"
    PATTERN = "pattern"


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One retrieval result with its salience (retrieval score, 0..1) and creation time."""

    id: str
    content: str
    salience: float
    created_at: datetime | None = None
    item_type: ContextItemType = ContextItemType.MEMORY
    payload: Any = None


def calculate_recency_score(created_at: datetime | None, now: datetime, half_life: float) -> float:
    """``0.5 ** (age / half_life)``; unknown age 0.5, future timestamps 1.0."""
    moment, reference = parse_time(created_at), parse_time(now)
    if moment is None or reference is None:
        return UNKNOWN_AGE_RECENCY
    return shortlist.recency(moment, reference, half_life)


def calculate_priority_score(item: ContextItem, config: BundleConfig, now: datetime) -> float:
    """``recency_weight * recency + salience_weight * salience``."""
    if config.recency_weight == 0.0:  # no dates to read
        return shortlist.priority(item.salience, None, config, now)
    age_score = calculate_recency_score(item.created_at, now, config.recency_half_life_days)
    return shortlist.weigh(item.salience, age_score, config)


class BundleAccumulator:
    """Sliding-window accumulator: at most ``max_items``, the highest priorities win."""

    def __init__(self, config: BundleConfig | None = None, *, now: datetime) -> None:
        self._config = config if config is not None else BundleConfig()
        self._now = now
        self._heap: list[Entry] = []
        self._items: dict[int, ContextItem] = {}  # the kept items by arrival
        self._dropped: list[tuple[ContextItem, AddResult]] = []
        self._counts: dict[AddResult, int] = {}

    @classmethod
    def default_config(cls, *, now: datetime) -> BundleAccumulator:
        """An accumulator with ``BundleConfig.default()``."""
        return cls(BundleConfig.default(), now=now)

    @classmethod
    def from_items(
        cls, items: Iterable[ContextItem], config: BundleConfig | None = None, *, now: datetime
    ) -> list[ContextItem]:
        """Accumulate ``items`` and return the bundle."""
        accumulator = cls(config, now=now)
        for item in items:
            accumulator.add(item)
        return accumulator.to_bundle()

    @property
    def config(self) -> BundleConfig:
        """The configuration in use."""
        return self._config

    def __len__(self) -> int:
        return len(self._heap)

    def priority(self, item: ContextItem) -> float:
        """The item's priority under this accumulator's config and ``now``."""
        return calculate_priority_score(item, self._config, self._now)

    def add(self, item: ContextItem) -> AddResult:
        """Add ``item``; O(log n). Ties keep the earlier item (input order breaks ties)."""
        arrival = sum(self._counts.values())
        if item.salience < self._config.min_salience_threshold:
            result, evicted = AddResult.REJECTED_BELOW_THRESHOLD, None
        else:
            entry = (self.priority(item), -arrival)
            result, evicted = offer(self._heap, entry, self._config.max_items)
        self._counts[result] = self._counts.get(result, 0) + 1
        if result.accepted:
            self._items[arrival] = item
        else:
            self._dropped.append((item, result))
        if evicted is not None:
            self._dropped.append((self._items.pop(-evicted[1]), result))
        return result

    def to_bundle(self) -> list[ContextItem]:
        """The kept items, highest priority first (earlier arrivals first among equals)."""
        return [self._items[-arrival] for _, arrival in sorted(self._heap, reverse=True)]

    def dropped(self) -> list[tuple[ContextItem, AddResult]]:
        """Items that left or never entered, with the reason (evictions carry the new item's)."""
        return list(self._dropped)

    def stats(self) -> BundleStats:
        """Counters and the priority range of the current bundle."""
        return bundle_stats(self._config, self._counts, [value for value, _ in self._heap])
