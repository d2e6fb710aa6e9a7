"""``ReopeningStore``: a memory store that could not be opened at start, opened again in the
background with exponential backoff until it can be (adr/0102).

Without it, a store that failed once at start (memproxy won the race against Qdrant, the data
directory was locked by an import) stayed missing until a restart. The composition root wraps
the store in this adapter only when the first open fails, so a store that opened normally is
used directly and costs the request path nothing. Until the store is open every call raises
``StoreError`` at once (the chat path then degrades, the memories API answers 503, as they did
before); once it opens, calls go straight to it.

A ``ConfigError`` from a later attempt (the server is reachable now, and its collection has
another vector size) stops the retries: trying again cannot fix a configuration, and it is
logged as the one error it is.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np

from proxy.context.records import Candidate, MemoryRecord
from proxy.errors import ConfigError, StoreError
from proxy.memory.store import Found, MemoryStore, Page, RepeatKey, SearchQuery, TurnsQuery

LOGGER = logging.getLogger("memproxy.store")
BACKEND = "store"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits between attempts: ``first_s``, doubling up to ``max_s``, each drawn from the upper
    half of its value so that replicas restarted together do not retry in lockstep."""

    first_s: float = 0.5
    max_s: float = 30.0
    factor: float = 2.0

    def delays(self) -> Callable[[], float]:
        """A fresh sequence of waits; each call returns the next one."""
        current = self.first_s

        def next_delay() -> float:
            nonlocal current
            wait = current * random.uniform(0.5, 1.0)
            current = min(current * self.factor, self.max_s)
            return wait

        return next_delay


class BackendGauge(Protocol):
    """Where the adapter reports (``Metrics``): is the backend up, one more failed attempt."""

    def set_backend_up(self, backend: str, up: bool) -> None:
        """``memproxy_backend_up{backend}``."""

    def count_backend_retry(self, backend: str) -> None:
        """``memproxy_backend_retries_total{backend}``."""


class StoreReopening(StoreError):
    """The store is not open yet; ``state`` says how the retries are going (``/readyz``)."""

    def __init__(self, state: str) -> None:
        super().__init__(f"The memory store is unavailable right now; retry later ({state}).")
        self.state = state


Opener = Callable[[], Awaitable[MemoryStore]]


class ReopeningStore:
    """A ``MemoryStore`` that opens its real store in the background; see the module doc."""

    def __init__(
        self,
        opener: Opener,
        *,
        first_error: BaseException,
        gauge: BackendGauge,
        backoff: Backoff = Backoff(),
    ) -> None:
        self._opener = opener
        self._gauge = gauge
        self._backoff = backoff
        self._store: MemoryStore | None = None
        self._task: asyncio.Task[None] | None = None
        self.failed_attempts = 1
        self.last_error = type(first_error).__name__
        self.gave_up = False

    def start(self) -> ReopeningStore:
        """Start retrying (inside the running loop)."""
        self._gauge.set_backend_up(BACKEND, False)
        self._task = asyncio.get_running_loop().create_task(self._reopen())
        return self

    @property
    def opened(self) -> MemoryStore | None:
        """The real store, once open."""
        return self._store

    async def _reopen(self) -> None:
        next_delay = self._backoff.delays()
        while True:
            delay = next_delay()
            await asyncio.sleep(delay)
            try:
                store = await self._opener()
            except ConfigError as exc:
                self.gave_up = True
                self.last_error = exc.message
                LOGGER.error("memory store: %s; not retrying (fix the configuration)", exc.message)
                return
            except Exception as exc:  # still unreachable: try again later
                self.failed_attempts += 1
                self.last_error = type(exc).__name__
                self._gauge.count_backend_retry(BACKEND)
                LOGGER.warning(
                    "memory store still unavailable (attempt %d: %s); retrying",
                    self.failed_attempts,
                    exc,
                )
                continue
            self._store = store
            self._gauge.set_backend_up(BACKEND, True)
            LOGGER.warning(
                "memory store open after %d failed attempts: memory is back", self.failed_attempts
            )
            return

    def _live(self) -> MemoryStore:
        store = self._store
        if store is None:
            raise StoreReopening(self.state())
        return store

    def state(self) -> str:
        """How the retries are going, for ``/readyz`` and errors."""
        if self.gave_up:
            return f"not retrying: {self.last_error}"
        return f"retrying ({self.failed_attempts} failed attempts, last: {self.last_error})"

    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """See ``MemoryStore``."""
        await self._live().add(records, vectors)

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """See ``MemoryStore``."""
        return await self._live().get(tenant, memory_id)

    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        """See ``MemoryStore``."""
        return await self._live().list(tenant, user=user, source=source, limit=limit, after=after)

    async def delete(self, tenant: str, memory_id: str) -> bool:
        """See ``MemoryStore``."""
        return await self._live().delete(tenant, memory_id)

    async def delete_user(self, tenant: str, user: str) -> int:
        """See ``MemoryStore``."""
        return await self._live().delete_user(tenant, user)

    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        """See ``MemoryStore``."""
        return await self._live().search(tenant, query)

    async def search_near(
        self, tenant: str, query: SearchQuery, seeds: int, window_s: float
    ) -> Found:
        """See ``MemoryStore``."""
        return await self._live().search_near(tenant, query, seeds, window_s)

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """See ``MemoryStore``."""
        await self._live().increment_retrievals(tenant, ids)

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        """See ``MemoryStore``."""
        return await self._live().set_usefulness(tenant, memory_id, usefulness)

    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        """See ``MemoryStore``."""
        return await self._live().update_usefulness(tenant, memory_id, update)

    async def supersede(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        """See ``MemoryStore``."""
        return await self._live().supersede(tenant, memory_id, by)

    async def count(self, tenant: str) -> int:
        """See ``MemoryStore``."""
        return await self._live().count(tenant)

    async def repeats(
        self, tenant: str, keys: Collection[RepeatKey], live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        """See ``MemoryStore``."""
        return await self._live().repeats(tenant, keys, live_at)

    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        """See ``MemoryStore``."""
        return await self._live().turns_near(tenant, query)

    async def purge_expired(self, before: datetime) -> int:
        """See ``MemoryStore``."""
        return await self._live().purge_expired(before)

    async def ready(self) -> bool:
        """The real store's readiness; ``StoreReopening`` until it is open."""
        return await self._live().ready()

    async def close(self) -> None:
        """Stop retrying; close the real store if it opened."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._store is not None:
            await self._store.close()
