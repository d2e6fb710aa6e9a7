"""Cache key layout. Every key is ``mp:v1:<tenant>:<kind>:...`` (see ADR 0030).

The tenant is percent-encoded so that no tenant name can forge another tenant's key (``:`` in a
name becomes ``%3A``). Free text (queries, message contents) only enters a key as a digest.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from urllib.parse import quote

import orjson

from proxy.cache.protocol import KEY_PREFIX

DIGEST_BYTES = 16  # 128-bit blake2b: collisions are not a practical concern at cache scale
# Names encoded for keys (tenants, embedder models, encodings): a few per deployment, met on
# every request. ``quote`` walks a name with a character to escape byte by byte in Python
# (~8 us for a model name like ``minishlab/potion-base-8M``), 4-6 times a request.
PARTS_KEPT = 4_096


def digest(text: str) -> str:
    """Return the hex blake2b-128 digest of ``text`` (used for content and query hashes)."""
    return hashlib.blake2b(
        text.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES
    ).hexdigest()


@functools.lru_cache(maxsize=PARTS_KEPT)
def part(value: str) -> str:
    """Encode one name so that it cannot contain the ``:`` separator."""
    return quote(value, safe="")


def tenant_prefix(tenant: str) -> str:
    """Return the prefix of every key of ``tenant``."""
    return f"{KEY_PREFIX}{part(tenant)}:"


def embedding_key(tenant: str, embedder: str, dimensions: int, text: str) -> str:
    """Key of the query embedding of ``text`` by one embedder model at one dimensionality."""
    return f"{tenant_prefix(tenant)}emb:{part(embedder)}:{dimensions}:{digest(text)}"


def token_count_key(tenant: str, encoding: str, content_digest: str) -> str:
    """Key of the token count of a content (given by its digest) in one encoding."""
    return f"{tenant_prefix(tenant)}tok:{part(encoding)}:{content_digest}"


def generation_key(tenant: str) -> str:
    """Key of the tenant's generation counter, which every write to the tenant bumps."""
    return f"{tenant_prefix(tenant)}gen"


def retrieval_key(
    tenant: str,
    generation: int,
    user: str,
    query: str,
    top_k: int,
    sources: Sequence[str] | None,
    variant: str,
) -> str:
    """Key of one search result: everything that can change the result is in the digest."""
    # Order and repeats of sources do not change a search, so they must not change the key.
    source_set = sorted(set(sources)) if sources is not None else None
    options = orjson.dumps([user, query, top_k, source_set, variant]).decode()
    return f"{tenant_prefix(tenant)}ret:{generation}:{digest(options)}"
