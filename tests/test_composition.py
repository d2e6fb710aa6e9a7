"""The composition root: settings in, typed services out, every client it opens closed on exit."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

import proxy.composition as composition
from proxy.cache.blocks import CachedTurnBlocks
from proxy.composition import (
    Provided,
    open_primary,
    open_request_cache,
    open_services,
    open_store,
    search_threads,
)
from proxy.context.records import Candidate
from proxy.defaults import SEARCH_THREADS_MIN
from proxy.errors import ConfigError
from proxy.memory.edge import SHARD_DIR, EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.reopening import ReopeningStore, StoreReopening
from proxy.memory.replica import LOG_FILE, ReplicaStore
from proxy.memory.store import SearchQuery
from proxy.metrics import Metrics
from proxy.pipeline.contract import NoopPipeline
from proxy.pipeline.pipeline import Pipeline
from proxy.services import Services
from proxy.settings import Settings, StoreSettings, load_settings, replace
from tests.memory.support import record, stored_pool_size, vector_for


def settings_for(tmp_path: Path, *, memory: bool = True, workers: int = 1) -> Settings:
    base = load_settings(env={})
    return replace(
        base,
        server=replace(base.server, workers=workers),
        store=replace(base.store, data_dir=str(tmp_path)),
        memory=replace(base.memory, enabled=memory),
    )


@asynccontextmanager
async def opened(settings: Settings, provided: Provided | None = None) -> AsyncIterator[Services]:
    async with AsyncExitStack() as stack:
        yield await open_services(settings, Metrics(), stack, provided or Provided())


async def test_memory_off_builds_no_memory_path(tmp_path: Path) -> None:
    async with opened(settings_for(tmp_path, memory=False)) as services:
        assert isinstance(services.pipeline, NoopPipeline)
        assert services.memories is None
        assert set(services.probes) == {"upstream"}
    assert not (tmp_path / "memories").exists()  # no store was opened


async def test_the_pipeline_and_the_api_share_one_read_and_one_write_path(
    tmp_path: Path,
) -> None:
    async with opened(settings_for(tmp_path)) as services:
        pipeline, memories = services.pipeline, services.memories
        assert isinstance(pipeline, Pipeline)
        assert memories is not None
        assert pipeline.retriever is memories.retriever
        assert pipeline.writer is memories
        assert pipeline.counts is memories.cache
        # A delete forgets the turn blocks the pipeline recalls: the same byte cache.
        assert isinstance(memories.blocks, CachedTurnBlocks)
        assert isinstance(pipeline.blocks, CachedTurnBlocks)
        assert memories.blocks.cache is pipeline.blocks.cache
        assert set(services.probes) == {"upstream", "store", "embedder", "cache"}
        store = memories.store
        assert await store.ready()
    assert not await store.ready()  # the root opened it, the exit stack closed it


async def test_a_store_that_cannot_open_is_retried_while_the_proxy_serves(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "memories"
    blocker.write_text("not a directory")
    async with opened(settings_for(tmp_path)) as services:
        assert services.memories is not None
        store = services.memories.store
        assert isinstance(store, ReopeningStore)
        assert services.probes["store"] is store  # /readyz: "unavailable: retrying (...)"
        with pytest.raises(StoreReopening):
            await store.ready()
        blocker.unlink()  # the operator fixed it: a later attempt opens the real store
        deadline = asyncio.get_running_loop().time() + 30
        while store.opened is None:
            assert asyncio.get_running_loop().time() < deadline, store.state()
            await asyncio.sleep(0.05)
        assert await store.ready()
        assert await services.memories.store.count("t") == 0
    assert not await store.opened.ready()  # the exit stack closed it


async def test_provided_backends_are_used_and_never_closed(tmp_path: Path) -> None:
    embedder = StaticEmbedder()
    store = await EdgeStore.open(tmp_path / "mine", dimensions=embedder.dimensions)
    try:
        provided = Provided(store=store, embedder=embedder)
        async with opened(settings_for(tmp_path), provided) as services:
            assert services.memories is not None
            assert services.memories.store is store
            assert services.memories.embedder is embedder
        assert await store.ready()
    finally:
        await store.close()


async def test_without_redis_several_workers_share_generations(tmp_path: Path) -> None:
    """A write through one worker must invalidate the search results another worker cached."""
    async with AsyncExitStack() as stack:
        one = open_request_cache(settings_for(tmp_path, workers=2), stack)
        two = open_request_cache(settings_for(tmp_path, workers=2), stack)
        assert one.ttls.retrieval_s > 0
        before = await two.generation("t")
        await one.bump_generation("t")
        assert await two.generation("t") != before


async def test_search_results_are_encoded_only_for_a_shared_cache(tmp_path: Path) -> None:
    """Without Redis no other process reads the byte cache: results stay decoded, in process."""
    base = settings_for(tmp_path)
    redis = replace(base, cache=replace(base.cache, redis_url="redis://127.0.0.1:1/0"))
    async with AsyncExitStack() as stack:
        local = open_request_cache(base, stack)
        assert not local.encodes_retrievals
        key = await local.retrieval_key("t", "u", "q", top_k=5, sources=None)
        assert key is not None
        hits = [Candidate(record("m1", tenant="t", user="u"), 0.5)]
        await local.set_retrieval(key, hits)
        await local.flush()
        assert await local.cache.get(key.key) is None
        assert await local.get_retrieval(key) == hits
        assert open_request_cache(redis, stack).encodes_retrievals


async def test_several_workers_each_open_a_replica_of_the_embedded_store(
    tmp_path: Path,
) -> None:
    async with opened(settings_for(tmp_path, workers=2)) as services:
        assert services.memories is not None
        assert isinstance(services.memories.store, ReplicaStore)


async def test_open_store_opens_the_configured_edge_store(tmp_path: Path) -> None:
    settings = StoreSettings(
        kind="edge", data_dir=str(tmp_path), hybrid=False, record_cache_entries=123
    )
    store = await open_store(settings, dimensions=8)
    try:
        assert isinstance(store, EdgeStore)
        assert store.hybrid is False
        assert store.dimensions == 8
        assert store.record_cache_entries == 123
    finally:
        await store.close()
    assert (tmp_path / "memories").is_dir()


async def test_open_store_needs_a_url_for_qdrant() -> None:
    with pytest.raises(ConfigError, match="qdrant_url"):
        await open_store(StoreSettings(kind="qdrant", qdrant_url=None), dimensions=8)


async def test_the_primary_folds_the_workers_log_while_they_run(tmp_path: Path) -> None:
    """``serve --workers N``: the supervisor's primary keeps the write log small (adr/0120)."""
    settings = settings_for(tmp_path, workers=2)
    settings = replace(settings, store=replace(settings.store, log_fold_bytes=1))
    async with AsyncExitStack() as stack:
        primary = await open_primary(settings, stack)
        assert isinstance(primary, EdgeStore)
        worker = await open_store(settings.store, dimensions=primary.dimensions, replica=True)
        stack.push_async_callback(worker.close)
        memory = record("m1", content="a note")
        await worker.add([memory], vector_for(memory.content, primary.dimensions)[None, :])
        log = tmp_path / LOG_FILE
        for _ in range(600):  # the supervisor looks every LOG_FOLD_CHECK_S
            if log.stat().st_size == 0:
                break
            await asyncio.sleep(0.05)
        assert log.stat().st_size == 0
        assert await primary.get("t1", "m1") is not None


