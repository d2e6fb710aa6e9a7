"""Point ids of the embedded store: 64-bit ids for new stores, UUIDs kept by old ones."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import qdrant_edge as qe

from proxy.context.records import MemoryRecord
from proxy.errors import StoreError
from proxy.memory import edge_ids
from proxy.memory.edge import SHARD_DIR, EdgeStore, Found
from proxy.memory.edge_ids import IDS_FILE, U64_IDS, UUID_IDS, ids_at, point_u64
from proxy.memory.edge_shard import CONFIG_FILE
from proxy.memory.points import point_id
from proxy.memory.store import SearchQuery
from tests.memory.support import DIM, record, vector_for, vectors_for

AT = datetime(2026, 3, 1, tzinfo=UTC)


def dialog(n: int) -> list[MemoryRecord]:
    """Turns a minute apart with shared words, so searches and neighbour lookups find many."""
    return [
        replace(
            record(
                f"m{i}",
                content=f"turn {i} about the red van and trip {i % 7}",
                source="conversation",
            ),
            created_at=AT + timedelta(minutes=i),
        )
        for i in range(n)
    ]


async def answers(store: EdgeStore) -> list[Found]:
    """Hybrid searches with their neighbour turns, on a handful of questions."""
    found = []
    for text in ("red van", "trip 3", "turn 12 about", "nothing alike"):
        query = SearchQuery(vector_for(text), text, "u1", None, 8, live_at=AT, lexical=True)
        found.append(await store.search_near("t1", query, 3, 150.0))
    return found


def shard_ids(store: EdgeStore) -> list[object]:
    found, _ = store._shard.scroll(qe.ScrollRequest(limit=100, with_payload=False))
    return [point.id for point in found]


def test_the_64_bit_id_is_stable_and_keeps_tenants_apart() -> None:
    assert point_u64("t1", "m1") == 0xF1F36CEA19470F75  # fixed forever: stored ids
    assert point_u64("a", "b:c") != point_u64("a:b", "c")
    assert point_u64("t1", "m1") != point_u64("t2", "m1")


def test_a_new_shard_records_its_scheme_before_it_exists(tmp_path: Path) -> None:
    path = tmp_path / SHARD_DIR
    assert ids_at(path) is U64_IDS
    assert (path / IDS_FILE).read_text().strip() == "u64"
    assert not (path / CONFIG_FILE).exists()
    assert ids_at(path, "uuid") is U64_IDS  # recorded: the argument is for new shards only


def test_a_shard_without_the_record_names_points_by_uuids(tmp_path: Path) -> None:
    (tmp_path / CONFIG_FILE).write_text("{}")
    assert ids_at(tmp_path) is UUID_IDS
    assert not (tmp_path / IDS_FILE).exists()


def test_an_unknown_scheme_is_refused(tmp_path: Path) -> None:
    (tmp_path / IDS_FILE).write_text("u32\n")
    with pytest.raises(StoreError, match="u32"):
        ids_at(tmp_path)


async def test_a_new_store_names_points_by_64_bit_ids(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True)
    try:
        records = dialog(3)
        await store.add(records, vectors_for(records))
        assert sorted(shard_ids(store)) == sorted(point_u64("t1", r.id) for r in records)  # type: ignore[type-var]
    finally:
        await store.close()


async def test_a_store_written_with_uuids_opens_and_answers_as_before(tmp_path: Path) -> None:
    """The fixture is a store as the code before adr/0139 wrote it: UUID ids, no record."""
    records = dialog(40)
    old = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True, point_ids="uuid")
    await old.add(records, vectors_for(records))
    await old.increment_retrievals("t1", ["m1", "m1", "m2"])
    before = await answers(old)
    await old.close()
    (tmp_path / SHARD_DIR / IDS_FILE).unlink()
    store = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True)
    try:
        assert store._ids is UUID_IDS
        assert sorted(map(str, shard_ids(store))) == sorted(point_id("t1", r.id) for r in records)
        assert await answers(store) == before
        got = await store.get("t1", "m1")
        assert got is not None
        assert got.retrieval_count == 2
        added = record("new", content="a new turn about the red van")
        await store.add([added], vectors_for([added]))
        assert uuid.UUID(point_id("t1", "new")) in shard_ids(store)
        assert await store.delete("t1", "m3")
        assert await store.get("t1", "m3") is None
    finally:
        await store.close()


@pytest.fixture
def colliding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id of tenant t1 hashes to one 64-bit point id."""
    real = edge_ids.point_u64
    monkeypatch.setattr(
        edge_ids, "point_u64", lambda tenant, i: 7 if tenant == "t1" else real(tenant, i)
    )


@pytest.mark.usefixtures("colliding")
async def test_a_write_onto_another_memorys_id_is_refused(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        first = record("m1", content="first")
        await store.add([first], vectors_for([first]))
        again = record("m1", content="first, rewritten")
        await store.add([again], vectors_for([again]))  # the same memory: an upsert
        other = record("m2", content="second")
        with pytest.raises(StoreError, match=r"'m2'.*collision"):
            await store.add([other], vectors_for([other]))
        both = [record("m3", tenant="t2"), record("m4", tenant="t1")]
        with pytest.raises(StoreError, match=r"'m4'.*collision"):
            await store.add(both, vectors_for(both))
        got = await store.get("t1", "m1")
        assert got is not None
        assert got.content == "first, rewritten"
        assert await store.get("t2", "m3") is None  # a refused batch writes nothing
    finally:
        await store.close()


@pytest.mark.usefixtures("colliding")
async def test_a_batch_colliding_with_itself_is_refused(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        both = [record("m1"), record("m2")]
        with pytest.raises(StoreError, match="'m2'"):
            await store.add(both, vectors_for(both))
    finally:
        await store.close()


async def test_reads_by_id_check_the_memory_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id that hashes onto another memory's point never reads, changes or deletes it."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        first = record("m1")
        await store.add([first], vectors_for([first]))
        real = edge_ids.point_u64
        monkeypatch.setattr(
            edge_ids, "point_u64", lambda t, i: real(t, "m1") if i == "m2" else real(t, i)
        )
        assert await store.get("t1", "m2") is None
        assert await store.set_usefulness("t1", "m2", 0.1) is None
        assert await store.supersede("t1", "m2", "m9") is None
        assert not await store.delete("t1", "m2")
        kept = await store.get("t1", "m1")
        assert kept is not None
        assert kept.usefulness == first.usefulness
        assert kept.superseded_by is None
    finally:
        await store.close()


def test_u64_keys_are_the_ids_the_shard_returns() -> None:
    class Point:
        def __init__(self, pid: int, score: float) -> None:
            self.id, self.score = pid, score

    found = [Point(3, 0.5), Point(2**64 - 1, 0.25)]
    assert U64_IDS.scored(found) == {3: 0.5, 2**64 - 1: 0.25}
    assert U64_IDS.wire(2**64 - 1) == 2**64 - 1
    assert U64_IDS.keyed(found) == {3: 3, 2**64 - 1: 2**64 - 1}
