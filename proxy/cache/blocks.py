"""The memory blocks of earlier turns, remembered so later requests put them back where they were.

An application resends its own history, which never held our blocks. With the block in the
latest turn (``proxy/context/position.py``), the next request would therefore lack it and the
previous upstream prompt would stop being a prefix where its block was. So each injected block
is remembered under a key naming the conversation up to the message that held it, and a later
request whose messages start the same way gets it back at the same slot (adr/0111).

Keys: ``mp:v1:<tenant>:blk:<digest>``, the digest over the scope (memory user, sources,
encoding: a block shows that user's memories from those sources, counted in that encoding) and
every message up to and including the block's, as sorted-key JSON with ``cache_control``
removed (moving a breakpoint changes no token of the prompt, so it must not lose the block).
Digests of all prefixes come from one pass (``prefix_keys``). Entries live ``cache.blocks_ttl_s``
in the shared cache: with Redis across workers and restarts, in-process otherwise. A miss, a
corrupt entry or a cache that is down is only a miss: that turn's prompt diverges from the
previous one where the block was, once, and nothing fails.

Deleted memories: a block shows memories as they were; once one of them is deleted, no block
of the tenant may come back (``forget``). Each block carries the tenant's *forget stamp* as it
was when the block was recalled for its turn, and a recall reads the current stamp in the same
round trip (one more key in the ``get_many``): a block whose stamp differs is a miss. Deleting
moves the stamp, so every conversation of the tenant loses its earlier blocks once (its prompt
diverges there once) instead of showing a deleted memory until the TTL. A request that searches
before its recall answers reads the stamp first (``stamp``): the block it keeps must carry the
stamp from before its search read the store, or a delete landing between the search and the
recall would be remembered as seen. That read fetches the tenant's generation too, which the
search's retrieval key reads next (``read_ahead.py``): the stamp costs no round trip of its own.
The stamp is a counter
like the tenants' generations (ADR 0031): a missing one (never set, evicted) restarts at the
wall clock in microseconds, so it never meets a value an earlier one had. Without Redis each
worker has its own cache: a delete then reaches the blocks of the worker that served it only.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from proxy.cache import read_ahead
from proxy.cache.codec import CacheDecodeError, decode_count
from proxy.cache.keys import DIGEST_BYTES, generation_key, tenant_prefix
from proxy.cache.protocol import Cache
from proxy.context.position import BREAKPOINT

KIND = "blk"
STAMP = "blkstamp"  # the tenant's forget stamp (``tenant_prefix(tenant) + STAMP``)
MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class Remembered:
    """One turn's block: its text, its slot's ``after``, its exact tokens, the memories shown,
    and the tenant's forget stamp it was shown under."""

    block: str
    after: int
    tokens: int
    ids: tuple[str, ...]
    stamp: int = 0


@dataclass(frozen=True, slots=True)
class Recalled:
    """What one recall found: a block or ``None`` per key, and the tenant's forget stamp now
    (``None``: unknown, the cache failed; a block shown now is then not kept)."""

    found: list[Remembered | None]
    stamp: int | None


class TurnBlocks(Protocol):
    """Where blocks of earlier turns are kept; like ``Cache`` it never raises for the backend."""

    async def recall(self, tenant: str, keys: Sequence[str]) -> Recalled:
        """The block remembered under each key, ``None`` where there is none or it was shown
        before the tenant's last ``forget`` (one round trip)."""
        ...

    async def stamp(self, tenant: str) -> int | None:
        """The tenant's forget stamp now (``None``: unknown, the cache failed)."""
        ...

    async def remember(self, key: str, block: Remembered) -> None:
        """Keep ``block`` under ``key``."""
        ...

    async def forget(self, tenant: str) -> None:
        """Let no block of ``tenant`` shown until now come back (a memory was deleted)."""
        ...


