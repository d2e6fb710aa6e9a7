"""NearCache: LRU bound and expiry of decoded values."""

from __future__ import annotations

import pytest

from proxy.cache.near import NearCache


def test_least_recently_used_goes_first() -> None:
    near: NearCache[int] = NearCache(2, clock=lambda: 0.0)
    near.put("a", 1, 60)
    near.put("b", 2, 60)
    assert near.get("a") == 1
    near.put("c", 3, 60)
    assert (near.get("a"), near.get("b"), near.get("c")) == (1, None, 3)
    assert len(near) == 2


def test_entries_expire() -> None:
    now = [0.0]
    near: NearCache[str] = NearCache(4, clock=lambda: now[0])
    near.put("a", "x", 10)
    now[0] = 9.99
    assert near.get("a") == "x"
    now[0] = 10.0
    assert near.get("a") is None
    assert len(near) == 0


@pytest.mark.parametrize(("entries", "ttl"), [(0, 60.0), (4, 0.0)])
def test_disabled_or_zero_ttl_keeps_nothing(entries: int, ttl: float) -> None:
    near: NearCache[int] = NearCache(entries)
    near.put("a", 1, ttl)
    assert near.get("a") is None
