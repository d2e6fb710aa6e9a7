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

One state for the whole shard: empty, its sole tenant, or "several". The lookup asks which
tenants the shard holds, not whether it holds others than the searcher: so whoever searches
first (a tenant with no memory, a wrong key) cannot end the one-tenant state of the tenant the
shard does hold. A lookup that fails decides nothing: that search keeps the condition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable


class ShardTenants:
    """Does the shard hold only one tenant's memories, and whose? Thread-safe."""

    def __init__(self) -> None:
        self._sole: str | None = None  # the first tenant known in the shard (looked up or noted)
        self._several = False  # another tenant than ``_sole`` is known in the shard too
        self._known = False  # the shard was looked up: what it holds is all noted
        self._lock = threading.Lock()

    def others(self, tenant: str, look_up: Callable[[], Collection[str] | None]) -> bool:
        """Whether the shard may hold a memory of another tenant than ``tenant``.

        ``look_up`` asks the shard when this process does not know yet: the tenants it holds
        (none, one, or any two of them), or ``None`` if it could not tell (the answer is then
        ``True`` and nothing is remembered). Writes noted meanwhile add to its answer."""
        if self._several:
            return True
        if self._known:
            return self._sole not in (None, tenant)
        found = look_up()
        if found is None:
            return True
        with self._lock:
            self._add(found)
            self._known = True
            return self._several or self._sole not in (None, tenant)

    def note(self, tenants: Iterable[str]) -> None:
        """Memories of ``tenants`` are about to be written (call before the write is visible
        to searches)."""
        with self._lock:
            self._add(tenants)

    def note_others(self) -> None:
        """The shard holds several tenants' memories (a search returned another tenant's)."""
        with self._lock:
            self._several = True

    def _add(self, tenants: Iterable[str]) -> None:
        """Tenants held by the shard (the caller holds the lock)."""
        for tenant in tenants:
            if self._sole is None:
                self._sole = tenant
            elif tenant != self._sole:
                self._several = True
