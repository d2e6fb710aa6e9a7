"""The cache: Redis when ``cache.redis_url`` is set, an in-process LRU otherwise; fails open.

Wiring (``proxy/composition.py``, inside the app lifespan)::

    cache = create_cache(s.cache.redis_url, s.cache.local_max_entries, on_error=metrics_hook)
    request_cache = RequestCache(cache, CacheTTLs(...))  # a MemoryCache
    ...
    await request_cache.close()
"""

from proxy.cache.breaker import CircuitBreaker
from proxy.cache.codec import CacheDecodeError
from proxy.cache.factory import create_cache
from proxy.cache.local import LocalCache
from proxy.cache.outcome import CacheOutcome, cache_outcome
from proxy.cache.protocol import (
    KEY_PREFIX,
    Cache,
    ErrorHook,
    MemoryCache,
    NamedEmbedder,
    RetrievalKey,
)
from proxy.cache.redis_cache import RedisCache
from proxy.cache.request_cache import CacheTTLs, LookupHook, RequestCache

__all__ = [
    "KEY_PREFIX",
    "Cache",
    "CacheDecodeError",
    "CacheOutcome",
    "CacheTTLs",
    "CircuitBreaker",
    "ErrorHook",
    "LocalCache",
    "LookupHook",
    "MemoryCache",
    "NamedEmbedder",
    "RedisCache",
    "RequestCache",
    "RetrievalKey",
    "cache_outcome",
    "create_cache",
]
