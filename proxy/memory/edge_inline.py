"""Whether the embedded store runs a search on the event loop's thread or hands it to its own.

qdrant-edge-py 0.9.0 holds the GIL through ``EdgeShard.query`` (adr/0167), so while a search's
engine calls run the event loop cannot run whichever thread makes them; a store thread only adds
the hand-off's two wake-ups (~0.17 ms p50 of the search stage served). What a thread still buys:
the loop never waits on a Python lock another thread holds, and a search of a large store does
not hold the loop between its engine calls. So a search runs inline only when (adr/0172):

- its request was alone in the process's memory stage (``SearchQuery.alone``, the pipeline's
  count): beside another, it hops at once, as before adr/0172;
- the store is open, its record cache's warm-up is over (it holds the GIL a page at a time and
  takes the cache's and the turn index's locks), no other call of the store is on its threads
  (a write, the retrieval-count flush, a flush or close, a hopped search) and no other search
  waits for its turn to run inline (the loop is busy: under load searches hop and queue);
- its shard holds at most ``max_points`` points, as last read by a hopped search (``size``),
  and that reading is not due again;
- no thread holds a lock the search takes (the shard handle's, the record cache's, the turn
  index's, the count table's): each is tried without blocking and let go at once.

A lock taken between the check and the search's own ``with`` is held for a few microseconds of
Python, never across an engine call or I/O: the loop's acquire lets the GIL go and the holder
finishes. Nothing here changes what the search returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class Lock(Protocol):
    """A ``threading.Lock``, ``RLock`` or ``Condition``: what ``free`` tries."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoreState:
    """What the choice reads of the store and of the search, apart from the store's locks."""

    # No other request was in its memory stage when the search was asked for (the pipeline's
    # ``SearchQuery.alone``): under load searches hop and queue, as before adr/0172.
    alone: bool
    closed: bool
    warming: bool  # the record cache's warm-up is still running
    # The store's calls submitted to its threads and not finished, and the searches waiting for
    # their loop turn before running inline.
    calls: int
    points: int | None  # the shard's size as last read; ``None``: not read yet
    # Searches before the size is read again (on a hop): inline ones, or hops over the bound.
    searches_left: int


def inline(state: StoreState, max_points: int) -> bool:
    """Whether a search may run on the loop, its locks aside (``free`` decides those)."""
    return (
        state.alone
        and not state.closed
        and not state.warming
        and state.calls == 0
        and state.points is not None
        and state.points <= max_points
        and state.searches_left > 0
    )


def free(locks: Iterable[Lock]) -> bool:
    """Whether no thread holds any of ``locks`` now: each is tried without blocking and
    released at once (a state check; nothing stays held)."""
    taken: list[Lock] = []
    try:
        for lock in locks:
            if not lock.acquire(blocking=False):
                return False
            taken.append(lock)
        return True
    finally:
        for lock in taken:
            lock.release()
