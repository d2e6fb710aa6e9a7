"""``RequestCache``: the ``MemoryCache`` of the memory path, over a byte ``Cache``.

Three kinds of entries, all scoped to the tenant (ADR 0030):

- query embeddings, by embedder name, dimensions and a digest of the text;
- token counts of message contents, by encoding and content digest, in batches, so a long
  conversation only counts the messages it has not sent before;
- search results, by user, query digest, retrieval options and the tenant's *generation*: a
  counter every write to the tenant bumps, so a write makes every older result unreachable.

Use in the read path (``proxy/memory/retriever.py``) and the write path (``MemoryService.write``);
read the generation *before* searching, bump it *after* a write lands::

    key = await cache.retrieval_key(tenant, user, query, top_k=k, sources=sources)
    hits = await cache.get_retrieval(key)          # None on a miss (or no cache)
    if hits is None:
        vector = await cache.embed(tenant, embedder, query)
        hits = await store.search(tenant, SearchQuery(vector, query, user, sources, k))
        await cache.set_retrieval(key, hits)
    ...
    await store.add(records, vectors); await cache.bump_generation(tenant)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from proxy.cache import codec, keys
from proxy.cache.generations import Generations, GenerationSource
from proxy.cache.near import NearCache
from proxy.cache.protocol import Cache, NamedEmbedder, RetrievalKey
from proxy.context.records import Candidate
from proxy.defaults import CACHE_NEAR_ENTRIES
from proxy.defaults import EMBEDDING_TTL_S as DEFAULT_EMBEDDING_TTL_S
from proxy.defaults import RETRIEVAL_TTL_S as DEFAULT_RETRIEVAL_TTL_S
from proxy.defaults import TOKENS_TTL_S as DEFAULT_TOKEN_COUNT_TTL_S
from proxy.eager import Done, finish, start
from proxy.tokenizer import count_tokens as tiktoken_count

DEFAULT_NEAR_TOKEN_ENTRIES = 20_000

log = logging.getLogger("memproxy.cache")

LookupHook = Callable[[str, int, int], None]
"""Called as ``hook(kind, hits, misses)`` after each lookup; kind ``embedding``, ``tokens`` or
``retrieval``. For hit-ratio metrics; must be cheap and must not raise."""


@dataclass(frozen=True, slots=True)
class CacheTTLs:
    """Lifetimes in seconds per kind of entry; 0 disables caching that kind."""

    embedding_s: float = DEFAULT_EMBEDDING_TTL_S
    token_count_s: float = DEFAULT_TOKEN_COUNT_TTL_S
    retrieval_s: float = DEFAULT_RETRIEVAL_TTL_S


class RequestCache:
    """The ``MemoryCache``: typed get/set of embeddings, token counts and search results over any
    ``Cache``.

    Never raises because of the cache: unreachable or corrupt entries are misses. With
    ``write_behind`` the ``set_*`` calls return at once and write in the background (call
    ``flush`` or ``close`` to wait for them), which takes a round trip off the request path.
    Decoded search results and token counts are also kept in per-process ``NearCache``s
    (``near_entries``, ``near_token_entries``; 0 disables): a repeated search then costs only
    the generation read, and a conversation's known messages cost no I/O at all.
    ``shared_retrievals=False`` says no other process reads ``cache`` (the in-process LRU):
    search results then live only in the near cache, decoded, and are never encoded (encoding
    50 real-text hits cost ~0.2 ms per request for a copy only this process could read).
    """

    def __init__(
        self,
        cache: Cache,
        ttls: CacheTTLs | None = None,
        *,
        write_behind: bool = False,
        on_lookup: LookupHook | None = None,
        generations: GenerationSource | None = None,
        near_entries: int = CACHE_NEAR_ENTRIES,
        near_token_entries: int = DEFAULT_NEAR_TOKEN_ENTRIES,
        shared_retrievals: bool = True,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = cache
        self.ttls = ttls or CacheTTLs()
        self.write_behind = write_behind
        self._on_lookup = on_lookup
        # Kept in ``cache`` unless the caller shares them some other way between processes.
        self._generations = generations or Generations(cache, wall_clock)
        # Decoded search results by key (keys carry the generation, so values never change).
        self._near: NearCache[tuple[Candidate, ...]] = NearCache(near_entries, clock)
        # Search results go to ``cache`` too when another process reads it, or when there is no
        # near cache to hold them.
        self.encodes_retrievals = shared_retrievals or near_entries <= 0
        # Token counts by key: a content's count never changes either; ~100 bytes an entry.
        self._near_counts: NearCache[int] = NearCache(near_token_entries, clock)
        self._pending: set[asyncio.Task[None]] = set()

    # -- query embeddings ------------------------------------------------------------------

    async def get_embedding(
        self, tenant: str, embedder: str, dimensions: int, text: str
    ) -> np.ndarray | None:
        """Return the cached float32 vector of ``text``, or ``None``."""
        if self.ttls.embedding_s <= 0:
            return None
        data = await self.cache.get(keys.embedding_key(tenant, embedder, dimensions, text))
        vector = None
        if data is not None:
            try:
                vector = codec.decode_vector(data, dimensions)
            except codec.CacheDecodeError:
                log.debug("ignoring a corrupt cached embedding")
        self._count("embedding", vector is not None)
        return vector

    async def set_embedding(
        self, tenant: str, embedder: str, dimensions: int, text: str, vector: np.ndarray
    ) -> None:
        """Cache the vector of ``text``."""
        if self.ttls.embedding_s <= 0:
            return
        key = keys.embedding_key(tenant, embedder, dimensions, text)
        await self._write(self.cache.set(key, codec.encode_vector(vector), self.ttls.embedding_s))

    async def embed(self, tenant: str, embedder: NamedEmbedder, text: str) -> np.ndarray:
        """Return the vector of ``text``: from the cache, else from ``embedder`` (then cached).

        Errors of the embedder propagate; only the cache fails open.
        """
        name, dims = embedder.name, embedder.dimensions
        vector = await self.get_embedding(tenant, name, dims, text)
        if vector is None:
            vector = np.asarray((await embedder.embed([text]))[0], dtype=np.float32)
            await self.set_embedding(tenant, name, dims, text, vector)
        return vector

    # -- token counts ----------------------------------------------------------------------

    async def get_token_counts(
        self, tenant: str, encoding: str, texts: Sequence[str]
    ) -> list[int | None]:
        """Return the cached count of each text; ``None`` where not cached.

        Counts known to this process cost no I/O; the rest are fetched in one round trip.
        """
        if self.ttls.token_count_s <= 0 or not texts:
            return [None] * len(texts)
        names = [keys.token_count_key(tenant, encoding, keys.digest(t)) for t in texts]
        counts = [self._near_counts.get(name) for name in names]
        missing = [i for i, n in enumerate(counts) if n is None]
        if missing:
            found = await self.cache.get_many([names[i] for i in missing])
            for i, data in zip(missing, found, strict=True):
                n = counts[i] = _count_or_none(data)
                if n is not None:
                    self._near_counts.put(names[i], n, self.ttls.token_count_s)
        misses = counts.count(None)
        self._report("tokens", len(counts) - misses, misses)
        return counts

    async def set_token_counts(self, tenant: str, encoding: str, counts: Mapping[str, int]) -> None:
        """Cache ``{text: count}`` in ``encoding`` (one round trip)."""
        if self.ttls.token_count_s <= 0 or not counts:
            return
        items = {}
        for text, n in counts.items():
            name = keys.token_count_key(tenant, encoding, keys.digest(text))
            items[name] = codec.encode_count(n)
            self._near_counts.put(name, n, self.ttls.token_count_s)
        await self._write(self.cache.set_many(items, self.ttls.token_count_s))

    async def count_tokens(
        self,
        tenant: str,
        encoding: str,
        texts: Sequence[str],
        count: Callable[[str, str], int] = tiktoken_count,
    ) -> list[int]:
        """Return the token count of each text, counting (``count(text, encoding)``) only misses."""
        cached = await self.get_token_counts(tenant, encoding, texts)
        fresh: dict[str, int] = {}
        result: list[int] = []
        for text, hit in zip(texts, cached, strict=True):
            if hit is None:
                hit = fresh.get(text)
                if hit is None:
                    hit = fresh[text] = count(text, encoding)
            result.append(hit)
        await self.set_token_counts(tenant, encoding, fresh)
        return result

    # -- search results --------------------------------------------------------------------

    async def retrieval_key(
        self,
        tenant: str,
        user: str,
        query: str,
        *,
        top_k: int,
        sources: Sequence[str] | None,
        variant: str = "",
    ) -> RetrievalKey | None:
        """Return the key for this search at the tenant's current generation.

        ``variant`` names anything else that changes results (e.g. the embedder model). ``None``
        means "do not use the cache for this search" (cache off or generation unavailable).
        """
        if self.ttls.retrieval_s <= 0:
            return None
        generation = await self.generation(tenant)
        if generation is None:
            return None
        key = keys.retrieval_key(tenant, generation, user, query, top_k, sources, variant)
        return RetrievalKey(tenant=tenant, key=key)

    async def get_retrieval(self, key: RetrievalKey | None) -> list[Candidate] | None:
        """Return the cached search result at ``key``, or ``None``."""
        if key is None:
            return None
        near = self._near.get(key.key)
        if near is not None:
            self._count("retrieval", True)
            return list(near)
        data = await self.cache.get(key.key) if self.encodes_retrievals else None
        hits = None
        if data is not None:
            try:
                hits = codec.decode_candidates(data, key.tenant)
            except codec.CacheDecodeError as exc:
                log.debug("ignoring a corrupt cached search result: %s", exc)
            else:
                self._near.put(key.key, tuple(hits), self.ttls.retrieval_s)
        self._count("retrieval", hits is not None)
        return hits

    async def set_retrieval(
        self, key: RetrievalKey | None, candidates: Sequence[Candidate]
    ) -> None:
        """Cache a search result under ``key`` (from ``retrieval_key``, taken before searching)."""
        if key is None:
            return
        if any(c.record.tenant != key.tenant for c in candidates):
            log.error("refusing to cache another tenant's records under %s", key.tenant)
            return
        if not self.encodes_retrievals:
            self._near.put(key.key, tuple(candidates), self.ttls.retrieval_s)
            return
        try:
            data = codec.encode_candidates(candidates)
        except codec.CacheDecodeError as exc:
            log.debug("not caching a search result: %s", exc)
            return
        self._near.put(key.key, tuple(candidates), self.ttls.retrieval_s)
        await self._write(self.cache.set(key.key, data, self.ttls.retrieval_s))

    # -- generations -----------------------------------------------------------------------

    async def generation(self, tenant: str) -> int | None:
        """Return the tenant's generation, creating it if absent; ``None`` if unavailable."""
        return await self._generations.current(tenant)

    async def bump_generation(self, tenant: str) -> int | None:
        """Make every cached search result of ``tenant`` unreachable. Call after each write."""
        return await self._generations.bump(tenant)

    # -- metrics and health ----------------------------------------------------------------

    def _count(self, kind: str, hit: bool) -> None:
        self._report(kind, int(hit), int(not hit))

    def _report(self, kind: str, hits: int, misses: int) -> None:
        if self._on_lookup is None:
            return
        try:
            self._on_lookup(kind, hits, misses)
        except Exception:  # a broken metrics hook must not break the request
            log.exception("cache lookup hook failed")

    async def ready(self) -> bool:
        """Return whether the underlying cache answers now (``/readyz``)."""
        return await self.cache.ping()

    # -- background writes -----------------------------------------------------------------

    async def _write(self, write: Coroutine[Any, Any, None]) -> None:
        if not self.write_behind:
            await write
            return
        # Started here: a write that never waits (the in-process cache) is done now and needs no
        # task; the rest of one that waits (Redis) goes on in the background.
        started = start(write)
        if isinstance(started, Done):
            return
        task = asyncio.ensure_future(finish(started))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for background writes started so far."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        """Finish background writes and close the underlying cache."""
        await self.flush()
        self._near.clear()
        self._near_counts.clear()
        await self.cache.close()


def _count_or_none(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return codec.decode_count(data)
    except codec.CacheDecodeError:
        return None
