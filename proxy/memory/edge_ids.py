"""How the embedded store names its points: per store, 64-bit integers or UUIDs (adr/0139).

A store keys its own tables (record cache, counts, fusion) by an ``int``, the point key. Stores
created before adr/0139 name points ``uuid5(tenant, id)`` and keep doing so: the key is the
UUID's integer, the shard takes the UUID's hex digits. New stores name a point by a 64-bit hash
of (tenant, id), which is its key and its Qdrant id at once: qdrant-edge hands back a plain
``int`` for it, where it builds a ``uuid.UUID`` (~0.7 us) for every returned UUID id, ~130-175
of them a search.

The scheme is written in ``IDS_FILE`` inside the shard's directory before the shard is created,
so a copy of the shard (a replica) carries it. A shard without the file was written with UUIDs.

Two memories can hash to the same 64-bit id (about 3e-8 at 1M memories): the store checks each
write against what the ids already hold (``EdgeStore.add_sync``) and refuses a write that would
overwrite another memory, and every read by id checks the memory id in the payload.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from proxy.errors import StoreError
from proxy.memory.edge_shard import CONFIG_FILE
from proxy.memory.points import POINT_ID_CACHE_SIZE, point_uuid

IDS_FILE = "memproxy_point_ids"
Scheme = Literal["u64", "uuid"]
NEW_STORES: Scheme = "u64"


class PointIds:
    """A store's point naming: the key of (tenant, id), the key as the shard takes it, and
    the keys of returned points. This base names points by UUIDs (stores before adr/0139)."""

    scheme: Scheme = "uuid"

    def key(self, tenant: str, memory_id: str) -> int:
        """The point key of (tenant, memory id)."""
        return point_uuid(tenant, memory_id).int

    def wire(self, key: int) -> int | str:
        """The point id the shard takes for ``key``: 32 hex digits (a quarter of the time of
        building a ``uuid.UUID``)."""
        return f"{key:032x}"

    def scored(self, found: Sequence[Any]) -> dict[int, float]:
        """{point key: score} of a query's points, in their order."""
        return {point.id.int: point.score for point in found}

    def keyed(self, found: Sequence[Any]) -> dict[int, Any]:
        """{point key: point id as returned} of a query's points, in their order: each ``id``
        is read once (a UUID id builds a new ``uuid.UUID`` at every read)."""
        return {(pid := point.id).int: pid for point in found}


class U64Ids(PointIds):
    """Points named by a 64-bit hash of (tenant, id): the key is the Qdrant id."""

    scheme: Scheme = "u64"

    def key(self, tenant: str, memory_id: str) -> int:
        return point_u64(tenant, memory_id)

    def wire(self, key: int) -> int | str:
        return key

    def scored(self, found: Sequence[Any]) -> dict[int, float]:
        return {point.id: point.score for point in found}

    def keyed(self, found: Sequence[Any]) -> dict[int, Any]:
        return {(pid := point.id): pid for point in found}


UUID_IDS = PointIds()
U64_IDS = U64Ids()


@functools.lru_cache(maxsize=POINT_ID_CACHE_SIZE)
def point_u64(tenant: str, memory_id: str) -> int:
    """The 64-bit point id of (tenant, memory id): the first 8 bytes of its BLAKE2b digest,
    over the same length-prefixed name as ``points.point_uuid``. Fixed forever: changing it
    would orphan every stored point."""
    name = f"{len(tenant)}:{tenant}:{memory_id}".encode()
    return int.from_bytes(hashlib.blake2b(name, digest_size=8).digest())


def ids_at(path: Path, new: Scheme = NEW_STORES) -> PointIds:
    """The point ids of the shard at ``path``: as recorded, UUIDs for a shard from before the
    record existed, and ``new`` (then recorded) for a shard not created yet."""
    marker = path / IDS_FILE
    try:
        recorded = marker.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        if (path / CONFIG_FILE).exists():
            return UUID_IDS
        # Recorded before the shard exists: a copy of the shard never lacks it.
        path.mkdir(parents=True, exist_ok=True)
        temp = marker.with_suffix(".tmp")
        temp.write_text(new + "\n", encoding="utf-8")
        os.replace(temp, marker)  # never half a file
        recorded = new
    for ids in (U64_IDS, UUID_IDS):
        if ids.scheme == recorded:
            return ids
    raise StoreError(f"the memory store at {path} names its points {recorded!r}, unknown here")