@pytest.mark.parametrize("indexed", [False, True])
async def test_the_primary_builds_its_index_before_the_workers_copy_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed: bool
) -> None:
    """adr/0150: with no write log to absorb too, so points an earlier process left outside
    the graph are indexed once, not scanned by every worker's replica or built by each; and
    flushed after a build, or the replicas' copies load the segments it replaced."""
    calls: list[str] = []

    async def optimize(store: EdgeStore) -> bool:
        calls.append("optimize")
        return indexed

    async def flush(store: EdgeStore) -> None:
        calls.append("flush")

    monkeypatch.setattr(EdgeStore, "optimize", optimize)
    monkeypatch.setattr(EdgeStore, "flush", flush)
    settings = settings_for(tmp_path, workers=2)
    async with AsyncExitStack() as stack:
        assert await open_primary(settings, stack) is not None
        assert calls == (["optimize", "flush"] if indexed else ["optimize"])  # no log: all the same


async def test_the_primary_keeps_no_record_cache(tmp_path: Path) -> None:
    """The supervisor's primary never searches: it decodes no memory into a record cache."""
    settings = settings_for(tmp_path, workers=2)
    async with AsyncExitStack() as stack:
        primary = await open_primary(settings, stack)
        assert isinstance(primary, EdgeStore)
        memory = record("m1", content="a note")
        await primary.add([memory], vector_for(memory.content, primary.dimensions)[None, :])
    async with AsyncExitStack() as stack:  # reopened with a memory to warm
        primary = await open_primary(settings, stack)
        assert isinstance(primary, EdgeStore)
        assert await primary.warmed() == 0
        assert primary.record_cache_entries == 0
        assert await primary.get("t1", "m1") is not None


@pytest.mark.parametrize(
    ("setting", "cpus", "workers", "expected"),
    [
        ("auto", 8, 1, 8),
        ("auto", 8, 2, 4),
        ("auto", 8, 3, 2),
        (3, 8, 2, 3),  # a number is taken as it is
        (2, 1, 1, 2),
        (1, 2, 1, 1),
    ],
)
def test_the_search_pool_shares_the_usable_cpus_among_the_workers(
    monkeypatch: pytest.MonkeyPatch, setting: int | str, cpus: int, workers: int, expected: int
) -> None:
    monkeypatch.setattr(composition, "usable_cpus", lambda: cpus)
    assert search_threads(StoreSettings(search_threads=setting), workers) == expected


