"""The composition root: the one place that turns ``Settings`` into typed services.

The app lifespan (``proxy/app.py``) calls ``open_services`` with its exit stack; every client
opened here is closed by that stack, in reverse order of opening. Ready-made backends a caller
passes in (``Provided``: tests, benchmarks) are used as they are and never closed: their creator
owns them. The CLI opens the same pieces through the same functions (``proxy/cli_memories.py``).

Each port is a protocol the rest of the code uses by type; this module picks its adapter:

- ``MemoryStore`` (``memory/store.py``): ``EdgeStore`` (``store.kind: edge``) or ``QdrantStore``;
- ``Embedder`` (``memory/embedders.py``): ``StaticEmbedder`` or ``OpenAIEmbedder``;
- ``MemoryCache`` (``cache/protocol.py``): ``RequestCache`` over Redis or an in-process LRU;
- ``Transport`` (``transport.py``): inside ``UpstreamClient``, from ``upstream.client``;
- ``MemoryPipeline`` (``pipeline/contract.py``): ``Pipeline``, ``NoopPipeline`` with memory off;
- ``Probe`` (``services.py``): what ``/readyz`` asks.

Over the store, embedder and cache it builds the one read path (``Retriever``) and the one write
path (``MemoryService.write``), shared by the chat pipeline and the memories API.

Policy: a configuration mistake (a wrong vector size, a malformed Redis URL) stops the start
with a ``ConfigError``; a backend that is merely unreachable does not. Memory is an
enhancement, so the proxy starts and serves without it (chat requests report ``degraded``)
rather than refusing traffic because Qdrant or Redis is down.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx

from proxy.background import Background
from proxy.cache.factory import create_cache
from proxy.cache.protocol import MemoryCache
from proxy.cache.request_cache import CacheTTLs, LookupHook, RequestCache
from proxy.context.allocation import BudgetCalculator
from proxy.context.limits import ModelLimits
from proxy.errors import ConfigError
from proxy.memory.embedders import Embedder, create_embedder, prepare_embedder
from proxy.memory.expiry import ExpiryPurger
from proxy.memory.extraction_call import ExtractionCall
from proxy.memory.service import MemoryService
from proxy.memory.store import MemoryStore
from proxy.metrics import Metrics
from proxy.model_limits import load_model_limits
from proxy.pipeline.capture import FactCapture
from proxy.pipeline.contract import MemoryPipeline, NoopPipeline
from proxy.pipeline.counters import RetrievalCounter
from proxy.pipeline.pipeline import Pipeline
from proxy.services import Opened, Probe, Services
from proxy.settings import Settings, StoreSettings
from proxy.tenancy import TenantResolver
from proxy.tokenizer import tiktoken_tokenizer
from proxy.upstream import UpstreamClient

LOGGER = logging.getLogger("memproxy.composition")
EMBEDDER_HTTP_TIMEOUT_S = 10.0
BACKGROUND_DRAIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Provided:
    """Ready-made pieces to use instead of opening them from the settings (never closed here)."""

    upstream: UpstreamClient | None = None
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
    background = Background()
    store, embedder, cache = provided.store, provided.embedder, provided.cache
    memories: MemoryService | None = None
    pipeline = provided.pipeline
    if settings.memory.enabled:
        if embedder is None:
            embedder = await open_embedder(settings, stack)
        if store is None:
            store = await open_memory_store(settings, embedder, stack)
        if cache is None:
            cache = open_request_cache(settings, stack, metrics.count_cache_lookup)
        if store is not None:
            memories = MemoryService(
                store, embedder, cache, max_content_chars=settings.memory.max_content_chars
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
        metrics=metrics,
        tenants=TenantResolver(settings),
        pipeline=pipeline if pipeline is not None else NoopPipeline(),
        memories=memories,
        probes=readiness(settings, upstream, store, embedder, cache),
        background=background,
    )


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


async def open_store(settings: StoreSettings, *, dimensions: int) -> MemoryStore:
    """Open the configured store (the caller closes it).

    ``dimensions`` is the embedder's vector size; a store built with another size raises
    ``ConfigError`` here, at start, instead of failing on the first search.
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

    return await EdgeStore.open(
        settings.data_dir,
        dimensions=dimensions,
        hybrid=settings.hybrid,
        record_cache_entries=settings.record_cache_entries,
    )


async def open_memory_store(
    settings: Settings, embedder: Embedder, stack: AsyncExitStack
) -> MemoryStore | None:
    """Open the store, or return ``None`` (degraded) when it cannot be reached right now."""
    try:
        store = await open_store(settings.store, dimensions=embedder.dimensions)
    except ConfigError:
        raise
    except Exception as exc:  # unreachable server, locked data dir: serve without memory
        LOGGER.error("memory store unavailable, serving without memory: %s", exc)
        return None
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
    retrieval_ttl = conf.retrieval_ttl_s
    if not conf.redis_url and settings.server.workers > 1:
        # Each worker would keep its own generation counters: a write through one worker could
        # not invalidate another's cached results, so results are not cached across requests.
        retrieval_ttl = 0
    ttls = CacheTTLs(conf.embedding_ttl_s, conf.tokens_ttl_s, retrieval_ttl)
    cache = RequestCache(raw, ttls, write_behind=True, on_lookup=on_lookup)
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
    return Pipeline(
        settings.memory,
        calculator=BudgetCalculator(await load_limits(), tiktoken_tokenizer(), memory_cap=None),
        retriever=memories.retriever if memories is not None else None,
        counts=cache,
        writer=memories,
        counter=counter,
        metrics=metrics,
        spawn=background.spawn,
        facts=facts,
    )
