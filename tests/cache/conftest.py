"""Fixtures of the cache tests. The shared real-Redis helper is ``tests/redis_server.py``
(run pytest as ``python -m pytest``, like every suite here).
"""

from __future__ import annotations

from tests.redis_server import redis_server, shared_redis_server

__all__ = ["redis_server", "shared_redis_server"]
