"""RetrievalCounts: the embedded store's count table, its file; counts stay off the shard."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from uuid import NAMESPACE_URL, uuid5

import pytest
import qdrant_edge as qe
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.memory import edge_counts
from proxy.memory.edge import EdgeStore
from proxy.memory.edge_counts import COUNTS_FILE, MAGIC, RetrievalCounts
from proxy.memory.edge_ids import point_u64
from proxy.memory.edge_query import key_of
from proxy.memory.points import RETRIEVAL_COUNT_KEY, point_key, point_uuid
from tests.fakes.clock import FakeClock
from tests.fakes.timers import HandTimers
from tests.memory.support import record, vectors_for

DIM = 32


def pid(n: int) -> int:
    return n


def test_saved_counts_load_back(tmp_path: Path) -> None:
    path = tmp_path / COUNTS_FILE
    table = RetrievalCounts(path)
    table.set_many({pid(1): 3, pid(2): 2**40})
    table.drop([pid(3)])
    table.save()
    loaded = RetrievalCounts.load(path)
    assert (loaded.get(pid(1)), loaded.get(pid(2)), loaded.get(pid(3))) == (3, 2**40, None)
    assert len(loaded) == 2


def test_a_file_is_keyed_by_point_uuid_bytes(tmp_path: Path) -> None:
    """The file holds each point's 16 UUID bytes, as tables saved before the store keyed
    points by integer did: such a file loads, and a saved one reads back as UUIDs."""
    path = tmp_path / COUNTS_FILE
    older = point_uuid("t1", "m1")
    path.write_bytes(MAGIC + edge_counts.ENTRY.pack(older.bytes, 7))
    loaded = RetrievalCounts.load(path)
    assert loaded.get(point_key("t1", "m1")) == 7
    loaded.set_many({point_key("t1", "m2"): 1})
    loaded.save()
    saved = dict(edge_counts.ENTRY.iter_unpack(path.read_bytes()[len(MAGIC) :]))
    assert saved == {older.bytes: 7, point_uuid("t1", "m2").bytes: 1}


def test_a_missing_or_damaged_file_is_an_empty_table(tmp_path: Path) -> None:
    path = tmp_path / COUNTS_FILE
    assert len(RetrievalCounts.load(path)) == 0
    path.write_bytes(MAGIC + b"\x01" * 7)  # not a whole entry
    assert len(RetrievalCounts.load(path)) == 0
    path.write_bytes(b"something else entirely")
    assert len(RetrievalCounts.load(path)) == 0


def test_saves_only_changes_and_at_most_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / COUNTS_FILE
    table = RetrievalCounts(path)
    table.save_if_due()
    assert not path.exists()  # nothing changed
    table.set_many({pid(1): 1})
    table.save_if_due()
    assert not path.exists()  # changed, but the interval has not passed
    monkeypatch.setattr(edge_counts, "SAVE_INTERVAL_S", 0.0)
    saving = table.save_if_due()
    assert saving is not None  # the write and fsync run on a thread of their own
    saving.join()
    assert RetrievalCounts.load(path).get(pid(1)) == 1
    path.unlink()
    assert table.save_if_due() is None
    assert not path.exists()  # saved already: nothing new to write


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 20), st.integers(0, 2**64 - 1)), max_size=60)
)
def test_the_file_holds_the_table_after_any_sets_and_drops(
    ops: list[tuple[bool, int, int]],
) -> None:
    # The packed body is patched in place and a dropped entry's slot takes the last one: the
    # saved file must still be exactly the table, in the old format.
    table, expected = RetrievalCounts(), {}
    for is_set, n, count in ops:
        key = uuid5(NAMESPACE_URL, str(n)).int if n % 2 else n  # both id schemes
        if is_set:
            table.set_many({key: count})
            expected[key] = count
        else:
            table.drop([key])
            expected.pop(key, None)
    body = bytes(table._body)
    saved = {int.from_bytes(k): c for k, c in edge_counts.ENTRY.iter_unpack(body)}
    assert saved == expected
    assert len(body) == len(expected) * edge_counts.ENTRY.size


def test_an_old_file_loads_changes_and_saves_back(tmp_path: Path) -> None:
    path = tmp_path / COUNTS_FILE
    entries = {uuid5(NAMESPACE_URL, str(n)).int: n for n in range(5)}
    # Written as the table before the packed body wrote it: one struct call per entry.
    path.write_bytes(
        MAGIC + b"".join(edge_counts.ENTRY.pack(k.to_bytes(16), c) for k, c in entries.items())
    )
    table = RetrievalCounts.load(path)
    first, second, *_ = entries
    table.drop([first])
    table.set_many({second: 99, 12345: 1})
    table.save()
    entries.pop(first)
    entries.update({second: 99, 12345: 1})
    loaded = RetrievalCounts.load(path)
    assert {k: loaded.get(k) for k in entries} == entries
    assert len(loaded) == len(entries)


async def test_increments_never_write_the_shard(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        records = [record("m1"), record("m2")]
        await store.add(records, vectors_for(records))
        await store.increment_retrievals("t1", ["m1", "m1", "m2"])
        got = await store.get("t1", "m1")
        assert got is not None
        assert got.retrieval_count == 2
        # The point's payload keeps the count it was written with: no payload update, so the
        # point stays in its indexed segment (adr/0103).
        shard: qe.EdgeShard = store._shard
        raw = shard.retrieve([store._point_id("t1", "m1")], True, False)
        assert raw[0].payload[RETRIEVAL_COUNT_KEY] == 0
    finally:
        await store.close()
    assert RetrievalCounts.load(tmp_path / COUNTS_FILE).get(point_u64("t1", "m1")) == 2


class ReadSpy:
    """The shard, recording the ids each ``retrieve`` reads."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self.shard = shard
        self.reads: list[set[int]] = []

    def retrieve(self, ids: list[int | str], *args: object) -> object:
        self.reads.append({key_of(i) for i in ids})  # any spelling of a point id
        return self.shard.retrieve(ids, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.shard, name)


