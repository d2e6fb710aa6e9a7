"""The composition root: the one place that turns ``Settings`` into typed services.

The app lifespan (``proxy/app.py``) calls ``open_services`` with its exit stack; every client
opened here is closed by that stack, in reverse order of opening. Ready-made backends a caller
passes in (``Provided``: tests, benchmarks) are used as they are and never closed: their creator
owns them. The CLI opens the same pieces through the same functions (``proxy/cli_memories.py``).

Each port is a protocol the rest of the code uses by type; this module picks its adapter:

- ``MemoryStore`` (``memory/store.py``): ``EdgeStore`` (``store.kind: edge``), each worker's
  ``ReplicaStore`` of it (edge with ``server.workers > 1``, adr/0105) or ``QdrantStore``;
- ``Embedder`` (``memory/embedders.py``): ``StaticEmbedder`` or ``OpenAIEmbedder``;
- ``MemoryCache`` (``cache/protocol.py``): ``RequestCache`` over Redis or an in-process LRU;
- ``Transport`` (``transport.py``): inside ``UpstreamClient``, from ``upstream.client``; one
  client for the OpenAI-compatible upstream, one for Anthropic's (``upstream.anthropic``);
- ``MemoryPipeline`` (``pipeline/contract.py``): ``Pipeline``, ``NoopPipeline`` with memory off;
- ``Probe`` (``services.py``): what ``/readyz`` asks.

Over the store, embedder and cache it builds the one read path (``Retriever``) and the one write
path (``MemoryService.write``), shared by the chat pipeline and the memories API.

Policy: a configuration mistake (a wrong vector size, a malformed Redis URL) stops the start
with a ``ConfigError``; a backend that is merely unreachable does not. Memory is an
enhancement, so the proxy starts and serves without it (chat requests report ``degraded``)
rather than refusing traffic because Qdrant or Redis is down, and a store that could not be
opened is opened again in the background until it can be (``ReopeningStore``, adr/0102).
"""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from proxy.background import Background
from proxy.cache.blocks import CachedTurnBlocks
from proxy.cache.factory import create_cache
from proxy.cache.protocol import MemoryCache
from proxy.cache.request_cache import CacheTTLs, LookupHook, RequestCache
from proxy.cache.shared_generations import FILE_NAME as GENERATIONS_FILE
from proxy.cache.shared_generations import SharedGenerations
from proxy.context.allocation import BudgetCalculator
from proxy.context.limits import ModelLimits
from proxy.defaults import SEARCH_THREADS_MIN
from proxy.errors import ConfigError
from proxy.memory.embedders import Embedder, create_embedder, prepare_embedder
from proxy.memory.expiry import ExpiryPurger
from proxy.memory.extraction_call import ExtractionCall
from proxy.memory.reopening import ReopeningStore
from proxy.memory.service import MemoryService
from proxy.memory.store import MemoryStore
from proxy.metrics import Metrics
from proxy.model_limits import load_model_limits
from proxy.pipeline.capture import FactCapture
from proxy.pipeline.contract import MemoryPipeline, NoopPipeline
from proxy.pipeline.counters import RetrievalCounter
from proxy.pipeline.pipeline import Pipeline
from proxy.services import Opened, Probe, Services
from proxy.settings import Settings, StoreSettings, UpstreamSettings, replace
from proxy.tenancy import TenantResolver
from proxy.tokenizer import tiktoken_tokenizer
from proxy.upstream import UpstreamClient

LOGGER = logging.getLogger("memproxy.composition")
EMBEDDER_HTTP_TIMEOUT_S = 10.0
BACKGROUND_DRAIN_S = 10.0
# cgroup v2: "QUOTA PERIOD" (or "max PERIOD") microseconds of CPU a period for this container.
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


@dataclass(frozen=True, slots=True)
class Provided:
    """Ready-made pieces to use instead of opening them from the settings (never closed here)."""

    upstream: UpstreamClient | None = None
    anthropic: UpstreamClient | None = None
    pipeline: MemoryPipeline | None = None
    store: MemoryStore | None = None
    embedder: Embedder | None = None
    cache: MemoryCache | None = None


