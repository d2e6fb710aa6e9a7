"""``ShardTenants``: whether a search's tenant condition can exclude anything in the shard.

Every search of the embedded store is scoped to its tenant, yet a shard often holds one
tenant only (a deployment with one API key). There the condition matches every point and
still costs the engine: at 10k real-text memories the dense query took 0.66 ms with it and
0.30 ms without, the BM25 query 0.20 and 0.13, the neighbour lookup 0.14 and 0.08, with the same
results (docs/benchmarks.md). So the embedded store leaves it out of those queries while it
knows the shard holds no other tenant's memory (adr/0145).

It knows as ``edge_users.TenantUsers`` does: the store sees every write of its shard, ``add``
notes the tenants before the batch is visible, and the first search asks the shard once. A
search without the condition still checks the tenant of every memory it returns, so a write
racing the lookup costs a second search with the condition, never another tenant's memory.
Deletes never clear a note (a stale note only costs the condition).

One state for the whole shard, not one per tenant: the sole tenant, or "several". A search of
a tenant with no memory in a one-tenant shard finds the other tenant in its lookup and ends
the one-tenant state too: it is looked up once, not per search.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable


class ShardTenants:
    """Does the shard hold only one tenant's memories, and whose? Thread-safe."""

    def __init__(self) -> None:
        self._sole: str | None = None  # the shard holds no memory of another tenant
        self._several = False
        self._written: str | None = None  # the one tenant this process wrote, if only one
        self._lock = threading.Lock()

    def others(self, tenant: str, look_up: Callable[[], bool]) -> bool:
        """Whether the shard may hold a memory of another tenant than ``tenant``;
        ``look_up`` asks the shard when this process does not know yet. A write noted
        meanwhile wins over the lookup's answer."""
        if self._several:
            return True
        sole = self._sole
        if sole is not None:
            return sole != tenant
        found = look_up()
        with self._lock:
            if not self._several and self._sole is None:
                if found or self._written not in (None, tenant):
                    self._several = True
                else:
                    self._sole = tenant
            return self._several or self._sole != tenant

    def note(self, tenants: Iterable[str]) -> None:
        """Memories of ``tenants`` are about to be written (call before the write is visible
        to searches)."""
        with self._lock:
            for tenant in tenants:
                if self._written is None:
                    self._written = tenant
                if tenant != self._written or self._sole not in (None, tenant):
                    self._several = True

    def note_others(self) -> None:
        """The shard holds several tenants' memories (a search returned another tenant's)."""
        with self._lock:
            self._several = True
