"""``TenantUsers``: whether a search's user condition can exclude anything in its tenant.

A search sees the user's memories and the tenant's shared ones (``filters.scope_conditions``).
In a tenant that holds no other user's memory (one user, or shared memories only) the condition
matches every memory of the tenant, and it still costs the engine: the dense query with it took
~0.08 ms more than with the tenant condition alone at 10k real-text memories (docs/benchmarks.md).
So the embedded store leaves it out once it knows the tenant holds no memory of another user.

It knows as ``edge_lifecycle.LifecycleTenants`` does: the store sees every write of its shard,
``add`` notes the (tenant, user) pairs before the batch is visible, and a pair not seen yet in
this process is looked up in the shard once. A search without the condition still checks the
user of every memory it returns, so a write racing the lookup costs a second search with the
condition, never another user's memory. Deletes never clear a note (a stale note only costs
the condition).

Bounded: past ``MAX_ENTRIES`` it forgets everything and looks pairs up again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from proxy.memory.filters import scope_users

MAX_ENTRIES = 100_000  # ~150 B an entry


class TenantUsers:
    """Per (tenant, user): may the tenant hold memories a search of that user does not see
    (another user's)? Thread-safe."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._known: dict[str, dict[str, bool]] = {}
        self._writers: dict[str, set[str]] = {}  # users whose memories this process wrote
        self._size = 0
        self._lock = threading.Lock()

    def others(self, tenant: str, user: str, look_up: Callable[[], bool]) -> bool:
        """Whether ``tenant`` may hold another user's memory than ``user``'s and the shared
        ones; ``look_up`` asks the shard when this process does not know yet. A write noted
        meanwhile wins over the lookup's answer."""
        known = self._known.get(tenant, {}).get(user)
        if known is not None:
            return known
        found = look_up()
        with self._lock:
            seen = scope_users(user)
            found = found or any(w not in seen for w in self._writers.get(tenant, ()))
            self._grow()
            return self._known.setdefault(tenant, {}).setdefault(user, found)

    def note(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Memories of these (tenant, user) pairs are about to be written (call before the
        write is visible to searches)."""
        with self._lock:
            for tenant, writer in pairs:
                if writer not in self._writers.get(tenant, ()):
                    # Before the set is fetched: past the bound ``_grow`` drops it, and the
                    # writer added to a dropped set would be forgotten at once.
                    self._grow()
                    self._writers.setdefault(tenant, set()).add(writer)
                users = self._known.get(tenant, {})
                for user in users:
                    if writer not in scope_users(user):
                        users[user] = True

    def note_others(self, tenant: str, user: str) -> None:
        """``tenant`` holds another user's memory than ``user``'s (a search returned one)."""
        with self._lock:
            self._grow()
            self._known.setdefault(tenant, {})[user] = True

    def _grow(self) -> None:
        """Count an entry (the caller holds the lock); past the bound, forget everything."""
        if self._size >= self.max_entries:
            self._known.clear()
            self._writers.clear()
            self._size = 0
        self._size += 1
