"""RetrievalCounts: the embedded store's count table, its file; counts stay off the shard."""

from __future__ import annotations

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
