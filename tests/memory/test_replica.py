"""Two workers' replicas of the embedded store on one data dir, side by side (adr/0105).

Two ``ReplicaStore``s in one process hold separate handles on the log, whose ``flock`` is per
handle: they exclude each other exactly as two worker processes do. The multi-process version,
over real sockets, is ``tests/e2e/test_workers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from proxy.composition import open_store
from proxy.context.records import MemoryRecord
from proxy.errors import StoreError
from proxy.memory import edge_ids, edge_maintenance
from proxy.memory import replica as replica_module
from proxy.memory.duplicates import words_key
from proxy.memory.edge import SHARD_DIR, EdgeStore
from proxy.memory.filters import DIALOG_SOURCE
from proxy.memory.record_cache import DEFAULT_MAX_ENTRIES
from proxy.memory.replica import (
    ADD,
    DELETE,
    INCREMENT,
    LOG_FILE,
    REPLICAS_DIR,
    SUPERSEDE,
    LogFolder,
    ReplicaStore,
    absorb_log,
    coalesced,
    fold_log,
)
from proxy.memory.service import MemoryService
from proxy.memory.store import SearchQuery
from proxy.memory.turn_context import context_key
from proxy.memory.write_log import WriteLog
from proxy.settings import StoreSettings
from tests.memory.support import DIM, HashEmbedder, record, vector_for, vectors_for


class CountingEmbedder(HashEmbedder):
    """``HashEmbedder``, keeping every batch it was asked to embed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return await super().embed(texts)


async def replica(data_dir: Path) -> ReplicaStore:
    return await ReplicaStore.open(
        data_dir, dimensions=DIM, hybrid=True, record_cache_entries=DEFAULT_MAX_ENTRIES
    )


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[ReplicaStore, ReplicaStore]]:
    a, b = await replica(tmp_path), await replica(tmp_path)
    yield a, b
    await a.close()
    await b.close()


def query(text: str, top_k: int = 5) -> SearchQuery:
    return SearchQuery(vector_for(text), text, "u1", None, top_k)


async def stop_following(*stores: ReplicaStore) -> None:
    """Stop the stores' followers: they apply nothing they are not made to."""
    for store in stores:
        if store._follower is not None:
            store._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await store._follower
            store._follower = None


