"""Tenants' generations in a small file every worker maps: several workers, no Redis.

Each worker's in-process cache holds its own search results, but their keys must carry one
generation per tenant that a write through *any* worker moves, or a worker would answer from a
result older than another worker's write (adr/0105). The counters live in a memory-mapped file
of ``SLOTS`` 8-byte slots; a tenant's slot is a hash of its name. Two tenants sharing a slot only
invalidate each other's results now and then, never serve a wrong one.

A bump is a read-increment-write under an exclusive ``flock``, so concurrent bumps from two
workers both count. A read takes no lock: an aligned 8-byte load is one instruction on the
64-bit machines memproxy runs on, so it sees the old value or the new one. The file is never
reset: counters only grow, so a restarted worker's empty cache cannot meet a reused number.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import zlib
from pathlib import Path

SLOTS = 1 << 16
SLOT = struct.Struct("<Q")
FILE_NAME = "cache-generations"


class SharedGenerations:
    """A ``GenerationSource`` over a file shared by the processes that open the same path."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        size = SLOTS * SLOT.size
        if os.fstat(self._fd).st_size < size:
            os.ftruncate(self._fd, size)  # grows with zeros; never shrinks what others use
        self._map = mmap.mmap(self._fd, size)

    @staticmethod
    def _offset(tenant: str) -> int:
        return (zlib.crc32(tenant.encode()) % SLOTS) * SLOT.size

    async def current(self, tenant: str) -> int | None:
        """Return the tenant's generation (0 until its first write)."""
        return int(SLOT.unpack_from(self._map, self._offset(tenant))[0])

    async def bump(self, tenant: str) -> int | None:
        """Advance the tenant's generation in every process; returns the new value."""
        offset = self._offset(tenant)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # held for a load and a store: microseconds
        try:
            value = int(SLOT.unpack_from(self._map, offset)[0]) + 1
            SLOT.pack_into(self._map, offset, value)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return value

    def close(self) -> None:
        """Unmap and close the file."""
        self._map.close()
        os.close(self._fd)
