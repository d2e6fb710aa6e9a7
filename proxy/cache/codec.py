"""Value encodings: float32 vectors, token counts and search results (``Candidate`` lists).

Decoders validate what they read and raise ``CacheDecodeError`` on anything unexpected; the
typed cache turns that into a miss, so a corrupt or foreign entry is recomputed, never served.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import orjson

from proxy.context.records import Candidate, MemoryRecord
from proxy.errors import CacheError

VECTOR_DTYPE = np.dtype("<f4")  # little-endian float32, whatever the host's byte order
ROW_LENGTH = 12  # the record's 11 fields, then the similarity


class CacheDecodeError(CacheError):
    """A cached value could not be decoded; the entry is treated as a miss."""


def encode_vector(vector: np.ndarray) -> bytes:
    """Return the raw little-endian float32 bytes of a 1-D vector."""
    return np.ascontiguousarray(vector, dtype=VECTOR_DTYPE).reshape(-1).tobytes()


def decode_vector(data: bytes, dimensions: int) -> np.ndarray:
    """Return the float32 vector stored in ``data``, checking its length against ``dimensions``."""
    if len(data) != dimensions * VECTOR_DTYPE.itemsize:
        raise CacheDecodeError(f"vector of {len(data)} bytes, expected {dimensions} float32")
    # A private copy: frombuffer over bytes is read-only and would pin the cache's buffer.
    return np.frombuffer(data, dtype=VECTOR_DTYPE).astype(np.float32)


def encode_count(count: int) -> bytes:
    """Return a token count as ASCII digits (readable with redis-cli)."""
    return str(count).encode()


def decode_count(data: bytes) -> int:
    """Return the token count in ``data``."""
    try:
        count = int(data)
    except ValueError as exc:
        raise CacheDecodeError("token count is not an integer") from exc
    if count < 0:
        raise CacheDecodeError("negative token count")
    return count


def encode_candidates(candidates: Sequence[Candidate]) -> bytes:
    """Serialise search hits as a JSON array of fixed-order arrays (datetimes as ISO 8601).

    Raises ``CacheDecodeError`` for values JSON cannot carry exactly (NaN, huge ints, keys that
    are not strings), so the caller skips caching them rather than caching something else.
    """
    rows = []
    for candidate in candidates:
        r = candidate.record
        floats = (r.confidence, r.usefulness, candidate.similarity)
        if not all(math.isfinite(x) for x in floats):
            raise CacheDecodeError("non-finite score cannot be cached")
        rows.append(
            [
                r.id,
                r.tenant,
                r.user,
                r.source,
                r.content,
                r.created_at.isoformat(),
                r.confidence,
                r.usefulness,
                r.retrieval_count,
                dict(r.tokens),
                dict(r.metadata),
                candidate.similarity,
            ]
        )
    try:
        return orjson.dumps(rows)
    except TypeError as exc:  # orjson.JSONEncodeError derives from TypeError
        raise CacheDecodeError(f"search result is not JSON-serialisable: {exc}") from exc


def decode_candidates(data: bytes, tenant: str) -> list[Candidate]:
    """Return the hits in ``data``; every record must belong to ``tenant``."""
    try:
        rows = orjson.loads(data)
        if not isinstance(rows, list):
            raise CacheDecodeError("search result is not a list")
        return [_decode_row(row, tenant) for row in rows]
    except CacheDecodeError:
        raise
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise CacheDecodeError(f"corrupt search result: {exc}") from exc


def _decode_row(row: Any, tenant: str) -> Candidate:
    if not isinstance(row, list) or len(row) != ROW_LENGTH:
        raise CacheDecodeError("candidate row has the wrong shape")
    (id_, rec_tenant, user, source, content, created, conf, use, count, tokens, meta, sim) = row
    if rec_tenant != tenant:
        raise CacheDecodeError("cached record belongs to another tenant")
    strings = (id_, user, source, content, created)
    if not all(isinstance(s, str) for s in strings):
        raise CacheDecodeError("candidate text field is not a string")
    if not all(_is_number(x) for x in (conf, use, sim)) or not _is_int(count):
        raise CacheDecodeError("candidate numeric field has the wrong type")
    if not isinstance(tokens, dict) or not all(_is_int(v) for v in tokens.values()):
        raise CacheDecodeError("candidate token counts have the wrong type")
    if not isinstance(meta, dict):
        raise CacheDecodeError("candidate metadata is not an object")
    created_at = datetime.fromisoformat(created)
    if created_at.tzinfo is None:
        raise CacheDecodeError("created_at lost its timezone")
    record = MemoryRecord(
        id=id_,
        tenant=rec_tenant,
        user=user,
        source=source,
        content=content,
        created_at=created_at,
        confidence=float(conf),
        usefulness=float(use),
        retrieval_count=count,
        tokens=tokens,
        metadata=meta,
    )
    return Candidate(record=record, similarity=float(sim))


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