async def test_a_write_through_one_is_read_through_the_other(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    a, b = pair
    memory = record("m1", content="the cat sleeps on the red sofa")
    await a.add([memory], vectors_for([memory]))
    # No call in between: b's reads catch up by themselves.
    assert [hit.record.id for hit in await b.search("t1", query(memory.content))] == ["m1"]
    assert (await b.get("t1", "m1")) is not None
    assert await b.count("t1") == 1
    assert [r.id for r in (await b.list("t1", user=None, source=None, limit=5, after=None)).records]
    assert await b.delete("t1", "m1")
    assert await a.get("t1", "m1") is None
    assert not await a.delete("t1", "m1")


async def test_a_colliding_write_is_refused_before_it_reaches_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logged, every replica (and the primary at the next start) would refuse the entry at each
    catch-up and never apply a write behind it (adr/0139)."""
    real = edge_ids.point_u64
    monkeypatch.setattr(edge_ids, "point_u64", lambda t, i: 7 if i in ("a", "b") else real(t, i))
    a, b = await replica(tmp_path), await replica(tmp_path)
    try:
        first, clash, later = record("a"), record("b"), record("c")
        await a.add([first], vectors_for([first]))
        with pytest.raises(StoreError, match=r"'b'.*collision"):
            await a.add([clash], vectors_for([clash]))
        await a.add([later], vectors_for([later]))
        assert await b.get("t1", "c") is not None
    finally:
        await a.close()
        await b.close()
    primary = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await absorb_log(primary, tmp_path) == 2
        assert await primary.count("t1") == 2
    finally:
        await primary.close()


async def test_a_write_colliding_with_another_workers_unseen_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collision check runs on a replica caught up under the log's lock: checked against
    what the writer had applied before, a clash logged by another worker a moment ago would
    reach the log and stop every replica behind it (adr/0139, adr/0141)."""
    real = edge_ids.point_u64
    monkeypatch.setattr(edge_ids, "point_u64", lambda t, i: 7 if i in ("a", "b") else real(t, i))
    a, b = await replica(tmp_path), await replica(tmp_path)
    try:
        await stop_following(a, b)  # b applies nothing it is not made to
        first, clash = record("a"), record("b")
        await a.add([first], vectors_for([first]))
        with pytest.raises(StoreError, match=r"'b'.*collision"):
            await b.add([clash], vectors_for([clash]))
        later = record("c")
        await b.add([later], vectors_for([later]))
        assert await a.get("t1", "c") is not None
    finally:
        await a.close()
        await b.close()


async def test_a_new_replica_warms_its_record_cache_after_applying_the_log(
    tmp_path: Path,
) -> None:
    """Warmed while the log was still being applied, the pages read before the log's writes
    would be voided by them (or, read from the copy alone, miss the logged memories)."""
    writer = await replica(tmp_path)
    try:
        memories = [record(f"m{i}", content=f"note {i}") for i in range(3)]
        await writer.add(memories, vectors_for(memories))
        late = await replica(tmp_path)  # the primary holds none of them: all in the log
        try:
            assert await late._replica.warmed() == 3
        finally:
            await late.close()
    finally:
        await writer.close()


async def test_votes_from_both_all_count(pair: tuple[ReplicaStore, ReplicaStore]) -> None:
    a, b = pair
    memory = record("m1")
    await a.add([memory], vectors_for([memory]))
    await asyncio.gather(
        *(s.update_usefulness("t1", "m1", lambda u: u + 0.01) for s in (a, b) for _ in range(5))
    )
    for store in (a, b):
        got = await store.get("t1", "m1")
        assert got is not None
        assert got.usefulness == pytest.approx(0.6)  # 0.5 and ten steps from two workers


async def test_retrieval_counts_from_both_add_up(pair: tuple[ReplicaStore, ReplicaStore]) -> None:
    a, b = pair
    memory = record("m1")
    await b.add([memory], vectors_for([memory]))
    await asyncio.gather(
        a.increment_retrievals("t1", ["m1", "m1"]), b.increment_retrievals("t1", ["m1"])
    )
    for store in (a, b):
        await store.catch_up()  # the follower's work: reads do not wait for counts (adr/0154)
        got = await store.get("t1", "m1")
        assert got is not None
        assert got.retrieval_count == 3


def count_calls(
    store: EdgeStore, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, tuple[str, ...]]]:
    """Every ``increment_retrievals`` call ``store`` gets from now on, as (tenant, ids)."""
    calls: list[tuple[str, tuple[str, ...]]] = []
    increment = store.increment_retrievals

    async def counted(tenant: str, ids: Sequence[str]) -> None:
        calls.append((tenant, tuple(ids)))
        await increment(tenant, ids)

    monkeypatch.setattr(store, "increment_retrievals", counted)
    return calls


@pytest.mark.parametrize(
    ("entries", "limit", "expected"),
    [
        pytest.param([], 10, [], id="nothing"),
        pytest.param(
            [((INCREMENT, ("t1", ("a",))), 5), ((INCREMENT, ("t1", ("b", "a"))), 9)],
            10,
            [((INCREMENT, ("t1", ("a", "b", "a"))), 9)],
            id="a run of one tenant is one entry at the run's end",
        ),
        pytest.param(
            [
                ((INCREMENT, ("t1", ("a",))), 5),
                ((DELETE, ("t1", "a")), 8),
                ((INCREMENT, ("t1", ("b",))), 12),
            ],
            10,
            [
                ((INCREMENT, ("t1", ("a",))), 5),
                ((DELETE, ("t1", "a")), 8),
                ((INCREMENT, ("t1", ("b",))), 12),
            ],
            id="another write ends the run: the order is kept",
        ),
        pytest.param(
            [((INCREMENT, ("t1", ("a",))), 5), ((INCREMENT, ("t2", ("a",))), 9)],
            10,
            [((INCREMENT, ("t1", ("a",))), 5), ((INCREMENT, ("t2", ("a",))), 9)],
            id="another tenant starts a new run",
        ),
        pytest.param(
            [
                ((INCREMENT, ("t1", ("a", "b"))), 5),
                ((INCREMENT, ("t1", ("c",))), 9),
                ((INCREMENT, ("t1", ("d", "e"))), 14),
            ],
            3,
            [((INCREMENT, ("t1", ("a", "b", "c"))), 9), ((INCREMENT, ("t1", ("d", "e"))), 14)],
            id="a run stops at the limit of ids",
        ),
        pytest.param(
            [((ADD, ("records", "vectors")), 5), ((INCREMENT, ("t1", ("a",))), 9)],
            10,
            [((ADD, ("records", "vectors")), 5), ((INCREMENT, ("t1", ("a",))), 9)],
            id="other writes pass as they are",
        ),
    ],
)
def test_coalesced(entries: list[Any], limit: int, expected: list[Any]) -> None:
    assert list(coalesced(entries, limit)) == expected


