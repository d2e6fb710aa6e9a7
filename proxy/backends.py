"""Opening the memory backends (embedder, store, cache) from settings, inside the lifespan.

Policy: a configuration mistake (a wrong vector size, a malformed Redis URL) stops the start
with a ``ConfigError``; a backend that is merely unreachable does not. Memory is an
enhancement, so the proxy starts and serves without it (chat requests report ``degraded``)
rather than refusing traffic because Qdrant or Redis is down.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import httpx

from proxy.cache.factory import create_cache
from proxy.cache.request_cache import CacheTTLs, LookupHook, RequestCache
from proxy.context.allocation import BudgetCalculator
from proxy.context.limits import ModelLimits
from proxy.errors import ConfigError
from proxy.hooks import NoopPipeline
from proxy.memory.embedders import Embedder, create_embedder, prepare_embedder
from proxy.memory.service import MemoryService
from proxy.memory.store import MemoryStore, open_store
from proxy.model_limits import load_model_limits
from proxy.pipeline.counters import RetrievalCounter
from proxy.pipeline.pipeline import Pipeline
from proxy.tokenizer import tiktoken_tokenizer

if TYPE_CHECKING:
    from proxy.services import Services
    from proxy.settings import Settings

LOGGER = logging.getLogger("memproxy.backends")
EMBEDDER_HTTP_TIMEOUT_S = 10.0


async def open_embedder(settings: Settings, stack: AsyncExitStack) -> Embedder:
    """Build the configured embedder; a remote one gets its own pooled HTTP client."""
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


async def open_backends(services: Services, stack: AsyncExitStack) -> None:
    """Fill the embedder, store and cache slots of ``services`` that were not injected."""
    settings = services.settings
    if not settings.memory.enabled:
        return
    if settings.store.kind == "edge" and settings.server.workers > 1 and services.store is None:
        # The embedded shard is owned by one process; a second worker could not open it and
        # would silently serve without memory.
        raise ConfigError(
            "the embedded store (store.kind: edge) serves one process; with server.workers > 1 "
            "use store.kind: qdrant (MEMPROXY_QDRANT_URL), or set server.workers: 1",
            param="server.workers",
        )
    if services.embedder is None:
        services.embedder = await open_embedder(settings, stack)
    if services.store is None:
        services.store = await open_memory_store(settings, services.embedder, stack)
    if services.cache is None:
        services.cache = open_request_cache(settings, stack, services.metrics.count_cache_lookup)
    if isinstance(services.pipeline, NoopPipeline):
        services.pipeline = await build_pipeline(services, stack)


async def load_limits() -> ModelLimits:
    """litellm's model table, read once in a worker thread at start (never per request)."""
    try:
        return await asyncio.to_thread(load_model_limits)
    except Exception as exc:  # an unknown model then gets the conservative 8k window
        LOGGER.error("model limits unavailable, using the built-in table: %s", exc)
        return ModelLimits()


async def warm_up(embedder: Embedder | None) -> None:
    """First-use costs (tokenizer tables, the static model's first call) paid at start: the
    first load of an encoding takes ~0.3 s, not a request's time."""
    await asyncio.to_thread(tiktoken_tokenizer().warm)
    if embedder is not None and hasattr(embedder, "embed_sync"):
        await embedder.embed(["warm up"])


async def build_pipeline(services: Services, stack: AsyncExitStack) -> Pipeline:
    """The memory pipeline over the opened backends; pending retrieval counts flush on exit."""
    settings = services.settings
    store, embedder, cache = services.store, services.embedder, services.cache
    await warm_up(embedder)
    counter = RetrievalCounter(
        store, services.spawn, services.metrics, delay_s=settings.memory.count_flush_s
    )
    stack.push_async_callback(counter.flush)
    service = None
    if store is not None and embedder is not None:
        service = MemoryService(
            store, embedder, cache, max_content_chars=settings.memory.max_content_chars
        )
    return Pipeline(
        settings.memory,
        calculator=BudgetCalculator(await load_limits(), tiktoken_tokenizer(), memory_cap=None),
        store=store,
        embedder=embedder,
        cache=cache,
        metrics=services.metrics,
        spawn=services.spawn,
        service=service,
        counter=counter,
    )
