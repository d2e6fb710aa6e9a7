"""EdgeStore specifics beyond the contract: crash durability, offloading, index builds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe

from proxy.context.profiles import text_profile
from proxy.context.records import Candidate
from proxy.errors import StoreError
from proxy.memory import edge, edge_counts, edge_maintenance
from proxy.memory.edge import EdgeStore, candidate, is_engine_error
from proxy.memory.edge_ids import Scheme
from proxy.memory.edge_query import FEW_PARAMS, search_hits, turns_filter
from proxy.memory.edge_shard import INDEXING_THRESHOLD_KB
from proxy.memory.edge_turns import DialogTurns
from proxy.memory.filters import DIALOG_SOURCE
from proxy.memory.near import search_then_turns
from proxy.memory.points import DENSE_VECTOR, EXPIRES_KEY, EXPIRES_TS_KEY
from proxy.memory.record_cache import RecordCache
from proxy.memory.store import SearchQuery, TurnsQuery
from tests.fakes.ticker import loop_ticks
from tests.memory.support import record, vector_for, vectors_for

ROOT = Path(__file__).resolve().parents[2]
DIM = 16
BATCH = 200
# The writer acknowledges each batch on stdout only after ``add`` returned.
WRITER = textwrap.dedent(
    """
    import asyncio, sys
    import numpy as np
    from proxy.memory.edge import EdgeStore
    from tests.memory.support import record

    async def main() -> None:
        store = await EdgeStore.open(sys.argv[1], dimensions=16)
        rng = np.random.default_rng(0)
        batch = 0
        while True:
            records = [record(f"b{batch}-{i}") for i in range(200)]
            await store.add(records, rng.standard_normal((200, 16)).astype(np.float32))
            print(f"ack {batch}", flush=True)
            batch += 1

    asyncio.run(main())
    """
)


def write_until_killed(path: Path, batches: int) -> int:
    """Run the writer in a child process, SIGKILL it after ``batches`` acks; return the last ack."""
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    acked = -1
    try:
        for line in child.stdout:
            acked = int(line.split()[1])
            if acked >= batches - 1:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return acked


async def test_every_acknowledged_add_survives_sigkill(tmp_path: Path) -> None:
    acked = await asyncio.to_thread(write_until_killed, tmp_path, 9)
    assert acked >= 8
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        for batch in range(acked + 1):
            for i in (0, BATCH // 2, BATCH - 1):
                assert await store.get("t1", f"b{batch}-{i}") is not None, (batch, i)
        assert await store.count("t1") >= (acked + 1) * BATCH
    finally:
        await store.close()


async def test_search_runs_off_the_event_loop(tmp_path: Path) -> None:
    """While a search runs on the store's threads, other coroutines keep running."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        records = [record(f"m{i}") for i in range(500)]
        await store.add(records, vectors_for(records, DIM))
        query = SearchQuery(vector_for("m1", DIM), "m1", "u1", None, 50)
        async with loop_ticks() as ticks:
            results = await asyncio.gather(*(store.search("t1", query) for _ in range(20)))
        assert all(len(r) == 50 for r in results)
        assert ticks.count > 0
    finally:
        await store.close()


async def test_optimize_builds_the_index_and_search_still_agrees(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        records = [record(f"m{i}", content=f"note {i}") for i in range(2000)]
        await store.add(records, vectors_for(records, DIM))
        query = SearchQuery(vector_for("note 42", DIM), "note 42", "u1", None, 5)
        before = await store.search("t1", query)
        await store.optimize()
        after = await store.search("t1", query)
        assert before[0].record.id == after[0].record.id == "m42"
        assert await store.count("t1") == 2000
    finally:
        await store.close()


# Enough vector bytes (10 MB) for an index build to make an indexed, int8-quantized segment.
QUANTIZED_DIM, QUANTIZED_POINTS = 1024, 2600


def quantized_scores_differ(store: EdgeStore, vector: np.ndarray) -> bool:
    """True if the shard holds int8 copies: scores without rescoring are then approximate."""
    nearest = qe.Query.Nearest(vector.tolist(), using=DENSE_VECTOR)
    raw, exact = (
        store._shard.query(  # the engine itself, below the store's API
            qe.QueryRequest(
                limit=1,
                query=nearest,
                params=qe.SearchParams(quantization=qe.QuantizationSearchParams(**options)),
            )
        )[0].score
        for options in ({"rescore": False}, {"ignore": True})
    )
    return abs(raw - exact) > 1e-6


@pytest.mark.parametrize("hybrid", [False, True], ids=["dense", "hybrid"])
async def test_quantized_segments_still_give_exact_cosines(tmp_path: Path, hybrid: bool) -> None:
    """After an index build the dense branch reads int8 copies; cosines must stay exact."""
    store = await EdgeStore.open(tmp_path, dimensions=QUANTIZED_DIM, hybrid=hybrid)
    try:
        records = [  # dialog turns, so the neighbour lookup finds them too
            record(f"m{i}", content=f"note {i} about item {i % 13}", source=DIALOG_SOURCE)
            for i in range(QUANTIZED_POINTS)
        ]
        matrix = vectors_for(records, QUANTIZED_DIM)
        await store.add(records, matrix)
        await store.optimize()
        probe = vector_for("probe", QUANTIZED_DIM)
        assert quantized_scores_differ(store, probe)  # else this test would prove nothing
        for text in ("note 7", "item 3", "something else entirely", "note 2599 about item 12"):
            query = SearchQuery(vector_for(text, QUANTIZED_DIM), text, "u1", None, 20)
            hits = await store.search("t1", query)
            exact = matrix @ query.vector
            for hit in hits:
                row = int(hit.record.id[1:])
                assert hit.similarity == pytest.approx(max(0.0, float(exact[row])), abs=1e-5)
        # The neighbour lookup's cosines too (``FEW_PARAMS``: the originals only).
        times = (records[5].created_at,)
        turns = TurnsQuery("u1", matrix[5], times, 1e9, LIVE_AT)
        near = await store.turns_near("t1", turns)
        assert near
        for hit in near:
            row = int(hit.record.id[1:])
            assert hit.similarity == pytest.approx(
                max(0.0, float(matrix[row] @ matrix[5])), abs=1e-5
            )
        # A stored vector finds itself first, at cosine 1 (HNSW order is approximate beyond that).
        for row in (7, 1234, QUANTIZED_POINTS - 1):
            query = SearchQuery(matrix[row], records[row].content, "u1", None, 5)
            hits = await store.search("t1", query)
            assert hits[0].record.id == f"m{row}"
            assert hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    finally:
        await store.close()


async def test_an_index_build_indexes_a_store_below_qdrants_default_threshold(
    tmp_path: Path,
) -> None:
    """2.1 MB of vectors (Qdrant indexes from 10 MB): the build must still make an indexed,
    int8-quantized segment, else a 10k-memory store searches by an unquantized exact scan."""
    dims = 256
    points = INDEXING_THRESHOLD_KB * 1024 // (dims * 4) + 100
    store = await EdgeStore.open(tmp_path, dimensions=dims)
    try:
        records = [record(f"m{i}", content=f"note {i}") for i in range(points)]
        await store.add(records, vectors_for(records, dims))
        probe = vector_for("probe", dims)
        assert not quantized_scores_differ(store, probe)  # unindexed: no int8 copies yet
        await store.optimize()
        assert quantized_scores_differ(store, probe)
    finally:
        await store.close()


LIVE_AT = datetime(2026, 3, 1, tzinfo=UTC)


def spy_searches(monkeypatch: pytest.MonkeyPatch) -> list[datetime | None]:
    """Record the ``live_at`` of every shard search the store runs (``None``: no liveness)."""
    seen: list[datetime | None] = []

    def spy(shard: qe.EdgeShard, tenant: str, query: SearchQuery, *args: Any, **kw: Any) -> Any:
        seen.append(query.live_at)
        return search_hits(shard, tenant, query, *args, **kw)

    monkeypatch.setattr(edge, "search_hits", spy)
    return seen


async def live_ids(store: EdgeStore, tenant: str = "t1") -> list[str]:
    """The ids a live search of ``tenant`` for "a red van" returns."""
    text = "a red van"
    query = SearchQuery(vector_for(text, DIM), text, "u1", None, 5, live_at=LIVE_AT)
    return [c.record.id for c in await store.search(tenant, query)]


async def test_a_tenant_without_dying_memories_is_searched_without_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_searches(monkeypatch)
    store = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True)
    try:
        kept = record("m1", content="a red van")
        await store.add([kept], vectors_for([kept], DIM))
        elsewhere = record("x", tenant="t2", content="a red van", expires_at=LIVE_AT)
        await store.add([elsewhere], vectors_for([elsewhere], DIM))
        assert await live_ids(store) == ["m1"]
        assert seen == [None]
        # One expiring memory written: from the next search on, one search with the condition.
        dying = record("m2", content="a red van", expires_at=LIVE_AT)
        await store.add([dying], vectors_for([dying], DIM))
        seen.clear()
        assert await live_ids(store) == ["m1"]
        assert seen == [LIVE_AT]
    finally:
        await store.close()


