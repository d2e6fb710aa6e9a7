"""``DialogTurns``: the embedded store's dialog turns by (tenant, user) and time, in memory.

The neighbour lookup of a search (adr/0122) asks for one user's dialog turns within a few
time windows. As an engine query (its filter, the hand-off to the engine's pool) it found on
average half a turn that was not a hit already, and cost 0.15-0.2 ms of a 10k-memory search
more than this index does (docs/benchmarks.md, "The search stage, sixth pass"). The store keeps
every dialog turn's time here and reads the windows with a bisection; the engine is asked only
for the cosines of the turns the lookup keeps (adr/0162).

An answer is a superset of the live turns in the windows; the store's record lookup finds what
each is now. What must never happen is a live turn missing. A superseded turn is not listed
(``listed_at``): the store drops it when it marks it, a build skips it. Supersession is final
for the point as written: the store marks a memory once and never clears the mark, and only a
new upsert of the id (an import writing it again) brings it back, which the index notes as any
write. An expired turn stays listed until it is deleted: expiry is relative to each search's
``live_at`` (the retriever's clock, not the store's), so a turn expired now may be live for a
search asking about an earlier time; ``purge_expired`` drops what it deletes. So does
``delete_user``: a delete through a filter reads its keys first.

The index answers only once it is complete: filled from a full read of the shard (the record
cache's warm-up) while every write and delete of the meantime is noted, and kept up to date by
the store's writes after that. Until then, or for a store too large to warm up, ``near``
returns ``None`` and the store asks the engine. A write that fails after its turns were noted
``abandon``s the index; the store's next successful upsert starts a new build
(``take_rebuild``), as the warm-up does. The index holds at most ``max_turns`` turns (the store
passes its record cache's size, the bound of the warm-up): a store that grows past it in one
process gives the index up rather than grow without bound (~320 bytes a turn, and 8 for its
time in ``_times``), and is not rebuilt (it would give up again).
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections.abc import Iterable, Sequence

from proxy.context.records import MemoryRecord
from proxy.memory.filters import DIALOG_SOURCE

Line = list[tuple[float, int]]  # (created_ts, point key), sorted
Turn = tuple[int, str, str, float]  # (point key, tenant, user, created_ts)


def listed_at(record: MemoryRecord) -> float | None:
    """The time the index lists ``record`` at: its creation time if it is a dialog turn not
    superseded (final, see above), else ``None``. An empty mark is none, as the record read
    back says (``points.from_payload``): the search would see that turn live."""
    if record.source != DIALOG_SOURCE or record.superseded_by:
        return None
    return record.created_at.timestamp()


class DialogTurns:
    """The dialog turns of a shard by (tenant, user), in time order; thread-safe."""

    def __init__(self, max_turns: int | None = None) -> None:
        self.max_turns = max_turns
        self._lock = threading.Lock()
        self._lines: dict[tuple[str, str], Line] = {}
        # Each line's times alone, in one block of doubles: ``near`` bisects these. A probe of
        # the line reads a tuple and a float, scattered over a heap the engine's calls evict
        # from the CPU caches between searches; ~20 bisections a search (docs/benchmarks.md).
        self._times: dict[tuple[str, str], array[float]] = {}
        self._where: dict[int, tuple[tuple[str, str], float]] = {}
        self._building = False
        self._complete = False
        # Keys written or deleted while a build reads the shard: its page of them may be stale.
        self._written: set[int] = set()
        # An ``abandon`` of a listing index: the next build is the store's to start (once).
        self._rebuild = False

    @property
    def complete(self) -> bool:
        """Whether ``near`` answers (a build finished and nothing gave up on it since)."""
        return self._complete

    @property
    def listing(self) -> bool:
        """Whether writes and deletes are noted (a build runs, or it finished complete)."""
        return self._building or self._complete

    def start(self) -> None:
        """Begin a build: forget everything, note the writes from now on."""
        with self._lock:
            self._lines.clear()
            self._times.clear()
            self._where.clear()
            self._written.clear()
            self._building, self._complete, self._rebuild = True, False, False

    def load(self, turns: Iterable[Turn]) -> None:
        """Add the turns a build read, except those written or deleted since it started."""
        with self._lock:
            if not self._building:
                return
            for key, tenant, user, ts in turns:
                if key not in self._written:
                    self._put(key, tenant, user, ts)
            if self.max_turns is not None and len(self._where) > self.max_turns:
                self._give_up()

    def finish(self, complete: bool) -> None:
        """End a build: ``complete`` if it read the whole shard, else drop what it read."""
        with self._lock:
            self._building, self._complete = False, complete and self._building
            self._written.clear()
            if not self._complete:
                self._give_up()

    def abandon(self) -> None:
        """Stop answering until the next build: a write failed after its turns were noted, so
        the index may no longer list a turn the shard still holds where it holds it. A
        listing index asks for a rebuild (``take_rebuild``); one given up already does not."""
        with self._lock:
            self._rebuild = self._rebuild or self._building or self._complete
            self._give_up()

    def take_rebuild(self) -> bool:
        """Whether a build is due after an ``abandon``: ``True`` once, to the caller that then
        starts it. A give-up past ``max_turns``, or a build that could not read the shard, asks
        for none: another would end the same way."""
        with self._lock:
            due, self._rebuild = self._rebuild, False
            return due

    def _give_up(self) -> None:
        """Forget everything and stop answering until the next build (lock held)."""
        self._building = self._complete = False
        self._written.clear()
        self._lines.clear()
        self._times.clear()
        self._where.clear()

    def write(self, turns: Iterable[tuple[int, str, str, float | None]]) -> None:
        """Note written points: (key, tenant, user, created_ts, or ``None`` if not a dialog
        turn). Call before the write is visible: a turn listed early finds no record yet."""
        with self._lock:
            if not (self._building or self._complete):
                return
            for key, tenant, user, ts in turns:
                self._drop(key)
                if self._building:
                    self._written.add(key)
                if ts is not None:
                    self._put(key, tenant, user, ts)
            if self.max_turns is not None and len(self._where) > self.max_turns:
                self._give_up()

    def drop(self, keys: Iterable[int]) -> None:
        """Forget deleted points."""
        with self._lock:
            if not (self._building or self._complete):
                return
            for key in keys:
                self._drop(key)
                if self._building:
                    self._written.add(key)

    def near(
        self, tenant: str, user: str, windows: Sequence[tuple[float, float]]
    ) -> list[int] | None:
        """The keys of the user's turns with ``low <= created_ts <= high`` for some window, in
        time order, each once; ``None`` if the index is not complete."""
        with self._lock:
            if not self._complete:
                return None
            line = self._lines.get((tenant, user))
            if not line:
                return []
            times = self._times[(tenant, user)]
            spans: list[tuple[int, int]] = []
            for low, high in sorted(windows):
                start = bisect.bisect_left(times, low)
                end = bisect.bisect_right(times, high)
                if spans and start <= spans[-1][1]:  # overlapping windows: one span
                    spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
                elif start < end:
                    spans.append((start, end))
            return [key for start, end in spans for _, key in line[start:end]]

    def _put(self, key: int, tenant: str, user: str, ts: float) -> None:
        owner = (tenant, user)
        line = self._lines.setdefault(owner, [])
        at = bisect.bisect_right(line, (ts, key))
        line.insert(at, (ts, key))
        self._times.setdefault(owner, array("d")).insert(at, ts)
        self._where[key] = (owner, ts)

    def _drop(self, key: int) -> None:
        where = self._where.pop(key, None)
        if where is None:
            return
        owner, ts = where
        line = self._lines[owner]
        at = bisect.bisect_left(line, (ts, key))
        del line[at]
        del self._times[owner][at]
        if not line:
            del self._lines[owner]
            del self._times[owner]