async def test_an_id_already_counted_is_not_read_again(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        records = [record("m1"), record("m2")]
        await store.add(records, vectors_for(records))
        spy = ReadSpy(store._shard)
        store._shard = spy  # type: ignore[assignment]
        await store.increment_retrievals("t1", ["m1"])
        await store.increment_retrievals("t1", ["m1", "m1", "m2"])
        # The second round reads only m2: m1's count is in the table.
        assert spy.reads == [{point_u64("t1", "m1")}, {point_u64("t1", "m2")}]
        got = [await store.get("t1", m) for m in ("m1", "m2")]
        assert [r.retrieval_count if r else None for r in got] == [3, 1]
    finally:
        await store.close()


@pytest.mark.parametrize("how", ["delete_user", "purge_expired"])
async def test_deleting_by_filter_drops_the_counts(tmp_path: Path, how: str) -> None:
    # The increments trust the table to hold only live points: a point deleted by a filter must
    # leave it, or its id would go on being counted without a read.
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        past = datetime(2020, 1, 1, tzinfo=UTC)
        records = [record("m1", expires_at=past), record("m2", user="u2")]
        await store.add(records, vectors_for(records))
        await store.increment_retrievals("t1", ["m1", "m2"])
        if how == "delete_user":
            assert await store.delete_user("t1", "u1") == 1
        else:
            assert await store.purge_expired(datetime.now(UTC)) == 1
        await store.increment_retrievals("t1", ["m1", "m2"])
        assert store._counts.get(point_u64("t1", "m1")) is None
        assert store._counts.get(point_u64("t1", "m2")) == 2
    finally:
        await store.close()
    assert RetrievalCounts.load(tmp_path / COUNTS_FILE).get(point_u64("t1", "m1")) is None


def held_table(path: Path) -> tuple[RetrievalCounts, FakeClock, HandTimers]:
    clock, timers = FakeClock(), HandTimers()
    return RetrievalCounts(path, clock=clock, start_timer=timers.start), clock, timers


def test_a_change_no_traffic_follows_is_saved_once_the_interval_passed(tmp_path: Path) -> None:
    # The last batch of counts before traffic stops: no later increment calls ``save_if_due``
    # again, so the timer it armed saves it (adr/0190), not the next change or the close.
    path = tmp_path / COUNTS_FILE
    table, clock, timers = held_table(path)
    table.set_many({pid(1): 1})
    assert table.save_if_due() is None  # not due yet
    assert not path.exists()
    [timer] = timers.pending()
    assert timer.after_s == edge_counts.SAVE_INTERVAL_S
    table.set_many({pid(1): 2})
    table.save_if_due()
    assert len(timers.pending()) == 1  # one timer per interval, not one per change
    clock.now += edge_counts.SAVE_INTERVAL_S
    timers.fire_next()
    assert RetrievalCounts.load(path).get(pid(1)) == 2
    assert timers.pending() == []  # saved: nothing left to arm


def test_a_timer_firing_early_is_armed_again_for_the_rest(tmp_path: Path) -> None:
    # A save since it was armed moved the interval on: at most one save an interval still.
    path = tmp_path / COUNTS_FILE
    table, clock, timers = held_table(path)
    table.set_many({pid(1): 1})
    table.save_if_due()
    clock.now += 2.0
    timers.fire_next()
    assert not path.exists()
    [timer] = timers.pending()
    assert timer.after_s == edge_counts.SAVE_INTERVAL_S - 2.0
    clock.now += timer.after_s
    timers.fire_next()
    assert RetrievalCounts.load(path).get(pid(1)) == 1


def test_a_drop_alone_is_saved_once_the_interval_passed(tmp_path: Path) -> None:
    # A deleted or rewritten memory's entry leaves the table without any ``save_if_due``.
    path = tmp_path / COUNTS_FILE
    table, clock, timers = held_table(path)
    table.set_many({pid(1): 1, pid(2): 1})
    table.save()
    table.drop([pid(1)])
    clock.now += edge_counts.SAVE_INTERVAL_S
    timers.fire_next()
    loaded = RetrievalCounts.load(path)
    assert (loaded.get(pid(1)), loaded.get(pid(2))) == (None, 1)


def test_close_cancels_the_timer_and_saves_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / COUNTS_FILE
    table, clock, timers = held_table(path)
    writes: list[Path] = []
    replace = edge_counts.os.replace

    def counted(src: Path, dst: Path) -> None:
        writes.append(dst)
        replace(src, dst)

    monkeypatch.setattr(edge_counts.os, "replace", counted)
    table.set_many({pid(1): 1})
    table.save_if_due()
    [timer] = timers.armed
    table.close()
    assert timer.cancelled
    assert writes == [path]
    assert RetrievalCounts.load(path).get(pid(1)) == 1
    # Nothing arms a timer after the close, nor saves from one: a late change, a late-firing
    # timer.
    table.set_many({pid(1): 2})
    clock.now += edge_counts.SAVE_INTERVAL_S / 2
    table.save_if_due()
    clock.now += edge_counts.SAVE_INTERVAL_S / 2
    timer.action()  # as a ``threading.Timer`` that fired just as the close cancelled it
    assert timers.pending() == []
    assert writes == [path]


def test_a_failing_save_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "missing" / COUNTS_FILE  # its directory does not exist yet: OSError
    table, clock, timers = held_table(path)
    table.set_many({pid(1): 1})
    table.save_if_due()
    clock.now += edge_counts.SAVE_INTERVAL_S
    with caplog.at_level(logging.WARNING, logger="memproxy.store"):
        timers.fire_next()  # raises nothing: a timer's thread has no caller
    assert "saving retrieval counts failed" in caplog.text
    [retry] = timers.pending()
    assert retry.after_s == edge_counts.SAVE_INTERVAL_S
    path.parent.mkdir()
    clock.now += retry.after_s
    timers.fire_next()
    assert RetrievalCounts.load(path).get(pid(1)) == 1
    assert timers.pending() == []


def test_a_failing_save_on_a_request_raises_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An increment (a request's flush) only arms the timer or starts a save thread.
    path = tmp_path / "missing" / COUNTS_FILE
    table, clock, timers = held_table(path)
    table.set_many({pid(1): 1})
    clock.now += edge_counts.SAVE_INTERVAL_S
    saving = table.save_if_due()
    assert saving is not None
    saving.join()
    assert timers.pending()  # the retry, armed by the failed save's thread


def test_a_change_during_an_explicit_save_is_armed_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An increment due while ``save`` (a flush) holds the save lock leaves its change to it;
    # the change came after the save's copy, so the save's end arms the timer for it.
    path = tmp_path / COUNTS_FILE
    table, clock, timers = held_table(path)
    replace = edge_counts.os.replace

    def racing(src: Path, dst: Path) -> None:
        clock.now += edge_counts.SAVE_INTERVAL_S
        table.set_many({pid(1): 2})
        assert table.save_if_due() is None  # the save under way holds the lock
        replace(src, dst)

    monkeypatch.setattr(edge_counts.os, "replace", racing)
    table.set_many({pid(1): 1})
    table.save()
    monkeypatch.undo()
    assert RetrievalCounts.load(path).get(pid(1)) == 1
    timers.fire_next()
    assert RetrievalCounts.load(path).get(pid(1)) == 2


SAFETY_S = 60  # a bound on waits that should end at once, never a measured time


async def test_a_closed_store_leaves_no_timer_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edge_counts, "SAVE_INTERVAL_S", 3600.0)  # the increment is not due
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    records = [record("m1")]
    await store.add(records, vectors_for(records))
    await store.increment_retrievals("t1", ["m1"])
    timer = store._counts._due
    assert isinstance(timer, threading.Timer)  # armed for the rest of the hour
    await store.close()
    await asyncio.to_thread(timer.join, SAFETY_S)  # cancelled: its thread ends at once
    assert not timer.is_alive()
    assert store._counts._due is None
    assert RetrievalCounts.load(tmp_path / COUNTS_FILE).get(point_u64("t1", "m1")) == 1