async def test_after_a_restart_the_shard_says_which_tenants_need_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [
        record("m1", content="a red van"),
        record("m2", content="a red van", superseded_by="m1"),
        record("m3", tenant="t2", content="a red van"),
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    await store.add(records, vectors_for(records, DIM))
    await store.close()
    seen = spy_searches(monkeypatch)
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await live_ids(store) == ["m1"]
        assert seen == [LIVE_AT]
        seen.clear()
        assert await live_ids(store, "t2") == ["m3"]
        assert seen == [None]
    finally:
        await store.close()


async def test_a_dead_memory_found_without_the_condition_is_searched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write racing the shard lookup (simulated: the store is told the tenant has none)."""
    records = [record("m1", content="a red van"), record("m2", content="a red van")]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await store.add(records, vectors_for(records, DIM))
        store._lifecycle.may_hold("t1", lambda: False)  # looked up before the write below
        expiry = {EXPIRES_KEY: LIVE_AT.isoformat(), EXPIRES_TS_KEY: LIVE_AT.timestamp()}
        # The write as add makes it, without add's note; the shard holds it from now on.
        store._shard.update(qe.UpdateOperation.set_payload([store._point_id("t1", "m2")], expiry))
        store._records.clear()
        seen = spy_searches(monkeypatch)
        assert await live_ids(store) == ["m1"]
        assert seen == [None, LIVE_AT]
    finally:
        await store.close()


async def test_a_supersede_makes_the_tenants_searches_check_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant known to hold no dead memory gets one by a supersede (a payload update, not
    an add): its next search runs once, with the liveness condition."""
    records = [record("m1", content="a red van"), record("m2", content="a red van")]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await store.add(records, vectors_for(records, DIM))
        seen = spy_searches(monkeypatch)
        assert sorted(await live_ids(store)) == ["m1", "m2"]
        assert seen == [None]  # known: nothing of the tenant can be dead
        assert await store.supersede("t1", "m2", "m1") is not None
        seen.clear()
        assert await live_ids(store) == ["m1"]
        assert seen == [LIVE_AT]
    finally:
        await store.close()


async def test_background_flush_and_index_build_keep_every_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(edge_maintenance, "FLUSH_AFTER_POINTS", 1)  # flush after every write
    store = await EdgeStore.open(tmp_path, dimensions=DIM, optimize_after=100)
    records = [record(f"m{i}") for i in range(600)]
    for start in range(0, 600, 50):
        batch = records[start : start + 50]
        await store.add(batch, vectors_for(batch, DIM))
    query = SearchQuery(vector_for(records[7].content, DIM), "", "u1", None, 3)
    assert (await store.search("t1", query))[0].record.id == "m7"
    await store.close()  # waits for a running build and flush
    assert "failed" not in caplog.text
    reopened = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await reopened.count("t1") == 600
    finally:
        await reopened.close()


@pytest.mark.parametrize(
    ("error", "engine"),
    [
        (Exception("Service runtime error: Shard is not initialized"), True),
        (OSError(28, "No space left on device"), True),
        (ValueError("failed to parse x as UUID"), False),  # what we passed it: a bug
        (TypeError("argument 'points'"), False),
        (KeyError("k"), False),
    ],
)
def test_engine_errors_are_told_from_bugs(error: Exception, engine: bool) -> None:
    assert is_engine_error(error) is engine


# pyo3's panic type as the engine raises it: a BaseException of the module pyo3_runtime.
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


@pytest.mark.parametrize(
    ("error", "engine"),
    [
        (PanicException("called `Option::unwrap()` on a `None` value"), True),
        (type("Panic", (PanicException,), {})("a subclass"), True),
        (type("PanicException", (BaseException,), {})("another module's"), False),
        (asyncio.CancelledError(), False),
        (KeyboardInterrupt(), False),
    ],
)
def test_engine_panics_are_engine_errors(error: BaseException, engine: bool) -> None:
    assert is_engine_error(error) is engine


async def test_engine_failures_are_store_errors(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    shard = store._shard
    shard.close()  # every call now fails inside the engine
    with pytest.raises(StoreError) as caught:
        await store.count("t1")
    assert caught.value.__cause__ is not None
    assert type(caught.value.__cause__) is Exception
    store._closed = True  # nothing left to flush or close
    store._executor.shutdown()


async def test_store_calls_hop_to_its_threads_through_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lighter hand-off (``proxy/handoff.py``): not ``run_in_executor``'s chained futures."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    handed: list[str] = []
    real = edge.run_on

    async def counted(executor: Any, func: Any, *args: Any) -> Any:
        handed.append(func.__name__)
        return await real(executor, func, *args)

    monkeypatch.setattr(edge, "run_on", counted)
    try:
        assert await store.count("t1") == 0
        assert handed
    finally:
        await store.close()


async def test_a_store_grown_over_several_opens_gets_its_index(tmp_path: Path) -> None:
    """Points written before this open count toward the build threshold (adr/0124): no single
    process here writes ``optimize_after`` points, together they do."""
    dims = 256
    points = INDEXING_THRESHOLD_KB * 1024 // (dims * 4) + 100  # enough for an indexed segment
    records = [record(f"m{i}", content=f"note {i}") for i in range(points)]
    first, rest = records[: points // 2], records[points // 2 :]
    threshold = len(rest) + 100
    store = await EdgeStore.open(tmp_path, dimensions=dims, optimize_after=threshold)
    await store.add(first, vectors_for(first, dims))
    await store.close()
    store = await EdgeStore.open(tmp_path, dimensions=dims, optimize_after=threshold)
    try:
        assert edge_maintenance.unindexed_points(store._shard) == len(first)
        await store.add(rest, vectors_for(rest, dims))
        await asyncio.to_thread(edge_maintenance.wait_for_build, tmp_path / edge.SHARD_DIR)
        assert edge_maintenance.unindexed_points(store._shard) == 0
        assert quantized_scores_differ(store, vector_for("probe", dims))
    finally:
        await store.close()


async def test_a_store_left_unindexed_by_a_close_builds_at_the_next_open(
    tmp_path: Path,
) -> None:
    """A process stopped during its build (the work lost, every point outside the graph) is
    followed by one that only reads: it builds without waiting for a write (adr/0189)."""
    dims = 256
    points = INDEXING_THRESHOLD_KB * 1024 // (dims * 4) + 100  # enough for an indexed segment
    records = [record(f"m{i}", content=f"note {i}") for i in range(points)]
    store = await EdgeStore.open(tmp_path, dimensions=dims, optimize_after=None)
    await store.add(records, vectors_for(records, dims))
    await store.close()  # no build ran: the files a close mid-build leaves
    store = await EdgeStore.open(tmp_path, dimensions=dims, optimize_after=points)
    try:
        await asyncio.to_thread(edge_maintenance.wait_for_build, tmp_path / edge.SHARD_DIR)
        assert edge_maintenance.unindexed_points(store._shard) == 0
        assert await store.count("t1") == points
    finally:
        await store.close()


async def test_a_store_below_the_threshold_at_open_starts_no_build(tmp_path: Path) -> None:
    dims = 256
    points = INDEXING_THRESHOLD_KB * 1024 // (dims * 4) + 100
    records = [record(f"m{i}", content=f"note {i}") for i in range(points)]
    store = await EdgeStore.open(tmp_path, dimensions=dims, optimize_after=None)
    await store.add(records, vectors_for(records, dims))
    await store.close()
    store = await EdgeStore.open(tmp_path, dimensions=dims, optimize_after=points + 1)
    try:
        assert not edge_maintenance.building(tmp_path / edge.SHARD_DIR)
        assert edge_maintenance.unindexed_points(store._shard) == points
    finally:
        await store.close()


async def dialog_store(
    tmp_path: Path, apart: timedelta = timedelta(minutes=1)
) -> tuple[EdgeStore, SearchQuery]:
    """A store of ten dialog turns ``apart`` from each other, and a live query whose best hit
    is t5."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    turns = [
        replace(record(f"t{i}", source="conversation"), created_at=at + apart * i)
        for i in range(10)
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    await store.add(turns, vectors_for(turns, DIM))
    text = turns[5].content
    return store, SearchQuery(vector_for(text, DIM), text, "u1", None, 1, live_at=at)


async def test_a_search_with_its_neighbour_turns_takes_one_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The neighbour lookup runs in the search's own call on the store's threads: a second
    hop cost ~0.13 ms of every chat request's search stage (docs/benchmarks.md)."""
    store, query = await dialog_store(tmp_path)
    hops: list[str] = []
    run = store._run

    async def counted(func: Any, *args: Any) -> Any:
        hops.append(func.__name__)
        return await run(func, *args)

    monkeypatch.setattr(store, "_run", counted)
    try:
        found = await store.search_near("t1", query, 1, 90.0)
        assert [hit.record.id for hit in found.hits] == ["t5"]
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t4", "t6"]
        assert len(hops) == 1
    finally:
        await store.close()


async def test_seeds_alone_in_their_windows_skip_the_adjacency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns an hour apart: the index lists only the seed in its window, a hit already, so no
    turn can be added and ``near_turns`` (the hits' ids, a sort) is not run at all."""
    store, query = await dialog_store(tmp_path, timedelta(hours=1))
    await store.warmed()

    def unexpected(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("adjacency computed for seeds alone in their windows")

    monkeypatch.setattr(edge, "near_turns", unexpected)
    monkeypatch.setattr(store, "_turns_near_sync", unexpected)
    try:
        found = await store.search_near("t1", query, 1, 90.0)
        assert [hit.record.id for hit in found.hits] == ["t5"]
        assert found.turns == []
    finally:
        await store.close()


@pytest.mark.parametrize("lookup", ["_turns_from_index", "_turns_near_sync"])
async def test_a_failing_neighbour_lookup_in_the_search_keeps_the_hits(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    lookup: str,
) -> None:
    """The lookup's failure leaves the hits and says the turns are missing (``None``), so the
    retriever does not cache the result; the search's own failures still raise. Either
    lookup: from the dialog turns' index, or the engine's (the index not built)."""
    store, query = await dialog_store(tmp_path)
    await store.warmed()
    if lookup == "_turns_near_sync":
        store._turns = DialogTurns()  # never built: the engine is asked

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise Exception("Service runtime error: timed out")  # the engine's own error type

    monkeypatch.setattr(store, lookup, failing)
    try:
        found = await store.search_near("t1", query, 1, 90.0)
        assert [hit.record.id for hit in found.hits] == ["t5"]
        assert found.turns is None
        assert "neighbour turns failed" in caplog.text
        assert await store.search_near("t1", query, 0, 90.0) == edge.Found(found.hits, [])
        monkeypatch.setattr(store, "_search_once", failing)
        with pytest.raises(StoreError):
            await store.search_near("t1", query, 1, 90.0)
    finally:
        await store.close()


class CountedPoint:
    """A point the shard returned, counting reads of its ``id``: qdrant-edge builds a new
    ``uuid.UUID`` on every read (~0.7 us), so a search reads each id once."""

    def __init__(self, point: Any) -> None:
        self._point = point
        self.id_reads = 0

    @property
    def id(self) -> Any:
        self.id_reads += 1
        return self._point.id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._point, name)


class CountingShard:
    """The store's shard, handing out ``CountedPoint``s from its queries."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard
        self.points: list[CountedPoint] = []

    def query(self, request: qe.QueryRequest) -> list[CountedPoint]:
        found = [CountedPoint(point) for point in self._shard.query(request)]
        self.points.extend(found)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


@pytest.mark.parametrize("point_ids", ["uuid", "u64"])
async def test_a_hybrid_search_reads_each_returned_id_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point_ids: Scheme
) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True, point_ids=point_ids)
    try:
        records = [record(f"m{i}", content=f"note {i} about item {i % 7}") for i in range(40)]
        await store.add(records, vectors_for(records, DIM))
        counting = CountingShard(store._shard)
        monkeypatch.setattr(store, "_shard", counting)
        query = SearchQuery(vector_for("item 3", DIM), "note about item 3", "u1", None, 10)
        hits = await store.search("t1", query)
        assert len(hits) == 10
        assert len(counting.points) > len(hits)  # the lexical branch returned points too
        assert max(point.id_reads for point in counting.points) == 1
    finally:
        await store.close()


class ParamsShard:
    """The store's shard, keeping the requests of its dense queries."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard
        self.requests: list[qe.QueryRequest] = []

    def query(self, request: qe.QueryRequest) -> Any:
        self.requests.append(request)
        return self._shard.query(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


async def test_few_point_queries_score_the_original_vectors_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rescoring of lexical-only hits by id and the neighbour lookup score a handful of
    points: the originals alone, no int8 pass first (``edge_query.FEW_PARAMS``)."""
    store, query = await dialog_store(tmp_path)
    try:
        lexical = [
            record(f"w{i}", content=f"zebra {i} crossing", source="learnings") for i in range(3)
        ]
        await store.add(lexical, np.tile(-query.vector, (3, 1)))  # far from the query: BM25 only
        spy = ParamsShard(store._shard)
        monkeypatch.setattr(store, "_shard", spy)
        asked = replace(query, text="zebra crossing", top_k=2, lexical=True)
        found = await store.search_near("t1", asked, 1, 90.0)
        assert found.turns  # the lookup ran
        few = [r for r in spy.requests if repr(r.params) == repr(FEW_PARAMS)]
        assert len(few) == 2  # the rescoring by id, the neighbour lookup
        assert any("HasIdCondition" in repr(r.filter) for r in few)
        assert all(repr(r.params) != repr(FEW_PARAMS) for r in spy.requests if r not in few)
    finally:
        await store.close()


def test_a_candidate_built_past_the_frozen_init_is_a_candidate() -> None:
    """``edge.candidate`` sets the slots directly: only sound while ``Candidate`` has exactly
    these two fields and checks nothing when built."""
    made = candidate(record("m1"), 0.25)
    assert made == Candidate(record("m1"), 0.25)
    assert type(made) is Candidate
    assert [f.name for f in fields(Candidate)] == ["record", "similarity"]
    assert not hasattr(Candidate, "__post_init__")


class ReadCountingShard:
    """The store's shard, counting the payload reads of record-cache misses."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard
        self.retrieved: list[Any] = []

    def retrieve(self, ids: list[Any], *args: Any) -> Any:
        self.retrieved.extend(ids)
        return self._shard.retrieve(ids, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


async def reopened(tmp_path: Path, count: int, **options: Any) -> EdgeStore:
    """A store of ``count`` memories, closed and opened again (a restart)."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    records = [record(f"m{i}", content=f"note {i}") for i in range(count)]
    await store.add(records, vectors_for(records, DIM))
    await store.close()
    return await EdgeStore.open(tmp_path, dimensions=DIM, **options)


async def test_a_reopened_store_that_fits_its_record_cache_searches_without_payload_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart the record cache is filled in the background, so the first searches do
    not pay the payload reads a long-running process no longer pays (docs/benchmarks.md)."""
    store = await reopened(tmp_path, 1_200)  # more than one warm-up page
    try:
        assert await store.warmed() == 1_200
        counting = ReadCountingShard(store._shard)
        monkeypatch.setattr(store, "_shard", counting)
        query = SearchQuery(vector_for("note 7", DIM), "note 7", "u1", None, 20)
        hits = await store.search("t1", query)
        assert [hit.record.id for hit in hits][:1] == ["m7"]
        assert len(hits) == 20
        assert counting.retrieved == []
    finally:
        await store.close()


async def test_the_warm_up_profiles_every_text_for_the_assembler(tmp_path: Path) -> None:
    """A question meets memories no earlier one did: their words and signatures are computed
    while warming, not by the request that first meets them (proxy/context/profiles.py)."""
    text_profile.cache_clear()
    store = await reopened(tmp_path, 30)
    try:
        await store.warmed()
        assert {f"note {i}" for i in range(30)} <= set(text_profile.entries)
    finally:
        await store.close()


async def test_the_warm_up_leaves_the_profiles_of_a_store_larger_than_their_memo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """adr/0182: the record cache holds more memories than the profiles' memo; a store between
    the two is decoded and indexed, but its texts are left to the requests that meet them
    (pages in id order would push each other out of the memo)."""
    text_profile.cache_clear()
    monkeypatch.setattr(text_profile, "maxsize", 20)
    store = await reopened(tmp_path, 30)
    try:
        assert await store.warmed() == 30
        assert len(store._records) == 30
        assert not {f"note {i}" for i in range(30)} & set(text_profile.entries)
    finally:
        await store.close()
        text_profile.cache_clear()


def test_the_record_cache_holds_a_100k_memory_store() -> None:
    """adr/0182: a one-tenant store of 100k real-text memories (82.5k points) warms up: its
    searches read no payloads and its neighbour lookups use the dialog turns' index."""
    assert RecordCache().max_entries >= 100_000 > text_profile.maxsize


async def test_a_store_larger_than_its_record_cache_is_left_to_the_searches(
    tmp_path: Path,
) -> None:
    store = await reopened(tmp_path, 30, record_cache_entries=20)
    try:
        assert await store.warmed() == 0
        assert len(store._records) == 0
    finally:
        await store.close()


async def test_a_warm_up_page_read_while_a_write_came_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page read before a write and kept after it could put back a record the write
    replaced: the warm-up keeps a page only under the generation it was read in."""
    store = await reopened(tmp_path, 30)
    try:
        await store.warmed()
        store._records.clear()
        shard = store._shard

        class WriteDuringScroll:
            def scroll(self, request: qe.ScrollRequest) -> Any:
                found = shard.scroll(request)
                store._records.invalidate([0])  # what a write does, as the page is read
                return found

            def __getattr__(self, name: str) -> Any:
                return getattr(shard, name)

        monkeypatch.setattr(store, "_shard", WriteDuringScroll())
        assert store._warm_sync() == 0
        assert len(store._records) == 0
    finally:
        await store.close()


async def test_closing_a_store_while_it_warms_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close`` waits for the warm-up page being read, then the warm-up starts no other: the
    shard is never closed under a scroll, nor scrolled once closing began."""
    await (await reopened(tmp_path, 1_200)).close()  # three warm-up pages
    reading, release, closing = threading.Event(), threading.Event(), threading.Event()
    log: list[str] = []

    class HeldScroll:
        """The shard, with its first scroll held until the test lets it go."""

        def __init__(self, shard: Any) -> None:
            self.shard = shard

        def scroll(self, request: qe.ScrollRequest) -> Any:
            log.append("scroll after close" if closing.is_set() else "scroll")
            if not reading.is_set():
                reading.set()
                release.wait(timeout=5)  # bounded: a broken close must fail, not hang
            found = self.shard.scroll(request)
            log.append("page read")
            return found

        def close(self) -> None:
            log.append("shard closed")
            self.shard.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.shard, name)

    opened = edge.open_shard
    monkeypatch.setattr(edge, "open_shard", lambda *args: HeldScroll(opened(*args)))
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    assert await asyncio.to_thread(reading.wait, 5)
    closing.set()
    closed = asyncio.create_task(store.close())
    await asyncio.sleep(0.2)
    assert not closed.done()
    assert log == ["scroll"]  # the page is still being read: the shard is open
    release.set()
    await closed
    assert log == ["scroll", "page read", "shard closed"]
    monkeypatch.undo()
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await store.count("t1") == 1_200
    finally:
        await store.close()


def test_a_store_opened_in_one_event_loop_closes_in_another(tmp_path: Path) -> None:
    """The warm-up is a thread's future, not one of the opening loop's: tools and tests open
    a store under one ``asyncio.run`` and close it under another."""
    store = asyncio.run(reopened(tmp_path, 30))
    asyncio.run(store.close())
    store = asyncio.run(EdgeStore.open(tmp_path, dimensions=DIM))
    assert asyncio.run(store.warmed()) == 30
    asyncio.run(store.close())


def spy_users(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record whether every shard search the store runs has the user condition."""
    seen: list[bool] = []

    def spy(shard: qe.EdgeShard, tenant: str, query: SearchQuery, *args: Any, **kw: Any) -> Any:
        seen.append(kw.get("users", True))
        return search_hits(shard, tenant, query, *args, **kw)

    monkeypatch.setattr(edge, "search_hits", spy)
    return seen


async def test_a_tenant_without_other_users_memories_is_searched_without_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_users(monkeypatch)
    store = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True)
    try:
        mine = [record("m1", content="a red van"), record("s1", user="", content="a red van")]
        await store.add(mine, vectors_for(mine, DIM))
        elsewhere = record("x", tenant="t2", user="u2", content="a red van")
        await store.add([elsewhere], vectors_for([elsewhere], DIM))
        assert sorted(await live_ids(store)) == ["m1", "s1"]
        assert seen == [False]
        # Another user's memory written: from the next search on, the condition again.
        theirs = record("m2", user="u2", content="a red van")
        await store.add([theirs], vectors_for([theirs], DIM))
        seen.clear()
        assert sorted(await live_ids(store)) == ["m1", "s1"]
        assert seen == [True]
    finally:
        await store.close()


async def test_another_users_memory_found_without_the_user_is_searched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write racing the shard lookup (simulated: the store is told the tenant has none)."""
    records = [record("m1", content="a red van"), record("m2", user="u2", content="a red van")]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await store.add(records, vectors_for(records, DIM))
        store._users = edge.TenantUsers()  # forgets the write's note
        store._users.others("t1", "u1", lambda: False)  # looked up before the write
        seen = spy_users(monkeypatch)
        assert await live_ids(store) == ["m1"]
        assert seen == [False, True]
        seen.clear()
        assert await live_ids(store) == ["m1"]
        assert seen == [True]  # noted
    finally:
        await store.close()


async def test_after_a_restart_the_shard_says_which_users_a_tenant_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [
        record("m1", content="a red van"),
        record("m2", user="u2", content="a red van"),
        record("m3", tenant="t2", content="a red van"),
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    await store.add(records, vectors_for(records, DIM))
    await store.close()
    seen = spy_users(monkeypatch)
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await live_ids(store) == ["m1"]
        assert await live_ids(store, "t2") == ["m3"]
        assert seen == [True, False]
    finally:
        await store.close()


def spy_tenants(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record whether every shard search the store runs has the tenant condition."""
    seen: list[bool] = []

    def spy(shard: qe.EdgeShard, tenant: str, query: SearchQuery, *args: Any, **kw: Any) -> Any:
        seen.append(kw.get("tenants", True))
        return search_hits(shard, tenant, query, *args, **kw)

    monkeypatch.setattr(edge, "search_hits", spy)
    return seen


def spy_turn_filters(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record whether every neighbour lookup the store runs has the tenant condition."""
    seen: list[bool] = []

    def spy(tenant: str, query: TurnsQuery, **kw: Any) -> Any:
        seen.append(kw.get("tenants", True))
        return turns_filter(tenant, query, **kw)

    monkeypatch.setattr(edge, "turns_filter", spy)
    return seen


async def turn_ids(store: EdgeStore, tenant: str = "t1") -> list[str]:
    """The ids of u1's dialog turns beside a moment, as a neighbour lookup returns them."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    query = TurnsQuery("u1", vector_for("a red van", DIM), (at,), 60.0, LIVE_AT)
    return sorted(c.record.id for c in await store.turns_near(tenant, query))


async def test_a_shard_of_one_tenant_is_searched_without_the_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, turns = spy_tenants(monkeypatch), spy_turn_filters(monkeypatch)
    store = await EdgeStore.open(tmp_path, dimensions=DIM, hybrid=True)
    try:
        mine = [record("m1", content="a red van"), record("d1", source=DIALOG_SOURCE)]
        await store.add(mine, vectors_for(mine, DIM))
        assert sorted(await live_ids(store)) == ["d1", "m1"]
        assert await turn_ids(store) == ["d1"]
        assert seen == [False]
        assert turns == [False]
        # Another tenant's memory written: from the next search on, the condition again.
        theirs = [record("x", tenant="t2", content="a red van", source=DIALOG_SOURCE)]
        await store.add(theirs, vectors_for(theirs, DIM))
        seen.clear()
        turns.clear()
        assert sorted(await live_ids(store)) == ["d1", "m1"]
        assert await turn_ids(store) == ["d1"]
        assert seen == [True]
        assert turns == [True]
    finally:
        await store.close()


async def test_another_tenants_memory_found_without_the_tenant_is_searched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write racing the shard lookup (simulated: the store is told the shard holds one
    tenant); the other tenant's memory is read from the shard, not the record cache."""
    records = [
        record("m1", content="a red van"),
        record("m2", tenant="t2", content="a red van", source=DIALOG_SOURCE),
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await store.add(records, vectors_for(records, DIM))
        store._tenants = edge.ShardTenants()  # forgets the write's note
        store._tenants.others("t1", lambda: ["t1"])  # looked up before the write
        store._records.clear()
        seen = spy_tenants(monkeypatch)
        assert await live_ids(store) == ["m1"]
        assert seen == [False, True]
        seen.clear()
        assert await live_ids(store) == ["m1"]
        assert seen == [True]  # noted
    finally:
        await store.close()


async def test_another_tenants_turn_found_without_the_tenant_is_looked_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [
        record("d1", source=DIALOG_SOURCE),
        record("d2", tenant="t2", source=DIALOG_SOURCE),
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await store.add(records, vectors_for(records, DIM))
        store._tenants = edge.ShardTenants()
        store._tenants.others("t1", lambda: ["t1"])
        turns = spy_turn_filters(monkeypatch)
        assert await turn_ids(store) == ["d1"]
        assert turns == [False, True]
        turns.clear()
        assert await turn_ids(store) == ["d1"]
        assert turns == [True]
    finally:
        await store.close()


async def test_after_a_restart_the_shard_says_whether_it_holds_other_tenants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for where, tenants in ((one, ["t1"]), (two, ["t1", "t2"])):
        store = await EdgeStore.open(where, dimensions=DIM)
        records = [record(f"m-{t}", tenant=t, content="a red van") for t in tenants]
        await store.add(records, vectors_for(records, DIM))
        await store.close()
    seen = spy_tenants(monkeypatch)
    for where in (one, two):
        store = await EdgeStore.open(where, dimensions=DIM)
        try:
            assert await live_ids(store) == ["m-t1"]
        finally:
            await store.close()
    assert seen == [False, True]


async def test_a_first_search_by_a_tenant_without_memories_keeps_the_sole_tenant_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart, a tenant with no memory (a new or wrong key) searches first: the shard
    still holds t1 only, so t1's searches go without the condition."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    records = [record("m1", content="a red van")]
    await store.add(records, vectors_for(records, DIM))
    await store.close()
    seen = spy_tenants(monkeypatch)
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        assert await live_ids(store, "new") == []
        assert await live_ids(store) == ["m1"]
        assert await live_ids(store) == ["m1"]
        assert seen == [True, False, False]
    finally:
        await store.close()


class FailingLookups:
    """The store's shard, whose scrolls and counts fail as the engine's do."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard

    def scroll(self, request: qe.ScrollRequest) -> Any:
        raise Exception("Service runtime error: scroll failed")  # the engine raises bare ones

    def count(self, request: qe.CountRequest) -> Any:
        raise Exception("Service runtime error: count failed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


async def test_a_failed_shard_lookup_keeps_the_tenant_condition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        records = [record("m1", content="a red van")]
        await store.add(records, vectors_for(records, DIM))
        assert await live_ids(store) == ["m1"]  # liveness and users looked up
        store._tenants = edge.ShardTenants()  # as after a restart
        shard = store._shard
        monkeypatch.setattr(store, "_shard", FailingLookups(shard))
        seen = spy_tenants(monkeypatch)
        assert await live_ids(store) == ["m1"]
        assert seen == [True]
        monkeypatch.setattr(store, "_shard", shard)  # nothing remembered: asked again
        assert await live_ids(store) == ["m1"]
        assert seen == [True, False]
    finally:
        await store.close()


async def test_another_tenants_dead_memory_says_nothing_of_the_searching_tenant(
    tmp_path: Path,
) -> None:
    """A raced search that returned another tenant's expired memory searches again with the
    tenant condition; it does not note the searching tenant as holding dead memories."""
    past = LIVE_AT - timedelta(days=1)
    records = [
        record("m1", content="a red van"),
        record("m2", tenant="t2", content="a red van", expires_at=past),
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await store.add(records, vectors_for(records, DIM))
        store._tenants = edge.ShardTenants()
        store._tenants.others("t1", lambda: ["t1"])
        assert await live_ids(store) == ["m1"]
        assert store._lifecycle.may_hold("t1", lambda: False) is False
    finally:
        await store.close()


async def test_an_open_that_fails_after_the_shard_opened_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left open, the shard keeps its WAL's lock for as long as the error's traceback lives
    (a caller that keeps or logs it): opening the store again in this process would fail."""

    def unreadable(path: Path) -> None:
        raise OSError(f"cannot read {path}")

    with monkeypatch.context() as patched:
        patched.setattr(edge.RetrievalCounts, "load", unreadable)
        with pytest.raises(OSError, match="cannot read") as failed:
            await EdgeStore.open(tmp_path, dimensions=DIM)
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    await store.close()
    assert failed.traceback  # held until here, as a caller's error handling would


class FlushCountingShard:
    """The store's shard, counting its flushes."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        self._shard.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


async def test_closing_flushes_writes_no_background_flush_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edge_maintenance, "FLUSH_AFTER_POINTS", 10**9)
    monkeypatch.setattr(edge_maintenance, "FLUSH_QUIET_S", 3600.0)
    monkeypatch.setattr(edge_maintenance, "FLUSH_MAX_AGE_S", 3600.0)
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    counting = FlushCountingShard(store._shard)
    monkeypatch.setattr(store, "_shard", counting)
    records = [record(f"m{i}") for i in range(20)]
    await store.add(records, vectors_for(records, DIM))
    assert counting.flushes == 0  # too few points, no pause yet
    await store.close()
    assert counting.flushes == 1


@pytest.mark.parametrize("write", ["vote", "supersede", "delete", "delete_user"])
async def test_votes_and_deletes_alone_start_a_background_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """A store that takes no add, only votes or deletes, still flushes them in the background,
    by their age (adr/0188): else each waits in the WAL for the next add or the close."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    records = [record(f"m{i}") for i in range(3)]
    await store.add(records, vectors_for(records, DIM))
    await store.flush()
    maintenance = store._maintenance
    monkeypatch.setattr(
        maintenance, "flush_policy", replace(maintenance.flush_policy, max_age_s=0.0)
    )
    counting = FlushCountingShard(store._shard)
    monkeypatch.setattr(store, "_shard", counting)
    try:
        if write == "vote":
            assert await store.set_usefulness("t1", "m0", 0.9) is not None
        elif write == "supersede":
            assert await store.supersede("t1", "m0", "m1") is not None
        elif write == "delete":
            assert await store.delete("t1", "m0")
        else:
            assert await store.delete_user("t1", "u1") == 3
        await asyncio.to_thread(maintenance.settle)
        assert counting.flushes == 1
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("persistent", "in_background", "at_close", "counts_saved"),
    [(True, 1, 1, True), (False, 0, 0, False)],
)
async def test_a_store_whose_files_are_dropped_never_flushes_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    persistent: bool,
    in_background: int,
    at_close: int,
    counts_saved: bool,
) -> None:
    """A worker's replica (``persistent=False``, adr/0179) is deleted at close, unread: no
    background flush, none at close, no retrieval counts file (neither the periodic save nor
    the one at close); a store of its own flushes."""
    monkeypatch.setattr(edge_maintenance, "FLUSH_AFTER_POINTS", 1)  # every write is due
    monkeypatch.setattr(edge_counts, "SAVE_INTERVAL_S", 0.0)  # every count change is due
    store = await EdgeStore.open(tmp_path, dimensions=DIM, persistent=persistent)
    counting = FlushCountingShard(store._shard)
    monkeypatch.setattr(store, "_shard", counting)
    records = [record(f"m{i}") for i in range(5)]
    await store.add(records, vectors_for(records, DIM))
    await store.increment_retrievals("t1", ["m0", "m1"])
    for saving in threading.enumerate():  # a periodic save runs on a thread of its own
        if saving.name == "retrieval-counts":
            await asyncio.to_thread(saving.join)
    await asyncio.to_thread(store._maintenance.settle)
    assert counting.flushes == in_background
    await store.close()
    assert counting.flushes == in_background + at_close
    assert (tmp_path / edge.COUNTS_FILE).exists() is counts_saved


async def near_both_ways(
    store: EdgeStore, query: SearchQuery, monkeypatch: pytest.MonkeyPatch
) -> tuple[edge.Found, edge.Found, list[bool]]:
    """``search_near`` as served, the same as the search then the engine's neighbour lookup
    (``search_then_turns``), and the engine filters the first one built."""
    filters = spy_turn_filters(monkeypatch)
    found = await store.search_near("t1", query, 3, 90.0)
    built = list(filters)
    return found, await search_then_turns(store, "t1", query, 3, 90.0), built


async def test_a_warmed_store_finds_the_neighbour_turns_without_the_engines_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the record cache's warm-up has read the shard, the turns beside the hits come from
    the dialog turns' index (adr/0162): the same turns and cosines, no windows query."""
    store, query = await dialog_store(tmp_path)
    try:
        await store.warmed()
        assert store._turns.complete
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert found.turns
        assert found == engine
        assert built == []
    finally:
        await store.close()


async def test_the_dialog_turns_index_follows_writes_and_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, query = await dialog_store(tmp_path)
    try:
        await store.warmed()
        at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        moved = [
            # t4 moves out of t5's window, a new turn takes its place, t6 becomes a note
            replace(record("t4", source="conversation"), created_at=at + timedelta(hours=1)),
            replace(record("t4b", source="conversation"), created_at=at + timedelta(minutes=4)),
            record("t6", source="notes"),
        ]
        await store.add(moved, vectors_for(moved, DIM))
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t4b"]  # t7 is 2 minutes away
        assert (found, built) == (engine, [])
        assert await store.delete("t1", "t4b")
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert found.turns is not None
        assert found.turns == []
        assert (found, built) == (engine, [])
        assert await store.delete_user("t1", "u1")  # a filter delete: its entries go stale
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert (found, built) == (engine, [])
    finally:
        await store.close()


async def test_a_stale_index_entry_sends_the_lookup_to_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry whose record says another time (a write racing the index) is not trusted."""
    store, query = await dialog_store(tmp_path)
    try:
        await store.warmed()
        t0 = store._ids.key("t1", "t0")
        at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC) + timedelta(minutes=5)
        store._turns.write([(t0, "t1", "u1", at.timestamp())])  # t0's time is +0 minutes
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t4", "t6"]
        assert found == engine
        assert built == [False]
    finally:
        await store.close()


async def test_a_store_not_warmed_asks_the_engine_for_the_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    turns = [
        replace(record(f"t{i}", source="conversation"), created_at=at + timedelta(minutes=i))
        for i in range(10)
    ]
    store = await EdgeStore.open(tmp_path, dimensions=DIM, warm_up=False)
    try:
        await store.add(turns, vectors_for(turns, DIM))
        text = turns[5].content
        query = SearchQuery(vector_for(text, DIM), text, "u1", None, 1, live_at=at)
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert not store._turns.complete
        assert found.turns
        assert (found, built) == (engine, [False])
    finally:
        await store.close()


async def test_the_index_and_the_engine_find_the_same_turns_after_any_writes(
    tmp_path: Path,
) -> None:
    """Property: after random upserts (moving turns in time, between users and sources, with
    expiries), deletes, user deletes, supersessions and purges over two tenants, the neighbour
    turns from the dialog turns' index equal the engine lookup's, for every user's searches."""
    base = LIVE_AT - timedelta(hours=1)
    rng = np.random.default_rng(162)
    ids = [f"m{i}" for i in range(14)]
    for run in range(4):
        store = await EdgeStore.open(tmp_path / str(run), dimensions=DIM)
        try:
            await store.warmed()
            for step in range(40):
                op = rng.choice(["add", "add", "add", "delete", "user", "supersede", "purge"])
                tenant, user = str(rng.choice(["t1", "t2"])), str(rng.choice(["u1", "u2"]))
                memory_id = str(rng.choice(ids))
                if op == "add":
                    expiry = rng.choice([None, -1, 1])
                    batch = [
                        replace(
                            record(
                                str(rng.choice(ids)),
                                tenant=tenant,
                                user=str(rng.choice(["u1", "u2"])),
                                source=str(rng.choice(["conversation"] * 3 + ["notes"])),
                                content=f"turn {step} {k} {int(rng.integers(4))}",
                            ),
                            created_at=base + timedelta(minutes=int(rng.integers(12))),
                            expires_at=None
                            if expiry is None
                            else LIVE_AT + timedelta(hours=int(expiry)),
                        )
                        for k in range(int(rng.integers(1, 4)))
                    ]
                    batch = list({r.id: r for r in batch}.values())
                    await store.add(batch, vectors_for(batch, DIM))
                elif op == "delete":
                    await store.delete(tenant, memory_id)
                elif op == "user":
                    await store.delete_user(tenant, user)
                elif op == "supersede":
                    await store.supersede(tenant, memory_id, "later")
                else:
                    await store.purge_expired(LIVE_AT)
                for tenant, user in [("t1", "u1"), ("t1", "u2"), ("t2", "u1")]:
                    text = f"turn {int(rng.integers(step + 1))} 0 {int(rng.integers(4))}"
                    query = SearchQuery(vector_for(text, DIM), text, user, None, 3, live_at=LIVE_AT)
                    found = await store.search_near(tenant, query, 3, 90.0)
                    engine = await search_then_turns(store, tenant, query, 3, 90.0)
                    assert found == engine, (run, step, op)
            assert store._turns.complete  # the index answered throughout
        finally:
            await store.close()


class FailingUpserts:
    """The store's shard, whose next upsert fails as the engine's do."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self._shard = shard

    def update(self, operation: Any) -> Any:
        raise Exception("Service runtime error: the WAL is full")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


async def test_a_failed_upsert_never_hides_the_turn_it_would_have_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is noted before the write: when the write fails, the turn stays where it was
    in the shard and the lookup must still find it there (t4, a minute before t5)."""
    store, query = await dialog_store(tmp_path)
    try:
        await store.warmed()
        shard = store._shard
        monkeypatch.setattr(store, "_shard", FailingUpserts(shard))
        at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        moved = [replace(record("t4", source="conversation"), created_at=at + timedelta(hours=1))]
        with pytest.raises(StoreError):
            await store.add(moved, vectors_for(moved, DIM))
        monkeypatch.setattr(store, "_shard", shard)
        found = await store.search_near("t1", query, 1, 90.0)
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t4", "t6"]
        assert found == await search_then_turns(store, "t1", query, 1, 90.0)
    finally:
        await store.close()


class RacedTurns(DialogTurns):
    """An index that lets a delete of the same turn run between an upsert's two notes: the
    upsert pauses after its first note until the delete reached the index, the delete's note
    waits for the upsert's second one (a deadlock guard only: a store that orders them runs
    the delete after the upsert)."""

    def __init__(self) -> None:
        super().__init__()
        self.noted, self.deleted, self.upserted = (threading.Event() for _ in range(3))
        self.notes = 0

    def write(self, turns: Any) -> None:
        turns = list(turns)
        super().write(turns)
        self.notes += 1
        if self.notes == 1:
            self.noted.set()
            self.deleted.wait(timeout=0.5)
        elif self.notes == 2:
            self.upserted.set()

    def drop(self, keys: Any) -> None:
        self.deleted.set()
        self.upserted.wait(timeout=0.5)
        super().drop(keys)


async def test_an_upsert_racing_a_delete_of_the_same_turn_leaves_the_index_as_the_shard(
    tmp_path: Path,
) -> None:
    """Upsert of t4 and delete of t4 on two store threads, the delete let in between the
    upsert's note and its shard write: whichever the shard holds last, the index agrees (it
    lost t4 while the shard kept it when the delete's shard write came in there)."""
    store, query = await dialog_store(tmp_path)
    try:
        await store.warmed()
        raced = RacedTurns()
        raced.start()
        raced.load([(key, tenant, user, ts) for key, (tenant, user, ts) in turn_entries(store)])
        raced.finish(True)
        store._turns = raced
        again = [replace(record("t4", source="conversation"))]
        again = [replace(again[0], created_at=datetime(2026, 1, 2, 3, 8, 5, tzinfo=UTC))]
        upsert = asyncio.create_task(store.add(again, vectors_for(again, DIM)))
        await asyncio.to_thread(raced.noted.wait, 5)
        assert await store.delete("t1", "t4")
        await upsert
        found = await store.search_near("t1", query, 1, 90.0)
        assert found == await search_then_turns(store, "t1", query, 1, 90.0)
    finally:
        await store.close()


def turn_entries(store: EdgeStore) -> list[tuple[int, tuple[str, str, float]]]:
    """The dialog turns' index's entries: (key, (tenant, user, created_ts))."""
    return [(key, (owner[0], owner[1], ts)) for key, (owner, ts) in store._turns._where.items()]


async def test_turns_deleted_through_a_filter_leave_the_index(tmp_path: Path) -> None:
    """A store that writes and purges turns stays small: so must its index, which otherwise
    grew by every turn ever written and gave up at its bound (the record cache's size)."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    store = await EdgeStore.open(tmp_path, dimensions=DIM, record_cache_entries=12)
    try:
        await store.warmed()
        for user in ["u1", "u2", "u3"]:
            turns = [
                replace(
                    record(f"{user}-{i}", user=user, source="conversation"),
                    created_at=at + timedelta(minutes=i),
                )
                for i in range(8)
            ]
            await store.add(turns, vectors_for(turns, DIM))
            assert await store.delete_user("t1", user) == 8
        assert store._turns.complete
        assert turn_entries(store) == []
    finally:
        await store.close()
