"""The bundle stage: the best ``max_items`` items by priority, above a salience floor.

``priority = recency_weight * recency + salience_weight * salience`` with
``recency = 0.5 ** (age_days / recency_half_life_days)`` (unknown age 0.5, future 1.0), the rule
of the bundle-accumulator seed. Items arrive in order: one below ``min_salience_threshold`` is
rejected; while there is room an item is added; when full, it evicts the lowest priority (the
latest arrival among equals) if it beats it, else it is rejected as the lowest.

``offer`` is that rule for one arrival, on a min-heap (O(log n)); the seed's incremental
``BundleAccumulator`` (``bundle.py``) is one ``offer`` per ``add``. ``shortlist`` applies it to
a whole list at once, for the assembler: when no eviction can happen (at most ``max_items``
items clear the floor) every eligible item is added, so no heap is built (a tenth of a
millisecond a request); a property test checks it against one ``offer`` per item.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from proxy.context.ranking import UNKNOWN_AGE_RECENCY, age_days
from proxy.errors import ConfigError

Entry = tuple[float, int]  # (priority, -arrival): the root is the lowest, latest-arriving item


class AddResult(Enum):
    """What happened to one arriving item."""

    ADDED = "added"
    ADDED_WITH_EVICTION = "added_with_eviction"
    REJECTED_BELOW_THRESHOLD = "rejected_below_threshold"
    REJECTED_LOWEST_PRIORITY = "rejected_lowest_priority"

    @property
    def accepted(self) -> bool:
        """True when the item is in the bundle after the call."""
        return self in (AddResult.ADDED, AddResult.ADDED_WITH_EVICTION)


@dataclass(frozen=True, slots=True)
class BundleConfig:
    """Bundle size, priority weights, salience floor and recency half-life."""

    max_items: int = 20
    recency_weight: float = 0.3
    salience_weight: float = 0.7
    min_salience_threshold: float = 0.1
    recency_half_life_days: float = 7.0

    def __post_init__(self) -> None:
        if self.max_items < 1:
            raise ConfigError("bundle max_items must be at least 1", param="max_items")
        if self.recency_half_life_days <= 0:
            raise ConfigError("recency_half_life_days must be positive")
        if self.recency_weight < 0 or self.salience_weight < 0:
            raise ConfigError("bundle weights must not be negative")

    @classmethod
    def default(cls) -> BundleConfig:
        """20 items, 0.3 recency / 0.7 salience, salience floor 0.1, 7-day half-life."""
        return cls()

    @classmethod
    def token_efficient(cls) -> BundleConfig:
        """A smaller bundle (10) with a higher salience floor (0.3)."""
        return cls(max_items=10, min_salience_threshold=0.3)

    @classmethod
    def comprehensive(cls) -> BundleConfig:
        """A larger bundle (50), no salience floor and a 30-day half-life."""
        return cls(max_items=50, min_salience_threshold=0.0, recency_half_life_days=30.0)


@dataclass(frozen=True, slots=True)
class BundleStats:
    """Counters of one accumulation."""

    capacity: int
    size: int
    total_seen: int
    added: int
    evicted: int
    rejected_below_threshold: int
    rejected_lowest_priority: int
    min_priority: float | None
    max_priority: float | None


@dataclass(frozen=True, slots=True)
class Shortlist:
    """The kept items (input indices, ascending) and the accumulation's counters."""

    kept: list[int]
    stats: BundleStats


def recency(created_at: datetime | None, now: datetime, half_life: float) -> float:
    """``0.5 ** (age / half_life)``; unknown age 0.5, future timestamps 1.0 (aware times)."""
    if created_at is None:
        return UNKNOWN_AGE_RECENCY
    return math.pow(0.5, max(0.0, age_days(created_at, now)) / half_life)


def priority(
    salience: float, created_at: datetime | None, config: BundleConfig, now: datetime
) -> float:
    """``recency_weight * recency + salience_weight * salience``."""
    if config.recency_weight == 0.0:  # the assembler's setting: skip the date arithmetic
        return config.salience_weight * salience
    return weigh(salience, recency(created_at, now, config.recency_half_life_days), config)


def weigh(salience: float, recency_score: float, config: BundleConfig) -> float:
    """The priority of a salience and a recency score."""
    return config.recency_weight * recency_score + config.salience_weight * salience


def priorities_of(
    saliences: Sequence[float],
    created_at: Sequence[datetime | None],
    config: BundleConfig,
    now: datetime,
) -> list[float]:
    """Each item's ``priority`` (aligned sequences)."""
    if config.recency_weight == 0.0:  # the same expression as ``priority``, without the calls
        weight = config.salience_weight
        return [weight * salience for salience in saliences]
    return [
        priority(salience, created, config, now)
        for salience, created in zip(saliences, created_at, strict=True)
    ]


def offer(heap: list[Entry], entry: Entry, max_items: int) -> tuple[AddResult, Entry | None]:
    """One eligible arrival into a bundle of at most ``max_items``: the result and what it
    evicted. Ties keep the earlier item (an entry carries ``-arrival``)."""
    if len(heap) < max_items:
        heapq.heappush(heap, entry)
        return AddResult.ADDED, None
    if entry <= heap[0]:
        return AddResult.REJECTED_LOWEST_PRIORITY, None
    return AddResult.ADDED_WITH_EVICTION, heapq.heapreplace(heap, entry)


def bundle_stats(
    config: BundleConfig,
    counts: dict[AddResult, int],
    kept_priorities: Sequence[float],
) -> BundleStats:
    """The counters from each result's count and the kept items' priorities."""
    below = counts.get(AddResult.REJECTED_BELOW_THRESHOLD, 0)
    lowest = counts.get(AddResult.REJECTED_LOWEST_PRIORITY, 0)
    added = counts.get(AddResult.ADDED, 0)
    evicted = counts.get(AddResult.ADDED_WITH_EVICTION, 0)
    return BundleStats(
        capacity=config.max_items,
        size=len(kept_priorities),
        total_seen=added + evicted + below + lowest,
        added=added + evicted,
        evicted=evicted,
        rejected_below_threshold=below,
        rejected_lowest_priority=lowest,
        min_priority=min(kept_priorities) if kept_priorities else None,
        max_priority=max(kept_priorities) if kept_priorities else None,
    )


def shortlist(
    saliences: Sequence[float], priorities: Sequence[float], config: BundleConfig
) -> Shortlist:
    """The bundle of items arriving in input order (aligned ``saliences`` and ``priorities``)."""
    floor = config.min_salience_threshold
    eligible = [i for i, salience in enumerate(saliences) if not salience < floor]
    counts = {AddResult.REJECTED_BELOW_THRESHOLD: len(saliences) - len(eligible)}
    if len(eligible) <= config.max_items:
        # Nothing can be evicted: one ``offer`` each would add every eligible item.
        counts[AddResult.ADDED] = len(eligible)
        return Shortlist(eligible, bundle_stats(config, counts, [priorities[i] for i in eligible]))
    heap: list[Entry] = []
    for i in eligible:
        result, _ = offer(heap, (priorities[i], -i), config.max_items)
        counts[result] = counts.get(result, 0) + 1
    kept = sorted(-arrival for _, arrival in heap)
    return Shortlist(kept, bundle_stats(config, counts, [value for value, _ in heap]))
