"""Tenancy: who is calling, and what memory limits apply to them.

Two auth modes (``auth.mode``):

- ``passthrough``: the client's ``Authorization`` goes upstream unchanged; the tenant id is a
  hash of the bearer key, so each upstream key gets its own isolated memories.
- ``keys``: the client presents a memproxy key; it names a tenant from the configuration, and the
  upstream receives that tenant's upstream key (or ``upstream.api_key``) instead.

Keys are only ever kept as SHA-256 digests here and never logged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from proxy.errors import AuthError
from proxy.settings import MemorySettings, Settings, TenantMemory

ANONYMOUS_TENANT = "anonymous"
TENANT_HASH_CHARS = 16
BEARER = "bearer "


@dataclass(frozen=True, slots=True)
class Tenant:
    """The caller: its id, the ``Authorization`` to send upstream, and its memory limits."""

    id: str
    upstream_authorization: str | None
    memory: MemorySettings


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer_key(authorization: str | None) -> str | None:
    """Return the key of a ``Bearer`` authorization header, or ``None``."""
    if not authorization or authorization[: len(BEARER)].lower() != BEARER:
        return None
    key = authorization[len(BEARER) :].strip()
    return key or None


def merge_memory(defaults: MemorySettings, tenant: TenantMemory) -> MemorySettings:
    """Apply a tenant's overrides to the global memory settings."""
    overrides = {
        name: value
        for name in ("max_tokens", "top_k", "sources", "capture", "packer")
        if (value := getattr(tenant, name)) is not None
    }
    return replace(defaults, **overrides) if overrides else defaults


class TenantResolver:
    """Maps an ``Authorization`` header to a ``Tenant`` according to the auth mode."""

    def __init__(self, settings: Settings) -> None:
        self._mode = settings.auth.mode
        self._defaults = settings.memory
        self._by_digest: dict[str, Tenant] = {}
        fallback = settings.upstream.api_key
        for name, conf in settings.auth.tenants.items():
            upstream_key = conf.upstream_api_key or fallback
            tenant = Tenant(
                id=name,
                upstream_authorization=f"Bearer {upstream_key.value}" if upstream_key else None,
                memory=merge_memory(settings.memory, conf.memory),
            )
            for key in conf.keys:
                self._by_digest[_digest(key.value)] = tenant
        self._passthrough_cache: dict[str, Tenant] = {}

    @property
    def tenants(self) -> Mapping[str, Tenant]:
        """The configured tenants (keys mode) by id."""
        return {t.id: t for t in self._by_digest.values()}

    def resolve(self, authorization: str | None) -> Tenant:
        """Return the caller's tenant; raises ``AuthError`` for a missing or unknown key."""
        key = bearer_key(authorization)
        if self._mode == "keys":
            tenant = self._by_digest.get(_digest(key)) if key else None
            if tenant is None:
                raise AuthError("Missing or unknown memproxy API key.")
            return tenant
        if key is None:
            return Tenant(ANONYMOUS_TENANT, authorization, self._defaults)
        cached = self._passthrough_cache.get(key)
        if cached is None:
            # Bounded: a flood of random keys must not grow memory without limit.
            if len(self._passthrough_cache) > 10_000:
                self._passthrough_cache.clear()
            tenant_id = "t-" + _digest(key)[:TENANT_HASH_CHARS]
            cached = Tenant(tenant_id, authorization, self._defaults)
            self._passthrough_cache[key] = cached
        return cached
