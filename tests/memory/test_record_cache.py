"""RecordCache: LRU bound, write generations, in-place updates."""

from __future__ import annotations

import threading
from dataclasses import replace
from uuid import NAMESPACE_URL, uuid5

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import ConfigError
from proxy.memory.record_cache import RecordCache, with_count
from tests.memory.support import record


def key(name: str) -> int:
    """A point key (the integer of a point UUID) per short name."""
    return uuid5(NAMESPACE_URL, name).int


def test_lookup_returns_hits_only_and_the_generation() -> None:
    cache = RecordCache(10)
    found, generation = cache.lookup([key("a"), key("b")])
    assert found == {}
    assert cache.store({key("a"): record("a")}, generation)
    found, _ = cache.lookup([key("a"), key("b")])
    assert found == {key("a"): record("a")}


@pytest.mark.parametrize(
    ("write", "kept"),
    [
        (lambda c: c.invalidate([key("x")]), False),
        (lambda c: c.clear(), False),
        (lambda c: c.lookup([key("x")]), True),  # a read is not a write
    ],
)
def test_a_write_since_the_lookup_keeps_the_reader_from_storing(write, kept: bool) -> None:  # type: ignore[no-untyped-def]
    cache = RecordCache(10)
    _, generation = cache.lookup([key("a")])
    write(cache)  # e.g. the record changed in the shard while the reader fetched the old one
    assert cache.store({key("a"): record("a")}, generation) is kept
    assert (len(cache) == 1) is kept


def test_a_count_since_the_lookup_keeps_the_reader_storing_the_new_count() -> None:
    # The count flush bumps no generation (a bump made every search that read the shard while
    # ~70 count calls ran throw its records away): ``store`` takes the table's count instead.
    table: dict[int, int] = {}
    cache = RecordCache(10, count_of=table.get)
    _, generation = cache.lookup([key("a")])
    stale = record("a")  # read from the shard before the count landed
    table[key("a")] = 5  # the store updates its table first, then the cache
    cache.update_counts({key("a"): 5})
    assert cache.store({key("a"): stale}, generation)
    found, _ = cache.lookup([key("a")])
    assert found[key("a")].retrieval_count == 5


def test_without_a_count_table_a_count_still_turns_readers_away() -> None:
    cache = RecordCache(10)
    _, generation = cache.lookup([key("a")])
    cache.update_counts({key("a"): 3})
    assert not cache.store({key("a"): record("a")}, generation)


def test_concurrent_lookups_during_count_updates_end_with_the_table_counts() -> None:
    # Readers store shard copies (count 0) while a writer counts; however they interleave,
    # every cached record ends with its table count: no reader puts back an older count.
    keys = [key(str(n)) for n in range(40)]
    table: dict[int, int] = {}
    cache = RecordCache(len(keys), count_of=table.get)
    rounds = 200

    def read() -> None:
        for n in range(rounds):
            wanted = keys[n % 7 :: 3]
            found, generation = cache.lookup(wanted)
            cache.store({k: record(str(k)) for k in wanted if k not in found}, generation)
            if n % 10 == 0:
                cache.invalidate(wanted[:2])  # and a write now and then

    def count() -> None:
        for n in range(rounds):
            batch = {k: table.get(k, 0) + 1 for k in keys[n % 5 :: 2]}
            table.update(batch)
            cache.update_counts(batch)

    threads = [threading.Thread(target=read) for _ in range(3)] + [threading.Thread(target=count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found, _ = cache.lookup(keys)
    assert found
    assert {k: r.retrieval_count for k, r in found.items()} == {k: table.get(k, 0) for k in found}


def test_invalidate_drops_and_update_replaces() -> None:
    cache = RecordCache(10)
    cache.store({key("a"): record("a"), key("b"): record("b")}, 0)
    cache.update_counts({key("a"): 7, key("missing"): 7})
    cache.invalidate([key("b")])
    found, _ = cache.lookup([key("a"), key("b"), key("missing")])
    assert list(found) == [key("a")]
    assert found[key("a")].retrieval_count == 7
    assert found[key("a")].content == record("a").content


def test_least_recently_used_goes_first() -> None:
    cache = RecordCache(2)
    cache.store({key("a"): record("a"), key("b"): record("b")}, 0)
    cache.lookup([key("a")])  # a is now the most recent
    cache.store({key("c"): record("c")}, 0)
    found, _ = cache.lookup([key("a"), key("b"), key("c")])
    assert set(found) == {key("a"), key("c")}


def test_zero_entries_disables_and_negative_is_refused() -> None:
    cache = RecordCache(0)
    assert cache.store({key("a"): record("a")}, 0) is False
    assert cache.lookup([key("a")])[0] == {}
    with pytest.raises(ConfigError):
        RecordCache(-1)


@given(st.integers(1, 8), st.lists(st.sampled_from("abcdefghijkl"), max_size=40))
def test_never_holds_more_than_the_bound(bound: int, keys: list[str]) -> None:
    cache = RecordCache(bound)
    for name in keys:
        _, generation = cache.lookup([key(name)])
        cache.store({key(name): record(name)}, generation)
        assert len(cache) <= bound
    if keys:  # the last stored key is always there
        assert key(keys[-1]) in cache.lookup([key(keys[-1])])[0]


def test_reads_with_room_leave_the_order_alone() -> None:
    """Recency counts while the cache is full only: with room nothing is evicted, so a read
    skips the move (~80 a search on a store that fits its cache)."""
    cache = RecordCache(3)
    cache.store({key("a"): record("a"), key("b"): record("b")}, 0)
    cache.lookup([key("a")])  # with room: a stays the oldest
    cache.store({key("c"): record("c")}, 0)  # full now
    cache.store({key("d"): record("d")}, 0)  # the oldest goes: a
    found, _ = cache.lookup([key(name) for name in "abcd"])
    assert set(found) == {key("b"), key("c"), key("d")}


def test_with_count_is_replace() -> None:
    original = replace(record("a"), metadata={"k": 1}, expires_at=None, context="c")
    assert with_count(original, 9) == replace(original, retrieval_count=9)