async def test_another_workers_counts_are_applied_in_one_increment(
    pair: tuple[ReplicaStore, ReplicaStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every replica applies every worker's counts, one 64-id entry at a time as the counter
    writes them: a catch-up applies a run of them as one increment, with the same counts."""
    a, b = pair
    await stop_following(a, b)
    memories = [record("m1"), record("m2")]
    await a.add(memories, vectors_for(memories))
    await b.catch_up()
    calls = count_calls(b._replica, monkeypatch)
    for ids in (["m1"], ["m2", "m1"], ["m1"]):
        await a.increment_retrievals("t1", ids)
    await b.catch_up()
    assert calls == [("t1", ("m1", "m2", "m1", "m1"))]
    first, second = await b.get("t1", "m1"), await b.get("t1", "m2")
    assert first is not None
    assert second is not None
    assert (first.retrieval_count, second.retrieval_count) == (3, 1)


async def test_a_write_applies_its_own_entry_without_reading_it_back(
    pair: tuple[ReplicaStore, ReplicaStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer knows its entry: it reads the log only for what others appended before it,
    in the same call that takes the lock and appends (the lock is never held across a hop
    back to the event loop)."""
    a, b = pair
    await stop_following(a, b)
    memory = record("m1")
    await a.add([memory], vectors_for([memory]))
    await b.catch_up()
    reads: list[int] = []
    read = b._log.read

    def counted_read(position: int) -> tuple[list[tuple[Any, int]], int]:
        reads.append(position)
        return read(position)

    monkeypatch.setattr(b._log, "read", counted_read)
    await b.increment_retrievals("t1", ["m1"])
    assert reads == []
    await a.increment_retrievals("t1", ["m1", "m1"])
    await b.delete("t1", "m1")  # reads a's counts under the lock, then appends its own
    assert len(reads) == 1
    assert await b.get("t1", "m1") is None
    assert b._offset == b._log.end


async def test_a_read_does_not_wait_for_another_workers_retrieval_counts(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    """Applying every count another worker logged before each read put the reads of both
    workers in a queue behind the counts' catch-ups (adr/0154): a read applies nothing for
    them; the follower (``catch_up``) or the next write does, and a worker sees its own."""
    a, b = pair
    await stop_following(a, b)
    memory = record("m1")
    await a.add([memory], vectors_for([memory]))
    assert await b.get("t1", "m1") is not None
    applied = b._offset
    await a.increment_retrievals("t1", ["m1"])
    mine = await a.get("t1", "m1")
    assert mine is not None
    assert mine.retrieval_count == 1
    assert await b.get("t1", "m1") is not None
    assert await b.search("t1", query("m1"))
    assert b._offset == applied  # b applied nothing to answer those
    await b.catch_up()
    counted = await b.get("t1", "m1")
    assert counted is not None
    assert counted.retrieval_count == 1


async def test_a_read_waits_for_a_write_logged_behind_retrieval_counts(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    """The barrier moves past the counts with the next other write: a read sees that write
    (adr/0105's bound) and the counts before it."""
    a, b = pair
    await stop_following(a, b)
    first = record("m1")
    await a.add([first], vectors_for([first]))
    await a.increment_retrievals("t1", ["m1", "m1"])
    later = record("m2")
    await a.add([later], vectors_for([later]))
    assert await b.get("t1", "m2") is not None
    counted = await b.get("t1", "m1")
    assert counted is not None
    assert counted.retrieval_count == 2
    # b past the counts: only a barrier at the write's own end (not the count's before it)
    # makes b's read wait for the write.
    await a.increment_retrievals("t1", ["m1"])
    await b.catch_up()
    third = record("m3")
    await a.add([third], vectors_for([third]))
    assert await b.get("t1", "m3") is not None


async def test_a_turn_rewritten_by_one_keeps_the_other_workers_retrieval_counts(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    """Forgetting a deleted memory's copies (adr/0144) writes back the turns a ``list`` read,
    their counts with them: a list that left the other worker's counts to the follower
    (adr/0154) wrote back the count from before them, on every replica."""
    a, b = pair
    await stop_following(a, b)
    key = context_key("Secret text")
    turn = record(
        "turn", source=DIALOG_SOURCE, content="Yes", context="Secret text", context_key=key
    )
    await a.add([turn], vectors_for([turn]))
    await b.increment_retrievals("t1", ["turn", "turn"])
    gone = record("gone", source=DIALOG_SOURCE, content="Secret text")
    assert await MemoryService(a, HashEmbedder()).forget_copies("t1", [gone]) == 1
    for store in (a, b):
        await store.catch_up()
        got = await store.get("t1", "turn")
        assert got is not None
        assert (got.context, got.retrieval_count) == ("", 2)


async def test_delete_user_through_one_is_seen_by_the_other(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    a, b = pair
    mine = [record("m1"), record("m2"), record("m3", user="u2")]
    await a.add(mine, vectors_for(mine))
    assert await b.delete_user("t1", "u1") == 2
    assert await a.count("t1") == 1


async def test_two_workers_superseding_one_memory_at_once_have_one_winner(
    pair: tuple[ReplicaStore, ReplicaStore], tmp_path: Path
) -> None:
    """Issue 17's reconciliation in two workers at once: one logged conditional write wins,
    the other changes nothing, and nothing is embedded again (the stored vector stays)."""
    a, b = pair
    memory = record("old", content="the user lives in porto")
    await a.add([memory], vectors_for([memory]))
    embedder = CountingEmbedder()
    workers = [MemoryService(store, embedder) for store in (a, b)]
    for _ in range(3):  # a race is a matter of timing: several rounds, each on a fresh memory
        results = await asyncio.gather(
            workers[0].supersede("t1", "old", "by-a"), workers[1].supersede("t1", "old", "by-b")
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        for store in (a, b):
            got = await store.get("t1", "old")
            assert got is not None
            assert got.superseded_by == winners[0].superseded_by
        await a.add([memory], vectors_for([memory]))  # live again for the next round
    assert embedder.calls == []
    log = WriteLog(tmp_path / LOG_FILE)
    entries, _ = log.read(0)
    log.close()
    assert [op for (op, _), _ in entries].count(SUPERSEDE) == 3  # only the winners are logged


async def test_a_replica_opened_later_replays_the_log(tmp_path: Path) -> None:
    first = await replica(tmp_path)
    memory = record("m1")
    await first.add([memory], vectors_for([memory]))
    await first.close()
    assert not list((tmp_path / REPLICAS_DIR).iterdir())  # a closed replica leaves no copy
    later = await replica(tmp_path)
    try:
        assert await later.get("t1", "m1") is not None
    finally:
        await later.close()


def allocated(directory: Path) -> int:
    """Bytes the files under ``directory`` take on disk (holes take none)."""
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*") if path.is_file())


async def test_a_replica_copies_the_primary_without_its_holes(tmp_path: Path) -> None:
    """The WAL's segments are 32 MB files of mostly holes: the copy keeps them holes."""
    primary = await EdgeStore.open(tmp_path, dimensions=DIM)
    memory = record("m1")
    await primary.add([memory], vectors_for([memory]))
    await primary.close()
    copied = await replica(tmp_path)
    try:
        shard = allocated(tmp_path / SHARD_DIR)
        assert allocated(copied.directory / SHARD_DIR) <= shard + 1024 * 1024
        assert await copied.get("t1", "m1") is not None
    finally:
        await copied.close()


async def test_absorb_moves_the_log_into_the_primary(tmp_path: Path) -> None:
    writer = await replica(tmp_path)
    memories = [record("m1"), record("m2")]
    await writer.add(memories, vectors_for(memories))
    await writer.delete("t1", "m2")
    await writer.close()
    primary = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await absorb_log(primary, tmp_path) == 2
        assert (tmp_path / LOG_FILE).stat().st_size == 0
        assert not (tmp_path / REPLICAS_DIR).exists()
        assert await primary.count("t1") == 1
    finally:
        await primary.close()
    copied = await replica(tmp_path)  # now a copy of the primary, nothing to replay
    try:
        assert await copied.get("t1", "m1") is not None
    finally:
        await copied.close()


async def test_a_replica_starts_with_the_primarys_retrieval_counts(tmp_path: Path) -> None:
    """The embedded store keeps counts beside its shard (adr/0103): a copy takes them along."""
    writer = await replica(tmp_path)
    memory = record("m1")
    await writer.add([memory], vectors_for([memory]))
    await writer.increment_retrievals("t1", ["m1", "m1"])
    await writer.close()
    primary = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await absorb_log(primary, tmp_path)  # the log is empty afterwards: only the table counts
    finally:
        await primary.close()
    copied = await replica(tmp_path)
    try:
        found = await copied.get("t1", "m1")
        assert found is not None
        assert found.retrieval_count == 2
    finally:
        await copied.close()


async def test_a_purge_through_one_reaches_the_other(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    a, b = pair
    ends = datetime(2030, 1, 1, tzinfo=UTC)
    memories = [record("gone", expires_at=ends), record("kept")]
    await a.add(memories, vectors_for(memories))
    assert await b.get("t1", "gone") is not None  # not expired yet: still there
    assert await a.purge_expired(ends + timedelta(days=1)) == 1
    assert await b.get("t1", "gone") is None
    assert await b.count("t1") == 1
    assert await b.purge_expired(ends + timedelta(days=1)) == 0  # a second purge finds nothing


async def test_repeats_see_the_other_replicas_writes(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    a, b = pair
    memory = record("m1", content="I live in Porto.")
    await a.add([memory], vectors_for([memory]))
    key = words_key(memory.content)
    found = await b.repeats("t1", [("u1", key)], datetime(2026, 1, 1, tzinfo=UTC))
    assert [r.id for r in found] == ["m1"]


async def test_one_process_applies_a_log_left_by_workers(tmp_path: Path) -> None:
    """A multi-worker run killed before its supervisor applied the log loses nothing."""
    worker = await replica(tmp_path)
    memory = record("m1")
    await worker.add([memory], vectors_for([memory]))
    await worker.close()
    settings = StoreSettings(kind="edge", data_dir=str(tmp_path), hybrid=True)
    store = await open_store(settings, dimensions=DIM)
    try:
        assert await store.get("t1", "m1") is not None
    finally:
        await store.close()


async def test_a_write_cancelled_while_waiting_for_the_lock_releases_it(
    pair: tuple[ReplicaStore, ReplicaStore], tmp_path: Path
) -> None:
    a, b = pair
    holder = a._log  # another process's writer in the middle of its write
    await asyncio.to_thread(holder.lock)
    memory = record("m1")
    waiting = asyncio.create_task(b.add([memory], vectors_for([memory])))
    for _ in range(1000):  # until b's write has begun: it waits for the log's lock then
        if b._lock.locked():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    holder.unlock()
    # The cancelled write still lands once the lock is free, and lets the lock go.
    for _ in range(200):
        if await a.get("t1", "m1") is not None:
            break
        await asyncio.sleep(0.05)
    assert await a.get("t1", "m1") is not None
    fd = os.open(tmp_path / LOG_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if anyone still holds it
    finally:
        os.close(fd)


async def test_a_writer_paused_after_appending_blocks_no_other_worker(
    pair: tuple[ReplicaStore, ReplicaStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stopped between appending its entry and applying it (adr/0141): the log's
    lock is free, and another worker writes, reads that entry and its own, meanwhile."""
    a, b = pair
    applying, resume = asyncio.Event(), asyncio.Event()
    add = a._replica.add

    async def paused_add(records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        applying.set()
        await resume.wait()
        await add(records, vectors)

    monkeypatch.setattr(a._replica, "add", paused_add)
    first = record("m1", content="ana keeps bees")
    writing = asyncio.create_task(a.add([first], vectors_for([first])))
    await applying.wait()  # a has appended m1 and is applying it, paused
    try:
        fd = os.open(tmp_path / LOG_FILE, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while a writer holds it
        finally:
            os.close(fd)
        second = record("m2", content="ana plays the cello")
        await b.add([second], vectors_for([second]))
        assert await b.get("t1", "m1") is not None
        assert await b.get("t1", "m2") is not None
        assert not writing.done()
    finally:
        resume.set()
    await writing
    assert await a.get("t1", "m1") is not None
    assert await a.get("t1", "m2") is not None


async def test_vectors_of_every_row_reach_the_other_replica(
    pair: tuple[ReplicaStore, ReplicaStore],
) -> None:
    a, b = pair
    memories = [record(f"m{i}", content=f"note number {i} about topic {i}") for i in range(5)]
    vectors = vectors_for(memories)
    await a.add(memories, vectors)
    for memory, vector in zip(memories, vectors, strict=True):
        hits = await b.search("t1", SearchQuery(np.asarray(vector), "", "u1", None, 1))
        assert hits[0].record.id == memory.id


@pytest.fixture
async def folding(tmp_path: Path) -> AsyncIterator[tuple[EdgeStore, WriteLog]]:
    """The supervisor's side: the primary, up to date, and a handle on the log. Requested
    before ``pair``, so the replicas copy it and take their slots after its absorb."""
    primary = await EdgeStore.open(tmp_path, dimensions=DIM)
    await absorb_log(primary, tmp_path)
    log = WriteLog(tmp_path / LOG_FILE)
    yield primary, log
    log.close()
    await primary.close()


async def test_a_fold_moves_what_every_replica_applied_off_the_log(
    folding: tuple[EdgeStore, WriteLog], pair: tuple[ReplicaStore, ReplicaStore], tmp_path: Path
) -> None:
    """The log is bounded while the workers run (adr/0120): the supervisor applies it to the
    primary and cuts it; writes, reads and a replica started afterwards lose nothing."""
    (primary, log), (a, b) = folding, pair
    memories = [record(f"m{i}", content=f"note {i} about topic {i}") for i in range(20)]
    for memory in memories:
        await a.add([memory], vectors_for([memory]))
    await b.increment_retrievals("t1", ["m0", "m0"])
    grown = log.size()
    await a.catch_up()  # b's counts too: a read leaves them to the follower (adr/0154)
    assert await a.count("t1") == 20
    assert await fold_log(primary, log, min_bytes=grown + 1) == 0  # not due yet
    assert await fold_log(primary, log, min_bytes=grown) == grown
    assert log.size() == 0
    assert await primary.count("t1") == 20
    later = record("late")
    await b.add([later], vectors_for([later]))  # writes go on after the cut
    assert await a.get("t1", "late") is not None
    copied = await replica(tmp_path)  # the folded primary plus the rest of the log
    try:
        assert await copied.count("t1") == 21
        found = await copied.get("t1", "m0")
        assert found is not None
        assert found.retrieval_count == 2  # the fold saved the primary's counts table
    finally:
        await copied.close()


async def test_a_fold_keeps_what_a_replica_has_not_applied(
    folding: tuple[EdgeStore, WriteLog], pair: tuple[ReplicaStore, ReplicaStore]
) -> None:
    (primary, log), (writer, idle) = folding, pair
    assert idle._follower is not None
    idle._follower.cancel()  # a worker that has not caught up yet, however long the test takes
    memories = [record("m1"), record("m2")]
    await writer.add(memories, vectors_for(memories))
    size = log.size()
    assert await fold_log(primary, log, min_bytes=1) == 0
    assert log.size() == size
    assert await primary.count("t1") == 2  # the primary has it all the same
    assert await idle.count("t1") == 2
    assert await fold_log(primary, log, min_bytes=1) == size  # now it goes


async def test_a_fold_applies_a_run_of_counts_in_one_increment(
    folding: tuple[EdgeStore, WriteLog],
    pair: tuple[ReplicaStore, ReplicaStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (primary, log), (a, b) = folding, pair
    memory = record("m1")
    await a.add([memory], vectors_for([memory]))
    calls = count_calls(primary, monkeypatch)
    for store in (a, b, a):
        await store.increment_retrievals("t1", ["m1"])
    await fold_log(primary, log, min_bytes=1)
    assert calls == [("t1", ("m1", "m1", "m1"))]
    folded = await primary.get("t1", "m1")
    assert folded is not None
    assert folded.retrieval_count == 3


async def test_an_idle_replica_follows_the_log_and_lets_it_be_cut(
    folding: tuple[EdgeStore, WriteLog], pair: tuple[ReplicaStore, ReplicaStore]
) -> None:
    """A worker that gets no requests still catches up, so folds can cut (adr/0120)."""
    (primary, log), (writer, _idle) = folding, pair
    memory = record("m1")
    await writer.add([memory], vectors_for([memory]))
    size = log.size()
    for _ in range(600):  # the idle one makes no call: it follows every LOG_FOLD_CHECK_S
        if await fold_log(primary, log, min_bytes=1):
            break
        await asyncio.sleep(0.05)
    assert log.size() == 0 < size


async def test_the_supervisors_folder_keeps_the_log_small(
    folding: tuple[EdgeStore, WriteLog], pair: tuple[ReplicaStore, ReplicaStore], tmp_path: Path
) -> None:
    (primary, log), (writer, _) = folding, pair
    folder = LogFolder(primary, tmp_path, min_bytes=1).start()
    try:
        memory = record("m1")
        await writer.add([memory], vectors_for([memory]))
        assert log.size() > 0
        for _ in range(600):  # the folder looks every LOG_FOLD_CHECK_S
            if log.size() == 0:
                break
            await asyncio.sleep(0.05)
        assert log.size() == 0
        assert await primary.count("t1") == 1
    finally:
        folder.stop()


async def test_close_keeps_a_copy_an_index_build_still_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = await replica(tmp_path)
    idle = await replica(tmp_path)
    monkeypatch.setattr(
        replica_module, "building", lambda path: path == running.directory / SHARD_DIR
    )
    await running.close()
    await idle.close()
    assert running.directory.exists()  # left to the next start's absorb_log
    assert not idle.directory.exists()


class FlushCounting:
    """A replica's shard, counting its flushes."""

    def __init__(self, shard: Any) -> None:
        self._shard, self.flushes = shard, 0

    def flush(self) -> None:
        self.flushes += 1
        self._shard.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


async def test_a_replica_under_writes_never_flushes_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its copy is deleted at close, unread: the log and the primary hold the writes, so a
    flush (the GIL held 0.03-0.3 s) buys nothing (adr/0179)."""
    monkeypatch.setattr(edge_maintenance, "FLUSH_AFTER_POINTS", 1)  # every write is due
    store = await replica(tmp_path)
    counting = FlushCounting(store._replica._shard)
    monkeypatch.setattr(store._replica, "_shard", counting)
    for i in range(3):
        rows = [record(f"m{i}")]
        await store.add(rows, vectors_for(rows, DIM))
        await store.increment_retrievals("t1", [f"m{i}"])
    assert await store.set_usefulness("t1", "m0", 0.9) is not None
    await asyncio.to_thread(store._replica._maintenance.settle)
    assert counting.flushes == 0
    await store.close()
    assert counting.flushes == 0
    assert not store.directory.exists()
