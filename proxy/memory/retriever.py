"""The read path: one search of a tenant's memories, the same for a chat request and the API.

``Retriever.retrieve`` runs cache lookup -> embed -> search -> rank -> cache store. The chat
pipeline and ``POST /v1/memories/search`` (and ``memproxy memories search``) all call it; they
differ only in how its stages run (``Stages``): the pipeline runs ``embed`` and ``search`` under
their timeouts, times every stage for ``Server-Timing`` and writes the result to the cache after
the response; the API runs them as they are.

Only live memories are retrieved (``MemoryRecord.live``, adr/0113): the store searches those
live now, and a cached result is filtered again, since a memory in it may have expired since.

Order (README, "Search"): by similarity descending, ties by id ascending. The store is asked for
``max(top_k, pool)`` hits and the ranked list is cut to ``top_k``, so for one ``pool`` every
``top_k`` up to it gets a prefix of the same list: ``top_k=10`` is the first ten of
``top_k=200``. A hybrid store fuses dense and lexical ranks, so the hits it returns depend on how
many are asked for; asking for a fixed pool is what makes the prefix hold. The memories API asks
with ``pool = MAX_TOP_K``; the chat pipeline with ``pool = 0`` (exactly ``top_k``: it ranks the
candidates again itself, and a larger pool would cost every request search time).

With ``neighbours`` (the chat pipeline's ``memory.neighbour_candidates``) the dialog turns just
before and after the user's first ``neighbours`` dialog hits follow the ``top_k`` (adr/0122):
the store's ``search_near`` looks them up with the search (the embedded store in the same thread
hop), and they are cached with the hits. If that lookup fails, the hits go on without
neighbours (logged, and not cached): the neighbours are extras.

With ``lexical`` (the chat pipeline's ``memory.lexical_candidates``) the hits of the hybrid
search's BM25 branch that the fused ``top_k`` leaves out join too (adr/0136): a question's words
find evidence the static embedder misses, and the branch is fetched anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, TypeVar

import numpy as np

from proxy.background import Job
from proxy.cache.protocol import MemoryCache
from proxy.context.records import SOURCES, Candidate
from proxy.defaults import NEIGHBOUR_WINDOW_S
from proxy.memory.embedders import Embedder
from proxy.memory.filters import DIALOG_SOURCE
from proxy.memory.store import MemoryStore, SearchQuery

T = TypeVar("T")
Write = Callable[[], Job]  # a cache write, started when its time comes
ALL_SOURCES = frozenset(SOURCES)
# The stages a retrieval may go through, in order (``Server-Timing`` names).
CACHE, EMBED, SEARCH = "cache", "embed", "search"


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What to retrieve: the ``top_k`` memories of ``user`` and the shared ones closest to
    ``text``, from ``sources`` (``None``, or every source: no filter), out of a ranked pool of
    at least ``pool`` hits, and the dialog turns beside the best of them."""

    text: str
    user: str
    top_k: int
    sources: Collection[str] | None = None
    pool: int = 0
    # The turns beside the first ``neighbours`` dialog hits of ``user`` join the ``top_k``
    # (adr/0122); 0: none. Only for a pool of ``top_k`` (the chat pipeline's).
    neighbours: int = 0
    # The lexical branch's hits beyond the fused ``top_k`` join them (adr/0136); the same pool.
    lexical: bool = False
    # No other request is in its memory stage: ``SearchQuery.alone`` (the pipeline's hint).
    alone: bool = False

    @property
    def sources_turns(self) -> bool:
        """Whether dialog turns are among the sources asked for."""
        return self.sources is None or DIALOG_SOURCE in self.sources


class Stages(Protocol):
    """How the caller runs the stages of a retrieval."""

    async def run(self, stage: str, work: Awaitable[T]) -> T:
        """Await a backend stage (``embed``, ``search``); may bound or time it."""
        ...

    def mark(self, stage: str) -> None:
        """Note that ``stage`` (``cache``) is done."""
        ...

    async def keep(self, write: Write) -> None:
        """Write a result to the cache: now, or after the response."""
        ...


class Direct:
    """Stages as they are: no bounds, no timing, cache writes at once."""

    async def run(self, stage: str, work: Awaitable[T]) -> T:
        """Await ``work``."""
        return await work

    def mark(self, stage: str) -> None:
        """Nothing to note."""

    async def keep(self, write: Write) -> None:
        """Write now (a ``RequestCache`` with write-behind returns at once)."""
        await write()


DIRECT = Direct()


class Retriever:
    """Searches one tenant's memories through the cache; ``cache`` may be ``None``."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        cache: MemoryCache | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.cache = cache
        self.clock = clock

    async def retrieve(
        self, tenant: str, want: Retrieval, stages: Stages = DIRECT
    ) -> list[Candidate]:
        """The best ``want.top_k`` memories, ranked (see the module docstring)."""
        cache, fetch = self.cache, max(want.top_k, want.pool)
        sources = (
            None
            if want.sources is None or ALL_SOURCES.issubset(want.sources)
            else tuple(want.sources)
        )
        # Neighbours come after the cut: a result with them is already cut, and cached apart.
        neighbours = want.neighbours if fetch == want.top_k and want.sources_turns else 0
        lexical = want.lexical and fetch == want.top_k
        key = None
        now = self.clock()
        hits: list[Candidate] | None = None
        if cache is not None:
            variant = self.embedder.name
            key = await cache.retrieval_key(
                tenant,
                want.user,
                want.text,
                top_k=fetch,
                sources=sources,
                variant=variant
                + (f"+turns{neighbours}" if neighbours else "")
                + ("+lexical" if lexical else ""),
            )
            hits = await cache.get_retrieval(key)
            stages.mark(CACHE)
        if hits is None:
            vector = await stages.run(EMBED, self._embed(tenant, want.text))
            search = SearchQuery(
                vector,
                want.text,
                want.user,
                sources,
                fetch,
                live_at=now,
                lexical=lexical,
                alone=want.alone,
            )
            found, whole = await stages.run(SEARCH, self._search(tenant, search, neighbours))
            if cache is not None and key is not None and whole:
                await stages.keep(functools.partial(cache.set_retrieval, key, found))
            hits = found
        elif any(hit.record.expires_at is not None for hit in hits):
            hits = [hit for hit in hits if hit.record.live(now)]
        return hits if neighbours or lexical or len(hits) <= want.top_k else hits[: want.top_k]

    async def _search(
        self, tenant: str, search: SearchQuery, neighbours: int
    ) -> tuple[list[Candidate], bool]:
        """The ranked hits, and with ``neighbours`` the turns beside the first that many dialog
        turns of the user (adr/0122); ``False``: their lookup failed, the hits come without
        them."""
        found = await self.store.search_near(tenant, search, neighbours, NEIGHBOUR_WINDOW_S)
        if found.turns is None:
            return found.hits, False
        return [*found.hits, *found.turns] if found.turns else found.hits, True

    async def _embed(self, tenant: str, text: str) -> np.ndarray:
        if self.cache is not None:
            return await self.cache.embed(tenant, self.embedder, text)
        vectors = await self.embedder.embed([text])
        return np.asarray(vectors[0], dtype=np.float32)