# ``auto`` by the CPUs the process may use (its affinity, or a cgroup v2 quota below it) and
# the workers sharing them: one thread in a process that may use one CPU (adr/0186), else the
# CPUs per worker, at least SEARCH_THREADS_MIN (adr/0131).
POOL_BY_CPUS = [
    # affinity CPUs, cgroup cpu.max (None: no file), workers, expected
    (1, None, 1, 1),
    (1, None, 2, 1),
    (1, None, 4, 1),
    (2, None, 1, 2),
    (2, None, 2, SEARCH_THREADS_MIN),
    (2, None, 4, SEARCH_THREADS_MIN),
    (4, None, 1, 4),
    (4, None, 2, 2),
    (4, None, 4, SEARCH_THREADS_MIN),
    (16, None, 1, 16),
    (16, None, 2, 8),
    (16, None, 4, 4),
    (16, "100000 100000\n", 1, 1),  # a 1-CPU container on a 16-CPU host
    (16, "100000 100000\n", 2, 1),
    (16, "50000 100000\n", 1, 1),  # half a CPU
    (16, "150000 100000\n", 1, 2),  # 1.5 CPUs round up to 2
    (16, "200000 100000\n", 2, SEARCH_THREADS_MIN),
    (16, "400000 100000\n", 1, 4),
    (16, "max 100000\n", 2, 8),  # no quota: the affinity
]


@pytest.mark.parametrize(("affinity", "cpu_max", "workers", "expected"), POOL_BY_CPUS)
def test_auto_gives_a_process_with_one_cpu_one_search_thread(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    affinity: int,
    cpu_max: str | None,
    workers: int,
    expected: int,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)), raising=False)
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    real = composition.usable_cpus
    monkeypatch.setattr(composition, "usable_cpus", lambda: real(path))
    assert search_threads(StoreSettings(), workers) == expected


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000\n", 8),  # no quota: the affinity
        ("200000 100000\n", 2),  # a 2-CPU container on an 8-CPU host
        ("150000 100000\n", 2),  # a part CPU rounds up
        ("50000 100000\n", 1),
        ("1600000 100000\n", 8),  # a quota above the affinity: the affinity
        ("garbage\n", 8),
        (None, 8),  # no cgroup v2 file
    ],
)
def test_usable_cpus_follow_a_cgroup_cpu_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cpu_max: str | None, expected: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max)
    assert composition.usable_cpus(path) == expected


async def test_each_embedded_store_opens_with_the_chosen_search_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The single process, each worker's replica and the supervisor's primary (adr/0131)."""
    monkeypatch.setattr(composition, "usable_cpus", lambda: 6)
    single = await open_store(StoreSettings(data_dir=str(tmp_path / "one")), dimensions=8)
    await single.close()
    assert stored_pool_size(tmp_path / "one" / SHARD_DIR) == 6
    settings = settings_for(tmp_path / "many", workers=3)
    async with AsyncExitStack() as stack:
        primary = await open_primary(settings, stack)
        assert primary is not None
        assert stored_pool_size(tmp_path / "many" / SHARD_DIR) == 2
        worker = await open_store(
            replace(settings.store, search_threads=5),
            dimensions=primary.dimensions,
            replica=True,
            workers=3,
        )
        stack.push_async_callback(worker.close)
        assert isinstance(worker, ReplicaStore)
        assert stored_pool_size(worker.directory / SHARD_DIR) == 5


async def test_the_served_store_shares_the_cpus_among_the_configured_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(composition, "usable_cpus", lambda: 8)
    async with opened(settings_for(tmp_path, workers=2)) as services:
        assert services.memories is not None
        replica = services.memories.store
        assert isinstance(replica, ReplicaStore)
        assert stored_pool_size(replica.directory / SHARD_DIR) == 4


async def test_a_store_written_before_the_pool_setting_serves_with_it(tmp_path: Path) -> None:
    old = await EdgeStore.open(tmp_path, dimensions=8)  # no size: the file holds none
    memory = record("m1", content="a note about tea")
    await old.add([memory], vector_for(memory.content, 8)[None, :])
    await old.close()
    assert stored_pool_size(tmp_path / SHARD_DIR) is None
    store = await open_store(StoreSettings(data_dir=str(tmp_path), search_threads=2), dimensions=8)
    try:
        assert stored_pool_size(tmp_path / SHARD_DIR) == 2
        query = SearchQuery(vector_for(memory.content, 8), memory.content, "u1", None, 5)
        assert [hit.record.id for hit in await store.search("t1", query)] == ["m1"]
    finally:
        await store.close()
