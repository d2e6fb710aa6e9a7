"""Which cache calls of one request were served: the request's own record, not the process's.

A chat request is ``degraded`` when one of *its* cache calls failed or was skipped by the
breaker. The cache is shared by every request in flight, so "did the last call succeed" says
nothing about this one: with two requests interleaved on the event loop, one request's failure
would be reported on the other. Instead the caller opens a scope (``cache_outcome()``) around its
work, and every cache call that cannot be served notes it in the scope of the task it runs in.

The scope travels in a ``ContextVar``: each asyncio task (one per request) has its own, and tasks
a request starts (write-behind) inherit it, so a write the request caused counts for it too. The
alternative, passing a recorder to every cache call, would thread one parameter through the
byte cache, the generations and every ``RequestCache`` method for the sake of one flag. Outside
any scope (the memories API, start-up, readiness) nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class CacheOutcome:
    """The cache calls of one scope that could not be served (failed, timed out, skipped)."""

    unserved: int = 0

    @property
    def served(self) -> bool:
        """Whether every cache call of the scope was served."""
        return self.unserved == 0


_CURRENT: ContextVar[CacheOutcome | None] = ContextVar("memproxy_cache_outcome", default=None)


@contextmanager
def cache_outcome() -> Iterator[CacheOutcome]:
    """Record the cache calls made inside the block (by this task and the tasks it starts)."""
    outcome = CacheOutcome()
    token = _CURRENT.set(outcome)
    try:
        yield outcome
    finally:
        _CURRENT.reset(token)


def record_unserved() -> None:
    """Note, in the current scope if there is one, that a cache call was not served."""
    outcome = _CURRENT.get()
    if outcome is not None:
        outcome.unserved += 1
