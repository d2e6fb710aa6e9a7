"""Retrieval counts of the embedded store, kept beside the shard instead of in its payloads.

Every injected memory gets ``retrieval_count += 1``. Written as shard payload updates, these
counts were the largest cost of the memory path on real text (adr/0103): Qdrant copies every
point whose payload changes out of its indexed segment into the appendable, unindexed one, and
the writes ran on the store's threads while requests searched. So the embedded store keeps a
memory's count here once it has been retrieved: a dict of point key (``edge_ids``: the 64-bit
point id, or the integer of the point's UUID) to count, overriding the
payload's (which stays the count the memory was written with), merged into records as they are
read. The table is saved to one small file next to the shard when it changed, at most every
``SAVE_INTERVAL_S`` and on close; a process killed in between loses the counts of that window,
as the counter's pending increments always could (they only nudge the frequency score). A change
no later one follows (the last batch before traffic stops) is saved by a one-shot timer once the
interval has passed, not left unsaved until the next change or the close (adr/0190).

File: ``MAGIC``, then per point its key as 16 big-endian bytes (a UUID's bytes, or a 64-bit
id zero-padded: one format for both id schemes) and the count as a little-endian u64, written
to a temporary file and renamed over the old one (a reader never sees half a file).

The file's body is kept packed in memory beside the dict and patched in place as counts change,
so a save is one copy, not 10k ``struct`` calls holding the GIL (3-7 ms at 10k entries), and
``save_if_due`` writes and fsyncs on a thread of its own: the store's threads serve searches.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from proxy.context.records import MemoryRecord
from proxy.memory.edge_maintenance import Timer, start_timer

COUNTS_FILE = "retrieval_counts.bin"
MAGIC = b"memproxy-counts-1\n"
SAVE_INTERVAL_S = 5.0
ENTRY = struct.Struct("<16sQ")
COUNT = struct.Struct("<Q")  # an entry's count, patched in place at offset 16
KEY_BYTES = 16
LOGGER = logging.getLogger("memproxy.store")
TIMER_NAME = "retrieval-counts-due"


def start_due_timer(after_s: float, action: Callable[[], None]) -> Timer:
    """The timer of a save armed for later, on a daemon thread of its own."""
    return start_timer(after_s, action, TIMER_NAME)


class RetrievalCounts:
    """Thread-safe point key -> retrieval count, persisted to ``path`` (``None``: memory only)."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        start_timer: Callable[[float, Callable[[], None]], Timer] = start_due_timer,
    ) -> None:
        self.path = path
        self._counts: dict[int, int] = {}
        # The file's body, entry i at i * ENTRY.size; ``_slots`` says where a key's entry is,
        # ``_keys`` whose entry is where (to move the last one into a dropped one's place).
        self._body = bytearray()
        self._slots: dict[int, int] = {}
        self._keys: list[int] = []
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._dirty = False
        self._clock = clock
        self._saved_at = clock()
        # The save armed for when the interval has passed (one at a time), and whether the
        # table was closed: then none is armed again.
        self._start_timer = start_timer
        self._timer_lock = threading.Lock()
        self._due: Timer | None = None
        self._closed = False

    @classmethod
    def load(cls, path: Path) -> RetrievalCounts:
        """The table saved at ``path``; empty if there is none (a new store, or one from before
        the table existed, whose counts are still in the payloads)."""
        table = cls(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return table
        body = data[len(MAGIC) :]
        if not data.startswith(MAGIC) or len(body) % ENTRY.size:
            # Counts only nudge a score: a damaged file costs them, never the store.
            LOGGER.warning("ignoring a damaged retrieval count file at %s", path)
            return table
        table.set_many({int.from_bytes(key): count for key, count in ENTRY.iter_unpack(body)})
        table._dirty = False
        return table

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, pid: int) -> int | None:
        """The count of ``pid`` if it was retrieved since it was written, else ``None``."""
        return self._counts.get(pid)

    def merged(self, pid: int, record: MemoryRecord) -> MemoryRecord:
        """``record`` (read from ``pid``'s payload) with its current retrieval count."""
        count = self._counts.get(pid)
        return record if count is None else replace(record, retrieval_count=count)

    def set_many(self, counts: Mapping[int, int]) -> None:
        """Record new counts (the caller serialises read-modify-write rounds)."""
        if counts:
            with self._lock:
                self._counts.update(counts)
                slots, body, patch = self._slots, self._body, COUNT.pack_into
                for pid, count in counts.items():
                    slot = slots.get(pid)
                    if slot is None:
                        slots[pid] = len(self._keys)
                        self._keys.append(pid)
                        body += ENTRY.pack(pid.to_bytes(KEY_BYTES), count)
                    else:
                        patch(body, slot * ENTRY.size + KEY_BYTES, count)
                self._dirty = True

    def drop(self, pids: Iterable[int]) -> None:
        """Forget ``pids``: they were rewritten (their payload carries the count again) or
        deleted."""
        with self._lock:
            for pid in pids:
                if self._counts.pop(pid, None) is not None:
                    self._forget_entry(pid)
                    self._dirty = True
        self._schedule()  # a drop calls no ``save_if_due``: the timer saves it

    def _forget_entry(self, pid: int) -> None:
        """Drop ``pid``'s packed entry: the last entry moves into its place (caller locks)."""
        slot, size, body, keys = self._slots.pop(pid), ENTRY.size, self._body, self._keys
        last = keys.pop()
        if last != pid:
            body[slot * size : (slot + 1) * size] = body[-size:]
            keys[slot] = last
            self._slots[last] = slot
        del body[-size:]

    def save_if_due(self) -> threading.Thread | None:
        """Start a save on a thread of its own when the table changed, ``SAVE_INTERVAL_S``
        passed since the last save and no save is under way; return that thread. The fsync
        (10-34 ms) would otherwise hold the store's thread a search waits for. Not due yet:
        a timer saves the change once it is (no later change may come to call this again)."""
        if not self._claim_save():
            return None
        thread = threading.Thread(target=self._save_quietly, name="retrieval-counts", daemon=True)
        try:
            thread.start()
        except BaseException:
            self._save_lock.release()
            raise
        return thread

    def _claim_save(self) -> bool:
        """Whether a save is due now (then the caller holds ``_save_lock`` and saves); if the
        table changed but the interval has not passed, arm the timer for when it has."""
        if self.path is None or not self._dirty:
            return False
        if self._clock() - self._saved_at < SAVE_INTERVAL_S:
            self._schedule()
            return False
        if not self._save_lock.acquire(blocking=False):
            return False  # the save under way takes this change, or re-arms at its end
        self._saved_at = self._clock()  # one save per interval, whatever the save takes
        return True

    def _schedule(self) -> None:
        """Arm the timer (unless one is armed, or the table closed) to save a change once
        ``SAVE_INTERVAL_S`` has passed since the last save: an infinite interval never does."""
        if self.path is None or not self._dirty:
            return
        wait = SAVE_INTERVAL_S - (self._clock() - self._saved_at)
        if not math.isfinite(wait):
            return
        with self._timer_lock:
            if self._due is None and not self._closed:
                self._due = self._start_timer(max(wait, 0.0), self._on_due)

    def _on_due(self) -> None:
        """The timer fired: save on its thread (a thread of its own, never the event loop's)."""
        with self._timer_lock:
            self._due = None
            if self._closed:
                return
        if self._claim_save():
            self._save_quietly()

    def _save_quietly(self) -> None:
        try:
            self._save_locked()
        except OSError as exc:  # counts only nudge a score; the timer tries again
            LOGGER.warning("saving retrieval counts failed: %s", exc)
        finally:
            self._save_lock.release()
        self._schedule()  # it failed, or the table changed meanwhile

    def save(self) -> None:
        """Write the table to its file now, if it changed (atomically: temp file, rename)."""
        try:
            with self._save_lock:  # waits for a save under way on its own thread
                self._save_locked()
        finally:
            self._schedule()  # a change a ``save_if_due`` left to this save came after it

    def close(self, *, save: bool = True) -> None:
        """Cancel the armed save and arm none again; then ``save`` (if asked)."""
        with self._timer_lock:
            self._closed = True
            due, self._due = self._due, None
        if due is not None:
            due.cancel()
        if save:
            self.save()

    def _save_locked(self) -> None:
        if self.path is None:
            return
        with self._lock:
            if not self._dirty:
                return
            data = MAGIC + self._body  # one copy of the packed entries
            self._dirty = False
            self._saved_at = self._clock()
        temp = self.path.with_suffix(".tmp")
        try:
            with open(temp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except OSError:
            with self._lock:
                self._dirty = True  # try again next time
            raise
