"""RecordCache: LRU bound, write generations, in-place updates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import ConfigError
from proxy.memory.record_cache import RecordCache
from tests.memory.support import record


def test_lookup_returns_hits_only_and_the_generation() -> None:
    cache = RecordCache(10)
    found, generation = cache.lookup(["a", "b"])
    assert found == {}
    assert cache.store({"a": record("a")}, generation)
    found, _ = cache.lookup(["a", "b"])
    assert found == {"a": record("a")}


@pytest.mark.parametrize(
    ("write", "kept"),
    [
        (lambda c: c.invalidate(["x"]), False),
        (lambda c: c.update(["x"], retrieval_count=3), False),
        (lambda c: c.clear(), False),
        (lambda c: c.lookup(["x"]), True),  # a read is not a write
    ],
)
def test_a_write_since_the_lookup_keeps_the_reader_from_storing(write, kept: bool) -> None:  # type: ignore[no-untyped-def]
    cache = RecordCache(10)
    _, generation = cache.lookup(["a"])
    write(cache)  # e.g. the record changed in the shard while the reader fetched the old one
    assert cache.store({"a": record("a")}, generation) is kept
    assert (len(cache) == 1) is kept


def test_invalidate_drops_and_update_replaces() -> None:
    cache = RecordCache(10)
    cache.store({"a": record("a"), "b": record("b")}, 0)
    cache.update(["a", "missing"], retrieval_count=7)
    cache.invalidate(["b"])
    found, _ = cache.lookup(["a", "b", "missing"])
    assert list(found) == ["a"]
    assert found["a"].retrieval_count == 7
    assert found["a"].content == record("a").content


def test_least_recently_used_goes_first() -> None:
    cache = RecordCache(2)
    cache.store({"a": record("a"), "b": record("b")}, 0)
    cache.lookup(["a"])  # a is now the most recent
    cache.store({"c": record("c")}, 0)
    found, _ = cache.lookup(["a", "b", "c"])
    assert set(found) == {"a", "c"}


def test_zero_entries_disables_and_negative_is_refused() -> None:
    cache = RecordCache(0)
    assert cache.store({"a": record("a")}, 0) is False
    assert cache.lookup(["a"])[0] == {}
    with pytest.raises(ConfigError):
        RecordCache(-1)


@given(st.integers(1, 8), st.lists(st.sampled_from("abcdefghijkl"), max_size=40))
def test_never_holds_more_than_the_bound(bound: int, keys: list[str]) -> None:
    cache = RecordCache(bound)
    for key in keys:
        _, generation = cache.lookup([key])
        cache.store({key: record(key)}, generation)
        assert len(cache) <= bound
    if keys:  # the last stored key is always there
        assert keys[-1] in cache.lookup([keys[-1]])[0]
