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
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from proxy.cache.codec import CacheDecodeError
from proxy.cache.keys import DIGEST_BYTES, tenant_prefix
from proxy.cache.protocol import Cache
from proxy.context.position import BREAKPOINT

KIND = "blk"


@dataclass(frozen=True, slots=True)
class Remembered:
    """One turn's block: its text, its slot's ``after``, its exact tokens, the memories shown."""

    block: str
    after: int
    tokens: int
    ids: tuple[str, ...]


class TurnBlocks(Protocol):
    """Where blocks of earlier turns are kept; like ``Cache`` it never raises for the backend."""

    async def recall(self, keys: Sequence[str]) -> list[Remembered | None]:
        """The block remembered under each key, ``None`` where there is none (one round trip)."""
        ...

    async def remember(self, key: str, block: Remembered) -> None:
        """Keep ``block`` under ``key``."""
        ...


class CachedTurnBlocks:
    """``TurnBlocks`` over a byte ``Cache`` (Redis or in-process), entries living ``ttl_s``."""

    def __init__(self, cache: Cache, ttl_s: float) -> None:
        self.cache = cache
        self.ttl_s = ttl_s

    async def recall(self, keys: Sequence[str]) -> list[Remembered | None]:
        """The blocks under ``keys``; a corrupt entry is a miss."""
        if self.ttl_s <= 0 or not keys:
            return [None] * len(keys)
        found = await self.cache.get_many(keys)
        return [decode(data) if data is not None else None for data in found]

    async def remember(self, key: str, block: Remembered) -> None:
        """Keep ``block`` for ``ttl_s`` (0: never)."""
        if self.ttl_s > 0:
            await self.cache.set(key, encode(block), self.ttl_s)


def encode(block: Remembered) -> bytes:
    """The stored form of a block."""
    return orjson.dumps([block.block, block.after, block.tokens, list(block.ids)])


def decode(data: bytes) -> Remembered | None:
    """The block stored in ``data``, or ``None`` when it is not one of ours."""
    try:
        text, after, tokens, ids = orjson.loads(data)
        if not (
            isinstance(text, str)
            and text
            and all(type(n) is int and n >= 0 for n in (after, tokens))
            and isinstance(ids, list)
            and all(isinstance(i, str) for i in ids)
        ):
            raise CacheDecodeError("not a remembered block")
    except (orjson.JSONDecodeError, ValueError, TypeError, CacheDecodeError):
        return None
    return Remembered(text, after, tokens, tuple(ids))


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
