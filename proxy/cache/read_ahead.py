"""Values one request read ahead: keys fetched in a round trip it made anyway, used once later.

A chat request with position ``turn`` reads the tenant's forget stamp before its search
(``blocks.py``), and its retrieval key then reads the tenant's generation (``generations.py``):
with Redis, two round trips in series before the search can start. The stamp's read fetches the
generation in the same round trip instead and leaves it here; the generation's read takes it.
Both values are still read before the search, which is all either needs.

Like ``outcome.py``, the scope travels in a ``ContextVar``: the caller opens ``read_ahead()``
around one request's work, and the tasks it starts (the search) share its values. A value is
taken at most once, so it never outlives the request that read it; outside any scope nothing is
kept and every read goes to the cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_AHEAD: ContextVar[dict[str, bytes] | None] = ContextVar("memproxy_read_ahead", default=None)


@contextmanager
def read_ahead() -> Iterator[None]:
    """Keep values read ahead inside the block (this task's and the tasks it starts)."""
    token = _AHEAD.set({})
    try:
        yield
    finally:
        _AHEAD.reset(token)


def offer(key: str, value: bytes | None) -> None:
    """Keep ``value``, just read from the cache, for this request's next read of ``key``."""
    ahead = _AHEAD.get()
    if ahead is not None and value is not None:
        ahead[key] = value


def take(key: str) -> bytes | None:
    """The value of ``key`` this request read ahead (once), or ``None``: read it now."""
    ahead = _AHEAD.get()
    return None if ahead is None else ahead.pop(key, None)
