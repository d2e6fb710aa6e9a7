"""The write log that several workers' store replicas share: one file, every write, one order.

With ``server.workers > 1`` on the embedded store each worker keeps a replica of the shard
(``replica.py``, adr/0105). A write is appended here while its writer holds an exclusive
``flock`` on the file, so appends from all workers form one sequence; every replica applies that
sequence in order, so all replicas hold the same memories.

An entry is ``<length:u32><crc32:u32><payload>``, the payload a pickle of ``(op, args)``. Pickle
is safe here for the same reason reading the shard is: only memproxy processes write the data
dir, and nothing in it comes from a client unencoded. A reader that is not holding the lock may
meet an entry still being written (or left torn by a writer that died mid-write): it stops there
and reads it next time. A writer holds the lock, so bytes past the last whole entry can only be
a dead writer's torn tail, which it cuts off before appending (that write was never acknowledged).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import Any

HEADER = struct.Struct("<II")
Entry = tuple[str, tuple[Any, ...]]
READ_CHUNK = 1 << 20


class WriteLog:
    """One open handle on the shared log file (each replica opens its own)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # O_APPEND: a write always lands at the end, whatever offset this handle last read.
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)

    def size(self) -> int:
        """Bytes in the file now (one ``fstat``: the cheap check every read makes)."""
        return os.fstat(self._fd).st_size

    def read(self, offset: int) -> tuple[list[tuple[Entry, int]], int]:
        """The whole entries from ``offset`` on, each with the offset just after it, and the
        offset after the last of them."""
        data = os.pread(self._fd, max(0, self.size() - offset), offset)
        entries: list[tuple[Entry, int]] = []
        position = 0
        while position + HEADER.size <= len(data):
            length, crc = HEADER.unpack_from(data, position)
            start = position + HEADER.size
            payload = data[start : start + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                break  # being written, or a dead writer's torn tail
            position = start + length
            entries.append((pickle.loads(payload), offset + position))
        return entries, offset + position

    def lock(self) -> None:
        """Block until this handle holds the exclusive write lock (other processes' writers
        wait meanwhile)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def unlock(self) -> None:
        """Release the write lock."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def append(self, entry: Entry, end: int) -> int:
        """Append ``entry`` (the caller holds the lock and has read up to ``end``); return the
        offset after it. Bytes past ``end`` are a torn tail and are cut off first."""
        if self.size() > end:
            os.ftruncate(self._fd, end)
        payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
        frame = HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        written = os.write(self._fd, frame)
        if written != len(frame):  # a short write to a regular file: the disk is full
            os.ftruncate(self._fd, end)
            raise OSError(f"short write to {self.path}: {written} of {len(frame)} bytes")
        return end + len(frame)

    def truncate(self) -> None:
        """Empty the log (its entries are in the primary shard now; the caller holds the lock)."""
        os.ftruncate(self._fd, 0)

    def close(self) -> None:
        """Close the handle (releases the lock if held)."""
        os.close(self._fd)
