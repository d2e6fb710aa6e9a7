"""Value encodings: float32 vectors, token counts and search results (``Candidate`` lists).

Decoders validate what they read and raise ``CacheDecodeError`` on anything unexpected; the
typed cache turns that into a miss, so a corrupt or foreign entry is recomputed, never served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from math import isfinite
from typing import Any

import numpy as np
import orjson

from proxy.context.records import Candidate, MemoryRecord
from proxy.errors import CacheError

VECTOR_DTYPE = np.dtype("<f4")  # little-endian float32, whatever the host's byte order
# The record's 11 fields, its expiry and the memory it superseded, then the similarity (a
# superseded memory is never a search hit, so ``superseded_by`` is not carried).
ROW_LENGTH = 15
NUMBER_TYPES = (float, int)


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
    """Serialise search hits as a JSON array of fixed-order arrays (datetimes as RFC 3339).

    orjson writes ``created_at`` itself (5x faster than ``isoformat``, same text). Metadata is
    JSON, as the memories API accepts it. Raises ``CacheDecodeError`` for values JSON cannot
    carry exactly (NaN, ints over 64 bits, non-string keys, unknown types), so the caller skips
    caching them rather than caching something else.
    """
    rows = []
    for candidate in candidates:
        r = candidate.record
        if not (
            isfinite(r.confidence) and isfinite(r.usefulness) and isfinite(candidate.similarity)
        ):
            raise CacheDecodeError("non-finite score cannot be cached")
        rows.append(
            (
                r.id,
                r.tenant,
                r.user,
                r.source,
                r.content,
                r.created_at,
                r.confidence,
                r.usefulness,
                r.retrieval_count,
                r.tokens,
                r.metadata,
                r.expires_at,
                r.supersedes,
                r.context,
                candidate.similarity,
            )
        )
    try:
        return orjson.dumps(rows, default=_plain_mapping)
    except TypeError as exc:  # orjson.JSONEncodeError derives from TypeError
        raise CacheDecodeError(f"search result is not JSON-serialisable: {exc}") from exc


def _plain_mapping(value: object) -> dict[Any, Any]:
    # Records may carry read-only Mappings (e.g. MappingProxyType); JSON-wise they are objects.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


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
    # orjson yields exactly str/int/float/bool/list/dict, so ``type(x) is`` checks suffice (and
    # exclude bool from the numbers); they run once per cached hit, hence the plain style.
    if type(row) is not list or len(row) != ROW_LENGTH:
        raise CacheDecodeError("candidate row has the wrong shape")
    (id_, rec_tenant, user, source, content, created, conf, use, count, tokens, meta) = row[:11]
    expires, supersedes, context, sim = row[11:]
    if rec_tenant != tenant:
        raise CacheDecodeError("cached record belongs to another tenant")
    if not (type(id_) is str and type(user) is str and type(source) is str):
        raise CacheDecodeError("candidate text field is not a string")
    if type(content) is not str or type(created) is not str:
        raise CacheDecodeError("candidate text field is not a string")
    if type(conf) not in NUMBER_TYPES or type(use) not in NUMBER_TYPES:
        raise CacheDecodeError("candidate score has the wrong type")
    if type(sim) not in NUMBER_TYPES or type(count) is not int:
        raise CacheDecodeError("candidate numeric field has the wrong type")
    if type(tokens) is not dict or type(meta) is not dict:
        raise CacheDecodeError("candidate tokens or metadata is not an object")
    for value in tokens.values():
        if type(value) is not int:
            raise CacheDecodeError("candidate token count is not an integer")
    created_at = datetime.fromisoformat(created)
    if created_at.tzinfo is None:
        raise CacheDecodeError("created_at lost its timezone")
    if not (expires is None or type(expires) is str):
        raise CacheDecodeError("candidate expires_at is not a string")
    if not (supersedes is None or type(supersedes) is str):
        raise CacheDecodeError("candidate supersedes is not a string")
    if type(context) is not str:
        raise CacheDecodeError("candidate context is not a string")
    expires_at = datetime.fromisoformat(expires) if expires is not None else None
    if expires_at is not None and expires_at.tzinfo is None:
        raise CacheDecodeError("expires_at lost its timezone")
    record = MemoryRecord(
        id_,
        rec_tenant,
        user,
        source,
        content,
        created_at,
        conf,
        use,
        count,
        tokens,
        meta,
        expires_at=expires_at,
        supersedes=supersedes,
        context=context,
    )
    return Candidate(record, sim)
