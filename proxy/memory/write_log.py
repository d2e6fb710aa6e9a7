"""The write log that several workers' store replicas share: one file, every write, one order.

With ``server.workers > 1`` on the embedded store each worker keeps a replica of the shard
(``replica.py``, adr/0105). A write is appended here while its writer holds an exclusive
``flock`` on the file, so appends from all workers form one sequence; every replica applies that
sequence in order, so all replicas hold the same memories. The lock covers the append only: the
writer applies its entry after releasing it (adr/0141).

An entry is ``<length:u32><crc32:u32><payload>``, the payload a pickle of ``(op, args)``. Pickle
is safe here for the same reason reading the shard is: only memproxy processes write the data
dir, and nothing in it comes from a client unencoded.

Positions are offsets in the log as if it were never shortened: the supervisor folds the entries
every replica has applied into the primary shard and cuts them off the front of the file while
the workers run (adr/0120), so the file holds ``[base, end)``. Those counters live in a small
file every process maps (``<log>.state``), with one slot per replica saying how far it has
applied, so nothing a replica still needs is cut. ``end`` moves only when a writer has appended
a whole entry: reading it is how a replica learns, without a system call, that it is behind.
``barrier`` is ``end`` as of the last entry that is not a retrieval count: a read waits only
for the entries up to it (adr/0154).
Bytes past ``end`` are a writer's entry cut short (it died mid-write) and are overwritten by the
next append. Reading entries takes the lock shared (a cut moves bytes within the file); writing
and cutting take it exclusive. The state file's own ``flock`` guards the primary shard: a fold
changes it exclusively, a replica copies it shared.

A cut survives its process being killed at any point: it first records its target position in
the state, then moves the kept bytes to the front in chunks no longer than the gap it closes (a
chunk's source is never overwritten before it is copied) and records after each how many bytes
are in place, then truncates and moves ``base``. Whoever opens the log or takes it next to append
or cut finishes a cut so recorded, from the recorded progress: no entry is lost or read twice.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

from proxy.processes import alive, start_time

HEADER = struct.Struct("<II")
Entry = tuple[str, tuple[Any, ...]]
U64 = struct.Struct("<Q")
STATE_SUFFIX = ".state"
STATE_BYTES = 4096
MAGIC = 0x6D706C6F67763031  # "mplogv01": the state file is initialised
# Byte offsets of the state's counters; replica slots (pid, start, applied) follow from SLOTS_AT.
MAGIC_AT, BASE_AT, END_AT, PRIMARY_AT, SLOTS_AT = 0, 8, 16, 24, 64
# A cut under way: its target position (0: none) and the kept bytes already at the front.
CUT_AT, MOVED_AT = 32, 40
# The end of the last entry every read must see (``barrier``): entries past it are retrieval
# counts only, which reads do not wait for (adr/0154). 0 in a state file an older memproxy
# wrote: its entries are absorbed into the primary before any replica opens.
BARRIER_AT = 48
CUT_CHUNK_BYTES = 1 << 20
# A cut closing a gap smaller than this and the bytes it keeps waits for a later, larger one:
# the kept bytes move in chunks no longer than the gap.
CUT_MIN_GAP_BYTES = 64 << 10
# ``start``: the process's start time (``/proc/<pid>/stat`` field 22, clock ticks after boot), so
# a slot whose pid was reused by another process, or whose process exited unreaped, is free.
SLOT = struct.Struct("<QQQ")
APPLIED_IN_SLOT = 2 * U64.size
SLOT_COUNT = (STATE_BYTES - SLOTS_AT) // SLOT.size


class WriteLog:
    """One open handle on the shared log file and its state (each process opens its own)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._state_fd = os.open(f"{self.path}{STATE_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(self._state_fd).st_size < STATE_BYTES:
                os.ftruncate(self._state_fd, STATE_BYTES)  # zeros; never shrinks
            self._state = mmap.mmap(self._state_fd, STATE_BYTES)
            if self._get(MAGIC_AT) != MAGIC:
                self._initialise()
            elif self._get(CUT_AT):
                self._finish_cut_locked()
        except BaseException:
            self.close()
            raise

    def _initialise(self) -> None:
        """First open of this log: positions start at 0, and a log left by an older memproxy
        (no state file) is taken up to its last whole entry."""
        self.lock()
        try:
            if self._get(MAGIC_AT) == MAGIC:
                return  # another process got there first
            self._set(BASE_AT, 0)
            self._set(PRIMARY_AT, 0)
            self._set(END_AT, 0)
            self._set(END_AT, self._scan(0, os.fstat(self._fd).st_size)[1])
            self._set(BARRIER_AT, self.end)
            self._set(MAGIC_AT, MAGIC)
        finally:
            self.unlock()

    def _finish_cut_locked(self) -> None:
        self.lock()
        try:
            self._finish_cut()
        finally:
            self.unlock()

    def _get(self, at: int) -> int:
        return int(U64.unpack_from(self._state, at)[0])

    def _set(self, at: int, value: int) -> None:
        U64.pack_into(self._state, at, value)

    @property
    def end(self) -> int:
        """The position after the last whole entry (one load from the shared map: the cheap
        check every read makes)."""
        return self._get(END_AT)

    @property
    def barrier(self) -> int:
        """The position after the last entry a read must have applied before it answers (every
        entry but retrieval counts, adr/0154); one load, like ``end``."""
        return self._get(BARRIER_AT)

    @property
    def base(self) -> int:
        """The position of the file's first byte: everything before it is in the primary."""
        return self._get(BASE_AT)

    @property
    def primary(self) -> int:
        """How far the primary shard has applied the log."""
        return self._get(PRIMARY_AT)

    def set_primary(self, position: int) -> None:
        """Record that the primary has applied everything before ``position`` (the caller
        holds the primary lock, exclusively)."""
        self._set(PRIMARY_AT, position)

    def size(self) -> int:
        """Bytes in the file now."""
        return os.fstat(self._fd).st_size

    def read(self, position: int) -> tuple[list[tuple[Entry, int]], int]:
        """The whole entries from ``position`` to ``end``, each with the position just after
        it, and the position after the last of them (the caller holds the lock, either way)."""
        base, end, target = self.base, self.end, self._get(CUT_AT)
        if target:  # a cut whose process died: read across its progress until it is finished
            if position < target:
                raise ValueError(f"log position {position} was folded away (cut at {target})")
            gap, moved, start = target - base, self._get(MOVED_AT), position - target
            # Kept bytes before ``moved`` are at the front already; the rest still past the gap.
            data = os.pread(self._fd, max(0, min(end - target, moved) - start), start)
            later = max(start, moved)
            data += os.pread(self._fd, max(0, end - target - later), gap + later)
            return self._parse(data, target + start)
        if position < base:
            raise ValueError(f"log position {position} was folded away (the log starts at {base})")
        return self._scan(position - base, end - base, base)

    def _scan(self, start: int, stop: int, base: int = 0) -> tuple[list[tuple[Entry, int]], int]:
        return self._parse(os.pread(self._fd, max(0, stop - start), start), base + start)

    def _parse(self, data: bytes, at: int) -> tuple[list[tuple[Entry, int]], int]:
        """The whole entries in ``data``, which starts at position ``at``."""
        entries: list[tuple[Entry, int]] = []
        position = 0
        while position + HEADER.size <= len(data):
            length, crc = HEADER.unpack_from(data, position)
            begin = position + HEADER.size
            payload = data[begin : begin + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break  # a dead writer's torn tail (only an old log, read at initialisation)
            position = begin + length
            entries.append((pickle.loads(payload), at + position))
        return entries, at + position

    def lock(self) -> None:
        """Block until this handle holds the exclusive lock (to append or cut)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def lock_shared(self) -> None:
        """Block until this handle holds the lock shared (to read entries)."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def unlock(self) -> None:
        """Release the log's lock."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def lock_primary(self, *, shared: bool) -> None:
        """Block until this handle holds the primary shard's lock (shared: to copy it)."""
        fcntl.flock(self._state_fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)

    def unlock_primary(self) -> None:
        """Release the primary shard's lock."""
        fcntl.flock(self._state_fd, fcntl.LOCK_UN)

    def append(self, entry: Entry, *, barrier: bool = True) -> int:
        """Append ``entry`` at ``end`` (the caller holds the lock exclusively; it applies the
        entry after releasing it); return the new ``end``. ``barrier``: reads must see it (it
        moves ``barrier`` to the new ``end``). A dead writer's bytes past ``end`` are
        overwritten."""
        self._finish_cut()
        base, end = self.base, self.end
        payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        frame = HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        if self.size() > end - base:
            os.ftruncate(self._fd, end - base)
        written = os.pwrite(self._fd, frame, end - base)
        if written != len(frame):  # a short write to a regular file: the disk is full
            os.ftruncate(self._fd, end - base)
            raise OSError(f"short write to {self.path}: {written} of {len(frame)} bytes")
        self._set(END_AT, end + len(frame))  # only now may readers see it
        if barrier:  # after ``end``: a reader that sees the barrier move reads up to it
            self._set(BARRIER_AT, end + len(frame))
        return end + len(frame)

    def cut_before(self, position: int) -> int:
        """Drop the entries before ``position`` from the file (the caller holds the lock
        exclusively, and every replica and the primary have applied them); the bytes freed
        (0 also when the gap is too small to be worth its chunks: a later cut takes it)."""
        self._finish_cut()
        base, end = self.base, self.end
        position = min(max(position, base), end)
        gap = position - base
        if gap == 0 or gap < min(end - position, CUT_MIN_GAP_BYTES):
            return 0
        self._set(MOVED_AT, 0)
        self._set(CUT_AT, position)  # from here on, a kill leaves the cut to be finished
        self._finish_cut()
        return gap

    def _finish_cut(self) -> None:
        """Finish the cut recorded in the state, if any (the caller holds the lock
        exclusively): move what is not in place yet, truncate, move ``base``."""
        target = self._get(CUT_AT)
        if target == 0:
            return
        base, end = self.base, self.end
        gap, length = target - base, end - target
        moved = self._get(MOVED_AT)
        while gap > 0 and moved < length:
            # No longer than the gap: the writes reach at most this chunk's source's start.
            size = min(gap, length - moved, CUT_CHUNK_BYTES)
            chunk = os.pread(self._fd, size, gap + moved)
            if len(chunk) != size or os.pwrite(self._fd, chunk, moved) != size:
                raise OSError(f"short copy while cutting {self.path}")
            moved += size
            self._set(MOVED_AT, moved)
        if gap > 0:
            os.ftruncate(self._fd, length)
            self._set(BASE_AT, target)
        self._set(CUT_AT, 0)

    def claim(self, applied: int) -> int:
        """A slot for this process's replica, which has applied everything before ``applied``
        (the caller holds the lock exclusively); slots of exited processes are reused."""
        pid = os.getpid()
        start = start_time(pid)
        for slot in range(SLOT_COUNT):
            owner, started, _ = SLOT.unpack_from(self._state, SLOTS_AT + slot * SLOT.size)
            if owner == 0 or not alive(owner, started):
                SLOT.pack_into(self._state, SLOTS_AT + slot * SLOT.size, pid, start or 0, applied)
                return slot
        raise OSError(f"more than {SLOT_COUNT} replicas on {self.path}")

    def publish(self, slot: int, applied: int) -> None:
        """Say how far this replica has applied the log (one store into the shared map)."""
        U64.pack_into(self._state, SLOTS_AT + slot * SLOT.size + APPLIED_IN_SLOT, applied)

    def release(self, slot: int) -> None:
        """Give the slot back (the replica is closing)."""
        SLOT.pack_into(self._state, SLOTS_AT + slot * SLOT.size, 0, 0, 0)

    def release_all(self) -> None:
        """Free every slot (no replica runs: the supervisor's start and stop)."""
        self._state[SLOTS_AT:STATE_BYTES] = bytes(STATE_BYTES - SLOTS_AT)

    def replica_positions(self) -> list[int]:
        """How far each live replica has applied the log."""
        positions = []
        for slot in range(SLOT_COUNT):
            owner, started, applied = SLOT.unpack_from(self._state, SLOTS_AT + slot * SLOT.size)
            if owner and alive(owner, started):
                positions.append(applied)
        return positions

    def close(self) -> None:
        """Unmap the state and close the handles (releases the locks held)."""
        state = getattr(self, "_state", None)
        if state is not None:
            state.close()
        os.close(self._state_fd)
        os.close(self._fd)