async def open_services(
    settings: Settings, metrics: Metrics, stack: AsyncExitStack, provided: Provided = Provided()
) -> Services:
    """Every service the app needs, their clients owned by ``stack``."""
    upstream = provided.upstream
    if upstream is None:
        upstream = UpstreamClient(settings.upstream)
        await upstream.start()
        stack.push_async_callback(upstream.close)
    anthropic = provided.anthropic
    if anthropic is None:
        anthropic = UpstreamClient(anthropic_upstream(settings.upstream))
        await anthropic.start()
        stack.push_async_callback(anthropic.close)
    background = Background()
    store, embedder, cache = provided.store, provided.embedder, provided.cache
    memories: MemoryService | None = None
    pipeline = provided.pipeline
    if settings.memory.enabled:
        if embedder is None:
            embedder = await open_embedder(settings, stack)
        if store is None:
            store = await open_memory_store(settings, embedder, stack, metrics)
        if cache is None:
            cache = open_request_cache(settings, stack, metrics.count_cache_lookup)
        if store is not None:
            memories = MemoryService(
                store,
                embedder,
                cache,
                max_content_chars=settings.memory.max_content_chars,
                blocks=turn_blocks(settings, cache),
            )
            purger = ExpiryPurger(store, metrics, settings.memory.purge_interval_s)
            purger.start()
            stack.push_async_callback(purger.close)
        if pipeline is None:
            facts = open_fact_capture(settings, memories, upstream, metrics, stack)
            pipeline = await build_pipeline(
                settings, memories, store, cache, metrics, background, stack, facts
            )
    stack.callback(metrics.close)
    # Runs first on exit: completion hooks finish while the backends are still open.
    stack.push_async_callback(background.drain, BACKGROUND_DRAIN_S)
    return Services(
        settings=settings,
        upstream=upstream,
        anthropic=anthropic,
        metrics=metrics,
        tenants=TenantResolver(settings),
        pipeline=pipeline if pipeline is not None else NoopPipeline(),
        memories=memories,
        probes=readiness(settings, upstream, store, embedder, cache),
        background=background,
    )


def anthropic_upstream(upstream: UpstreamSettings) -> UpstreamSettings:
    """The upstream section for Anthropic's client: its URL with ``/v1`` (which the client's
    paths are joined below), everything else (timeouts, pool, TLS, client) shared."""
    parts = urlsplit(upstream.anthropic.url)
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/v1", parts.query, ""))
    return replace(upstream, url=base)


def readiness(
    settings: Settings,
    upstream: UpstreamClient,
    store: MemoryStore | None,
    embedder: Embedder | None,
    cache: MemoryCache | None,
) -> dict[str, Probe | None]:
    """``/readyz``'s checks: the upstream, and each memory backend that is present; one that is
    configured (memory on) but could not be opened is ``None``."""
    probes: dict[str, Probe | None] = {"upstream": upstream}
    # An embedder keeps no connection of its own to check: a remote one's failures show per
    # request (degraded), not here.
    backends: dict[str, Probe | None] = {
        "store": store,
        "embedder": Opened() if embedder is not None else None,
        "cache": cache,
    }
    for name, probe in backends.items():
        if probe is not None or settings.memory.enabled:
            probes[name] = probe
    return probes


async def open_embedder(settings: Settings, stack: AsyncExitStack) -> Embedder:
    """The configured embedder, started; a remote one gets its own pooled HTTP client."""
    conf = settings.embedder
    client = None
    if conf.kind == "openai":
        client = httpx.AsyncClient(timeout=EMBEDDER_HTTP_TIMEOUT_S)
        stack.push_async_callback(client.aclose)
    api_key = conf.api_key or settings.upstream.api_key
    embedder = create_embedder(
        conf.kind,
        model=conf.model,
        url=conf.url or settings.upstream.url,
        api_key=api_key.value if api_key else None,
        dimensions=conf.dimensions,
        http_client=client,
    )
    await prepare_embedder(embedder, conf.dimensions)
    return embedder


