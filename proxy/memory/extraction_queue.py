"""The extraction queue: bounded, fair between tenants, never in a request's way.

``submit`` is synchronous and never waits: a chat's completion hook hands its turn over and
returns. A turn is dropped, and counted in ``memproxy_extraction_failures_total{reason}``, when
the queue already holds ``queue_size`` turns (``queue_full``) or its tenant has used up its rate
(``rate_limited``: a token bucket of ``tenant_per_minute``, holding ten seconds' worth, at least
one). ``workers`` tasks run the jobs, at most ``tenant_concurrency`` of one tenant at a time;
tenants take turns (round robin), so one busy tenant cannot starve the others. A job's failure
is logged and counted, never raised. On shutdown ``close`` lets running jobs finish within its
limit and drops what still waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from proxy.metrics import Metrics
from proxy.settings import ExtractionSettings

LOGGER = logging.getLogger("memproxy.extraction")
QUEUE_FULL, TENANT_RATE, JOB_ERROR = "queue_full", "tenant_rate", "internal"
BURST_S = 10.0  # a tenant's bucket holds this many seconds of its rate


class Tenanted(Protocol):
    """A job that names its tenant."""

    @property
    def tenant(self) -> str:
        """The tenant the job's work belongs to."""
        ...


J = TypeVar("J", bound=Tenanted)


class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` saved up."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate, self.capacity = rate, capacity
        self.tokens, self.at = capacity, now

    def refill(self, now: float) -> None:
        """Add the tokens earned since the last call."""
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self, now: float) -> bool:
        """Take one token if there is one."""
        self.refill(now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class ExtractionQueue(Generic[J]):
    """Runs ``run(job)`` for submitted jobs in the background, within the limits above."""

    def __init__(
        self,
        run: Callable[[J], Awaitable[None]],
        settings: ExtractionSettings,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run = run
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._waiting: OrderedDict[str, deque[J]] = OrderedDict()
        self._running: dict[str, int] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._size = 0
        self._wake = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._closing = False

    @property
    def size(self) -> int:
        """Jobs waiting (not those running)."""
        return self._size

    def submit(self, job: J) -> bool:
        """Queue ``job`` without waiting; ``False`` (and a counted drop) if it cannot be."""
        conf = self.settings
        if self._size >= conf.queue_size:
            self.metrics.count_extraction_failure(QUEUE_FULL)
            return False
        now = self.clock()
        bucket = self._buckets.get(job.tenant)
        if bucket is None:
            rate = conf.tenant_per_minute / 60.0
            bucket = self._buckets[job.tenant] = TokenBucket(rate, max(1.0, rate * BURST_S), now)
            if len(self._buckets) > conf.queue_size * 4:  # forget idle tenants' buckets
                self._forget_full_buckets(now)
        if not bucket.take(now):
            self.metrics.count_extraction_failure(TENANT_RATE)
            return False
        self._waiting.setdefault(job.tenant, deque()).append(job)
        self._size += 1
        self._wake.set()
        return True

    def _forget_full_buckets(self, now: float) -> None:
        for tenant, bucket in list(self._buckets.items()):
            bucket.refill(now)
            if bucket.tokens >= bucket.capacity and tenant not in self._waiting:
                del self._buckets[tenant]  # a full bucket is what a new one would be

    def start(self) -> None:
        """Start the workers (inside the running loop)."""
        if not self._workers:
            loop = asyncio.get_running_loop()
            self._workers = [loop.create_task(self._work()) for _ in range(self.settings.workers)]

    def _next(self) -> J | None:
        """The next job of the first tenant (round robin) with room to run one."""
        limit = self.settings.tenant_concurrency
        for tenant in list(self._waiting):
            if self._running.get(tenant, 0) >= limit:
                continue
            jobs = self._waiting[tenant]
            job = jobs.popleft()
            if jobs:
                self._waiting.move_to_end(tenant)  # the others go first next time
            else:
                del self._waiting[tenant]
            self._size -= 1
            self._running[tenant] = self._running.get(tenant, 0) + 1
            return job
        return None

    async def _work(self) -> None:
        while True:
            job = self._next()
            if job is None:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self.run(job)
            except Exception:
                LOGGER.exception("fact extraction failed for tenant %s", job.tenant)
                self.metrics.count_extraction_failure(JOB_ERROR)
            finally:
                left = self._running[job.tenant] - 1
                if left:
                    self._running[job.tenant] = left
                else:
                    del self._running[job.tenant]
                self._wake.set()  # a slot of this tenant is free: a waiting worker may take it

    async def close(self, limit_s: float = 10.0) -> None:
        """Let running jobs finish (at most ``limit_s``), drop waiting ones, stop the workers."""
        dropped = self._size
        self._waiting.clear()
        self._size = 0
        if dropped:
            LOGGER.warning("dropped %d fact extractions still queued at shutdown", dropped)
        self._closing = True
        self._wake.set()  # idle workers see the flag and end; busy ones end after their job
        workers, self._workers = self._workers, []
        if not workers:
            return
        _, unfinished = await asyncio.wait(workers, timeout=limit_s)
        for worker in unfinished:
            worker.cancel()
        for worker in unfinished:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
