"""``LifecycleTenants``: which tenants' searches need the liveness condition at all.

Only a memory written with ``expires_at`` or ``superseded_by`` can ever stop being live
(adr/0113), and most tenants have none. The liveness condition is checked per candidate in both
branches of a search: 0.12 of 0.9 ms engine time at 10k real-text memories (docs/benchmarks.md).
So the embedded store searches a tenant with the condition only once it knows the tenant holds
such a memory (adr/0116). It knows because it sees every write of its shard (one process, as for
``RecordCache``): ``add`` notes a tenant before the batch becomes visible, and a tenant not seen
yet in this process is looked up in the shard once. A search without the condition still checks
every memory it returns, so a write racing the lookup costs a second search, never a dead
memory.

Bounded: past ``MAX_TENANTS`` it forgets everything and looks tenants up again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

MAX_TENANTS = 100_000  # ~100 B an entry


class LifecycleTenants:
    """Per tenant: may it hold a memory that expires or was superseded? Thread-safe."""

    def __init__(self, max_tenants: int = MAX_TENANTS) -> None:
        self.max_tenants = max_tenants
        self._known: dict[str, bool] = {}
        self._lock = threading.Lock()

    def may_hold(self, tenant: str, look_up: Callable[[], bool]) -> bool:
        """Whether ``tenant`` may hold one; ``look_up`` asks the shard when this process does
        not know yet. A tenant noted meanwhile stays noted: a lookup never unnotes one."""
        known = self._known.get(tenant)
        if known is not None:
            return known
        found = look_up()
        with self._lock:
            if len(self._known) >= self.max_tenants:
                self._known.clear()
            return self._known.setdefault(tenant, found)

    def note(self, tenants: Iterable[str]) -> None:
        """``tenants`` now hold one (call before the write is visible to searches)."""
        with self._lock:
            for tenant in tenants:
                self._known[tenant] = True