class CachedTurnBlocks:
    """``TurnBlocks`` over a byte ``Cache`` (Redis or in-process), entries living ``ttl_s``."""

    def __init__(self, cache: Cache, ttl_s: float) -> None:
        self.cache = cache
        self.ttl_s = ttl_s

    async def recall(self, tenant: str, keys: Sequence[str]) -> Recalled:
        """The blocks under ``keys`` shown under the current stamp; a corrupt entry is a miss."""
        if self.ttl_s <= 0:
            return Recalled([None] * len(keys), None)
        data, *found = await self.cache.get_many([stamp_key(tenant), *keys])
        stamp = await self._stamp(tenant, data)
        blocks = [decode(data) if data is not None else None for data in found]
        return Recalled([b if b is not None and b.stamp == stamp else None for b in blocks], stamp)

    async def stamp(self, tenant: str) -> int | None:
        """The tenant's forget stamp now (one round trip; two when it is missing), and the
        tenant's generation read ahead for this request's search."""
        if self.ttl_s <= 0:
            return None
        generation = generation_key(tenant)
        data, ahead = await self.cache.get_many([stamp_key(tenant), generation])
        read_ahead.offer(generation, ahead)
        return await self._stamp(tenant, data)

    async def _stamp(self, tenant: str, data: bytes | None) -> int | None:
        """The stamp stored as ``data``; a missing one is seeded (see above)."""
        if data is None:
            return await self.cache.incr(stamp_key(tenant), seed())  # first use, or evicted
        try:
            return decode_count(data)
        except CacheDecodeError:
            return None

    async def remember(self, key: str, block: Remembered) -> None:
        """Keep ``block`` for ``ttl_s`` (0: never)."""
        if self.ttl_s > 0:
            await self.cache.set(key, encode(block), self.ttl_s)

    async def forget(self, tenant: str) -> None:
        """Move the tenant's stamp (past any value an evicted one reached)."""
        key = stamp_key(tenant)
        if await self.cache.incr(key) == 1:  # it was absent
            await self.cache.incr(key, seed())


def stamp_key(tenant: str) -> str:
    """The key of ``tenant``'s forget stamp."""
    return f"{tenant_prefix(tenant)}{STAMP}"


def seed() -> int:
    """Where a missing stamp restarts: the wall clock in microseconds."""
    return int(time.time() * MICROS)


def encode(block: Remembered) -> bytes:
    """The stored form of a block."""
    return orjson.dumps([block.block, block.after, block.tokens, list(block.ids), block.stamp])


def decode(data: bytes) -> Remembered | None:
    """The block stored in ``data``, or ``None`` when it is not one of ours."""
    try:
        text, after, tokens, ids, stamp = orjson.loads(data)
        if not (
            isinstance(text, str)
            and text
            and all(type(n) is int and n >= 0 for n in (after, tokens, stamp))
            and isinstance(ids, list)
            and all(isinstance(i, str) for i in ids)
        ):
            raise CacheDecodeError("not a remembered block")
    except (orjson.JSONDecodeError, ValueError, TypeError, CacheDecodeError):
        return None
    return Remembered(text, after, tokens, tuple(ids), stamp)


def canonical(turn: Mapping[str, Any]) -> bytes:
    """A message's bytes for the key: sorted-key JSON without ``cache_control`` anywhere in
    the message or its parts."""
    message = {key: value for key, value in turn.items() if key != BREAKPOINT}
    content = message.get("content")
    if isinstance(content, list):
        message["content"] = [
            {k: v for k, v in part.items() if k != BREAKPOINT}
            if isinstance(part, Mapping)
            else part
            for part in content
        ]
    return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)


def prefix_keys(
    tenant: str, scope: Sequence[str], turns: Sequence[Mapping[str, Any]], indices: Sequence[int]
) -> list[str | None]:
    """The key of a block held by message ``i`` for each ``i`` in ``indices`` (ascending).

    ``None`` from the first message that cannot be encoded as JSON on (nesting deeper than
    orjson writes, an integer past 64 bits): no block is remembered or found there.
    """
    hasher = hashlib.blake2b(orjson.dumps(list(scope)), digest_size=DIGEST_BYTES)
    prefix = f"{tenant_prefix(tenant)}{KIND}:"
    wanted = set(indices)
    last = max(indices, default=-1)
    keys: dict[int, str] = {}
    for index in range(last + 1):
        try:
            hasher.update(canonical(turns[index]))
        except orjson.JSONEncodeError:
            break
        hasher.update(b"\n")  # message bytes are JSON, never containing a raw newline
        if index in wanted:
            keys[index] = prefix + hasher.copy().hexdigest()
    return [keys.get(index) for index in indices]
