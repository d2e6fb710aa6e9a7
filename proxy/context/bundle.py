"""Bounded bundle of context items by recency and salience (Python port of the Rust seed).

``priority = recency_weight * recency + salience_weight * salience`` with
``recency = 0.5 ** (age_days / recency_half_life_days)``. Items below ``min_salience_threshold``
are rejected; when the bundle is full, a new item evicts the lowest-priority one if it beats it,
else it is rejected as the lowest. A min-heap keeps each ``add`` at O(log n); ``to_bundle`` sorts
once, highest priority first.

Integration contract (stable): ``BundleAccumulator(config, now=...)`` (``now`` passed in, never
read), ``add(item) -> AddResult``, ``to_bundle() -> list[ContextItem]``, ``stats() ->
BundleStats``, ``dropped()`` (evicted and rejected items, for explain mode), and
``BundleAccumulator.from_items(items, config, now=...)``. ``ContextItem.payload`` carries what
the caller attached (the assembler attaches its scored memory).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from proxy.context.scorer import parse_time
from proxy.errors import ConfigError

SECONDS_PER_DAY = 86_400.0
UNKNOWN_AGE_RECENCY = 0.5


class ContextItemType(Enum):
    """What a context item holds (the Rust seed's episode/pattern, plus our memories)."""

    MEMORY = "memory"
    EPISODE = "episode"
    PATTERN = "pattern"


class AddResult(Enum):
    """Outcome of ``BundleAccumulator.add``."""

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
class ContextItem:
    """One retrieval result with its salience (retrieval score, 0..1) and creation time."""

    id: str
    content: str
    salience: float
    created_at: datetime | None = None
    item_type: ContextItemType = ContextItemType.MEMORY
    payload: Any = None


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


def calculate_recency_score(created_at: datetime | None, now: datetime, half_life: float) -> float:
    """``0.5 ** (age / half_life)``; unknown age 0.5, future timestamps 1.0."""
    moment = parse_time(created_at)
    reference = parse_time(now)
    if moment is None or reference is None:
        return UNKNOWN_AGE_RECENCY
    age_days = max(0.0, (reference - moment).total_seconds() / SECONDS_PER_DAY)
    return math.pow(0.5, age_days / half_life)


def calculate_priority_score(item: ContextItem, config: BundleConfig, now: datetime) -> float:
    """``recency_weight * recency + salience_weight * salience``."""
    if config.recency_weight == 0.0:  # the assembler's setting: skip the date arithmetic
        return config.salience_weight * item.salience
    recency = calculate_recency_score(item.created_at, now, config.recency_half_life_days)
    return config.recency_weight * recency + config.salience_weight * item.salience


class BundleAccumulator:
    """Sliding-window accumulator: at most ``max_items``, the highest priorities win."""

    def __init__(self, config: BundleConfig | None = None, *, now: datetime) -> None:
        self._config = config if config is not None else BundleConfig()
        self._now = now
        # Entries are (priority, -arrival, item): tuples compare in C. The root is the lowest
        # priority and, among equals, the latest arrival, so ties keep earlier items.
        self._heap: list[tuple[float, int, ContextItem]] = []
        self._dropped: list[tuple[ContextItem, AddResult]] = []
        self._seen = 0
        self._added = 0
        self._evicted = 0
        self._below = 0
        self._lowest = 0

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
        self._seen += 1
        if item.salience < self._config.min_salience_threshold:
            self._below += 1
            self._dropped.append((item, AddResult.REJECTED_BELOW_THRESHOLD))
            return AddResult.REJECTED_BELOW_THRESHOLD
        entry = (self.priority(item), -self._seen, item)
        if len(self._heap) < self._config.max_items:
            heapq.heappush(self._heap, entry)
            self._added += 1
            return AddResult.ADDED
        if entry <= self._heap[0]:
            self._lowest += 1
            self._dropped.append((item, AddResult.REJECTED_LOWEST_PRIORITY))
            return AddResult.REJECTED_LOWEST_PRIORITY
        evicted = heapq.heapreplace(self._heap, entry)
        self._added += 1
        self._evicted += 1
        self._dropped.append((evicted[2], AddResult.ADDED_WITH_EVICTION))
        return AddResult.ADDED_WITH_EVICTION

    def to_bundle(self) -> list[ContextItem]:
        """The kept items, highest priority first (earlier arrivals first among equals)."""
        return [entry[2] for entry in sorted(self._heap, reverse=True)]

    def dropped(self) -> list[tuple[ContextItem, AddResult]]:
        """Items that left or never entered, with the reason (evictions carry the new item's)."""
        return list(self._dropped)

    def stats(self) -> BundleStats:
        """Counters and the priority range of the current bundle."""
        priorities = [entry[0] for entry in self._heap]
        return BundleStats(
            capacity=self._config.max_items,
            size=len(self._heap),
            total_seen=self._seen,
            added=self._added,
            evicted=self._evicted,
            rejected_below_threshold=self._below,
            rejected_lowest_priority=self._lowest,
            min_priority=min(priorities) if priorities else None,
            max_priority=max(priorities) if priorities else None,
        )


def keep_all_stats(config: BundleConfig, saliences: Sequence[float]) -> BundleStats | None:
    """The stats of adding items with these ``saliences`` when the bundle provably keeps them all.

    That holds when they fit (``max_items``), none is under the floor and the priority needs no
    dates (``recency_weight`` 0): every ``add`` then returns ``ADDED``. ``None`` otherwise, so
    the caller runs the accumulator; skipping its heap saves the assembler a tenth of a ms.
    """
    if (
        len(saliences) > config.max_items
        or config.recency_weight != 0.0
        or (saliences and min(saliences) < config.min_salience_threshold)
    ):
        return None
    # The same expression as ``calculate_priority_score`` with no recency weight.
    priorities = [config.salience_weight * salience for salience in saliences]
    return BundleStats(
        capacity=config.max_items,
        size=len(priorities),
        total_seen=len(priorities),
        added=len(priorities),
        evicted=0,
        rejected_below_threshold=0,
        rejected_lowest_priority=0,
        min_priority=min(priorities) if priorities else None,
        max_priority=max(priorities) if priorities else None,
    )