def search_threads(settings: StoreSettings, workers: int) -> int:
    """The embedded store's search pool size: the setting, or for ``auto`` the CPUs this
    process may use shared among the workers, at least ``SEARCH_THREADS_MIN`` (adr/0131); one
    in a process that may use one CPU (adr/0186)."""
    if settings.search_threads != "auto":
        return settings.search_threads
    cpus = usable_cpus()
    if cpus == 1:
        # With one thread the engine searches on the calling thread; a second could never
        # search beside it here, only take the search and hand it back, then spin (adr/0186).
        return 1
    return max(SEARCH_THREADS_MIN, cpus // workers)


def usable_cpus(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The CPUs this process may use: its affinity, or fewer under a cgroup v2 CPU quota (a
    container limited to 2 CPUs on a 64-core host sees 64 in its affinity)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 file, or a form we do not read: the affinity stands
    return cpus


async def open_store(
    settings: StoreSettings, *, dimensions: int, replica: bool = False, workers: int = 1
) -> MemoryStore:
    """Open the configured store (the caller closes it).

    ``dimensions`` is the embedder's vector size; a store built with another size raises
    ``ConfigError`` here, at start, instead of failing on the first search. ``replica``: this
    process is one of several workers, so the embedded store is this worker's replica; a single
    process opens the primary shard and first applies writes a multi-worker run left in the log.
    ``workers`` processes share this machine's CPUs (``search_threads``).
    """
    if settings.kind == "qdrant":
        from proxy.memory.qdrant import QdrantStore

        if not settings.qdrant_url:
            raise ConfigError(
                "store.kind is qdrant but store.qdrant_url (MEMPROXY_QDRANT_URL) is not set",
                param="store.qdrant_url",
            )
        api_key = settings.qdrant_api_key.value if settings.qdrant_api_key else None
        return await QdrantStore.open(
            url=settings.qdrant_url,
            api_key=api_key,
            collection=settings.collection,
            dimensions=dimensions,
            hybrid=settings.hybrid,
        )
    from proxy.memory.edge import EdgeStore
    from proxy.memory.replica import ReplicaStore, absorb_log

    threads = search_threads(settings, workers)
    if replica:
        return await ReplicaStore.open(
            settings.data_dir,
            dimensions=dimensions,
            hybrid=settings.hybrid,
            record_cache_entries=settings.record_cache_entries,
            search_threads=threads,
        )
    store = await EdgeStore.open(
        settings.data_dir,
        dimensions=dimensions,
        hybrid=settings.hybrid,
        record_cache_entries=settings.record_cache_entries,
        search_threads=threads,
    )
    try:
        await absorb_log(store, settings.data_dir)
    except BaseException:
        await store.close()
        raise
    return store


async def open_primary(settings: Settings, stack: AsyncExitStack) -> MemoryStore | None:
    """For ``serve --workers N`` on the embedded store: the primary shard, brought up to date
    with the write log, held open (so nothing else opens the data dir) while the workers run
    and fed their logged writes as the log grows; on exit, the rest are applied to it.
    ``None`` when no primary is needed."""
    if not settings.memory.enabled or settings.store.kind != "edge":
        return None
    from proxy.memory.edge import EdgeStore
    from proxy.memory.replica import LogFolder, absorb_log

    embedder = await open_embedder(settings, stack)
    # No background index build: replicas copy the files while this process holds them; the
    # build runs here, before any worker copies them (below). No record cache either: the
    # primary only applies the log and never searches, so warming one would decode every
    # memory (up to ~20 MB) for nothing.
    store = await EdgeStore.open(
        settings.store.data_dir,
        dimensions=embedder.dimensions,
        hybrid=settings.store.hybrid,
        optimize_after=None,
        record_cache_entries=0,
        search_threads=search_threads(settings.store, settings.server.workers),
    )
    stack.push_async_callback(store.close)
    stack.push_async_callback(absorb_log, store, settings.store.data_dir)
    await absorb_log(store, settings.store.data_dir)
    # Every worker's replica starts as a copy of these files, so points left outside the graph
    # (the log's, or an earlier process's) are indexed once here rather than scanned by every
    # worker, or built again by each (adr/0150). With nothing to index the engine returns at
    # once (0.1 ms on an indexed 10k store). Flushed: until then the files still hold the
    # segments the build replaced, and a copy loads those, unindexed.
    if await store.optimize():
        await store.flush()
    # While the workers run, their log is folded into the primary as it grows (adr/0120);
    # stopped (last in, first out) before the final absorb and the close.
    folder = LogFolder(store, settings.store.data_dir, settings.store.log_fold_bytes).start()
    stack.callback(folder.stop)
    return store


async def open_memory_store(
    settings: Settings, embedder: Embedder, stack: AsyncExitStack, metrics: Metrics
) -> MemoryStore:
    """Open the store; one that cannot be reached right now is retried in the background
    (``ReopeningStore``, adr/0102) while requests go on without memory (degraded)."""

    async def opener() -> MemoryStore:
        return await open_store(
            settings.store,
            dimensions=embedder.dimensions,
            replica=settings.server.workers > 1,
            workers=settings.server.workers,
        )

    store: MemoryStore
    try:
        store = await opener()
    except ConfigError:
        raise
    except Exception as exc:  # unreachable server, locked data dir: serve without memory
        LOGGER.error(
            "memory store unavailable, serving without memory while it is retried: %s", exc
        )
        store = ReopeningStore(opener, first_error=exc, gauge=metrics).start()
    else:
        metrics.set_backend_up("store", True)
    stack.push_async_callback(store.close)
    return store


def open_request_cache(
    settings: Settings, stack: AsyncExitStack, on_lookup: LookupHook | None = None
) -> RequestCache:
    """Redis when configured, else an in-process LRU; never contacts Redis here.

    Writes are write-behind: caching an embedding or a search result never costs the request a
    Redis round trip (``close`` waits for them).
    """
    conf = settings.cache
    raw = create_cache(
        conf.redis_url,
        conf.local_max_entries,
        timeout_ms=settings.memory.stage_timeouts.cache_ms,
    )
    generations = None
    if not conf.redis_url and settings.server.workers > 1:
        # Each worker caches in its own memory, but a write through one worker must make every
        # worker's cached results of the tenant unreachable: the generations live in a file
        # they all map (adr/0105).
        generations = SharedGenerations(Path(settings.store.data_dir) / GENERATIONS_FILE)
        stack.callback(generations.close)
    ttls = CacheTTLs(conf.embedding_ttl_s, conf.tokens_ttl_s, conf.retrieval_ttl_s)
    # Without Redis no other process reads the cached search results: they stay decoded in the
    # near cache and are never encoded.
    cache = RequestCache(
        raw,
        ttls,
        write_behind=True,
        on_lookup=on_lookup,
        generations=generations,
        shared_retrievals=bool(conf.redis_url),
    )
    stack.push_async_callback(cache.close)
    return cache


async def load_limits() -> ModelLimits:
    """litellm's model table, read once in a worker thread at start (never per request)."""
    try:
        return await asyncio.to_thread(load_model_limits)
    except Exception as exc:  # an unknown model then gets the conservative 8k window
        LOGGER.error("model limits unavailable, using the built-in table: %s", exc)
        return ModelLimits()


def warm_encodings() -> None:
    """Load the tiktoken encodings now: the first load takes ~0.3 s, not a request's time."""
    tiktoken_tokenizer().warm()


def open_fact_capture(
    settings: Settings,
    memories: MemoryService | None,
    upstream: UpstreamClient,
    metrics: Metrics,
    stack: AsyncExitStack,
) -> FactCapture | None:
    """Fact capture over the write path and the upstream client, its queue's workers started
    (stopped on exit, after the chat's background work); ``None`` without a store."""
    if memories is None:
        return None
    conf = settings.memory.extraction
    facts = FactCapture(memories, ExtractionCall(upstream, conf, metrics), conf, metrics)
    facts.queue.start()
    stack.push_async_callback(facts.queue.close, BACKGROUND_DRAIN_S)
    return facts


def turn_blocks(settings: Settings, cache: MemoryCache) -> CachedTurnBlocks | None:
    """Earlier turns' blocks, in the same byte cache (Redis: shared by workers, kept across
    restarts); a provided typed cache of another kind has none, and turns then go without."""
    if not isinstance(cache, RequestCache):
        return None
    return CachedTurnBlocks(cache.cache, settings.cache.blocks_ttl_s)


async def build_pipeline(
    settings: Settings,
    memories: MemoryService | None,
    store: MemoryStore | None,
    cache: MemoryCache,
    metrics: Metrics,
    background: Background,
    stack: AsyncExitStack,
    facts: FactCapture | None = None,
) -> Pipeline:
    """The memory pipeline over the read and write paths; pending retrieval counts flush on
    exit. Without a store (it could not be opened) every request degrades."""
    await asyncio.to_thread(warm_encodings)
    counter = None
    if store is not None:
        counter = RetrievalCounter(
            store, background.spawn, metrics, delay_s=settings.memory.count_flush_s
        )
        stack.push_async_callback(counter.flush)
    blocks = turn_blocks(settings, cache)
    return Pipeline(
        settings.memory,
        calculator=BudgetCalculator(await load_limits(), tiktoken_tokenizer(), memory_cap=None),
        retriever=memories.retriever if memories is not None else None,
        counts=cache,
        writer=memories,
        counter=counter,
        metrics=metrics,
        spawn=background.spawn,
        blocks=blocks,
        facts=facts,
    )
