"""Tenancy: who is calling, how the upstream is authenticated, and what memory limits apply.

A caller's credential comes from whichever header its client puts it in (adr/0086):
``Authorization: Bearer K``, ``x-api-key: K`` (Anthropic's SDK) or ``api-key: K`` (Azure's) all
carry the key K and name the same tenant. Any other ``Authorization`` (``Basic ...``,
``Token ...``, a bare value) is a credential too, of its own kind: it names its own tenant and
never matches a key. With several, a bearer key wins, then ``x-api-key``, ``api-key``, and
another ``Authorization`` last.

Two auth modes (``auth.mode``):

- ``passthrough``: the client's credential headers go upstream unchanged; the tenant id is a
  hash of the credential, so each upstream key gets its own isolated memories. A caller without
  any credential has no tenant: its chat requests pass through with memory off, and the
  memories API refuses it, unless the operator enables the shared ``anonymous`` tenant
  (``auth.anonymous``).
- ``keys``: the client presents a memproxy key (in any of the three headers); it names a
  tenant from the configuration. None of the three headers goes upstream: the upstream gets
  that tenant's upstream key (or ``upstream.api_key``) instead, in the form of its API
  (``bearer_auth`` for OpenAI's, ``x_api_key_auth`` for Anthropic's).

Keys are only ever kept as SHA-256 digests here and never logged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from proxy.errors import AuthError
from proxy.settings import MemorySettings, Settings, replace
from proxy.upstream import header_bytes

ANONYMOUS_TENANT = "anonymous"
KEYLESS_TENANT = ""  # no tenant at all: every store refuses an empty tenant id
TENANT_HASH_CHARS = 16
PASSTHROUGH_CACHE_ENTRIES = 10_000
AUTHORIZATION = b"authorization"
X_API_KEY = b"x-api-key"
API_KEY = b"api-key"
# Every request header that may carry the caller's credential (ASGI names are lower-case).
CREDENTIAL_HEADERS = frozenset({AUTHORIZATION, X_API_KEY, API_KEY})
# When the operator's key goes upstream, nothing of the client's may choose the organization or
# project that key is billed to.
BILLING_HEADERS = frozenset({b"openai-organization", b"openai-project"})
BEARER = "bearer"
UNKNOWN_KEY = (
    "Missing or unknown memproxy API key. Send it as 'Authorization: Bearer KEY', "
    "'x-api-key: KEY' or 'api-key: KEY'."
)
NO_KEY = (
    "This request carries no API key, so it has no tenant and no memories. Send your key as "
    "'Authorization: Bearer KEY', 'x-api-key: KEY' or 'api-key: KEY', or let keyless callers "
    "share one tenant: set auth.anonymous: true (MEMPROXY_AUTH_ANONYMOUS=true)."
)

RawHeaders = Iterable[tuple[bytes, bytes]]


class Credential(NamedTuple):
    """What the caller presented: an API key (``scheme`` is ``None``), or another
    ``Authorization`` scheme (lower-cased; ``""`` for a value with no scheme) and its value.

    A tuple, not a dataclass: one is built per request, and a frozen dataclass costs ~0.5 us.
    """

    value: str
    scheme: str | None = None

    @property
    def identity(self) -> str:
        """The string a tenant id is hashed from: the key itself, or scheme and value.

        The NUL separator cannot occur in a header value, so no key hashes like a credential
        of another scheme (a key must not collide with ``Basic <same text>``).
        """
        return self.value if self.scheme is None else f"{self.scheme}\x00{self.value}"


@dataclass(frozen=True, slots=True)
class Tenant:
    """The caller: its id, its memory limits, and how its requests authenticate upstream.

    ``forwards_credentials``: the client's credential headers go upstream unchanged
    (passthrough). Otherwise (keys mode) they are withheld and ``upstream_key`` (OpenAI's
    API) or ``anthropic_key`` (Anthropic's), when set, is sent instead, in the form that API
    expects (``bearer_auth``, ``x_api_key_auth``).
    """

    id: str
    memory: MemorySettings
    forwards_credentials: bool = True
    upstream_key: str | None = None
    anthropic_key: str | None = None

    @property
    def keyless(self) -> bool:
        """A caller without a credential (and no anonymous tenant): it has no memories."""
        return self.id == KEYLESS_TENANT


@dataclass(frozen=True, slots=True)
class UpstreamAuth:
    """How one request authenticates upstream: client headers withheld, headers added."""

    withhold: frozenset[bytes] = frozenset()
    add: tuple[tuple[bytes, bytes], ...] = ()


CLIENT_CREDENTIALS = UpstreamAuth()


def bearer_auth(tenant: Tenant) -> UpstreamAuth:
    """OpenAI's form: the tenant's upstream key as ``Authorization: Bearer``."""
    if tenant.forwards_credentials:
        return CLIENT_CREDENTIALS
    key = tenant.upstream_key
    add = ((AUTHORIZATION, header_bytes(f"Bearer {key}")),) if key else ()
    return UpstreamAuth(CREDENTIAL_HEADERS | BILLING_HEADERS, add)


def x_api_key_auth(tenant: Tenant) -> UpstreamAuth:
    """Anthropic's form: the tenant's Anthropic key as ``x-api-key``.

    ``anthropic-version`` and ``anthropic-beta`` are the client's and go upstream as sent.
    """
    if tenant.forwards_credentials:
        return CLIENT_CREDENTIALS
    key = tenant.anthropic_key
    add = ((X_API_KEY, header_bytes(key)),) if key else ()
    return UpstreamAuth(CREDENTIAL_HEADERS | BILLING_HEADERS, add)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def tenant_id(credential: Credential) -> str:
    """The passthrough tenant id of a credential: ``t-`` + 16 hex digits of its hash."""
    return "t-" + _digest(credential.identity)[:TENANT_HASH_CHARS]


def authorization_credential(value: str) -> Credential | None:
    """The credential of an ``Authorization`` value; ``None`` when it carries none."""
    text = value.strip()
    if not text:
        return None
    scheme, _, rest = text.partition(" ")
    if scheme.lower() == BEARER:
        key = rest.strip()
        return Credential(key) if key else None
    if not rest.strip():
        return Credential(text, "")  # a bare value: some clients send the key without a scheme
    return Credential(rest.strip(), scheme.lower())


def client_credential(headers: RawHeaders) -> Credential | None:
    """The caller's credential from its request headers (precedence: module docstring).

    The first of a repeated header counts. One pass, returning at a Bearer key: the OpenAI
    SDKs' case costs no more than finding the header.
    """
    other: Credential | None = None
    seen_authorization = False
    x_api_key: str | None = None
    api_key: str | None = None
    for name, value in headers:
        if name not in CREDENTIAL_HEADERS:
            continue
        if name == AUTHORIZATION:
            if not seen_authorization:
                seen_authorization = True
                other = authorization_credential(value.decode("latin-1"))
                if other is not None and other.scheme is None:
                    return other
        elif name == X_API_KEY:
            if x_api_key is None:
                x_api_key = value.decode("latin-1").strip()
        elif api_key is None:
            api_key = value.decode("latin-1").strip()
    if x_api_key:
        return Credential(x_api_key)
    if api_key:
        return Credential(api_key)
    return other


class TenantResolver:
    """Maps a request's credential to a ``Tenant`` according to the auth mode."""

    def __init__(self, settings: Settings) -> None:
        self._mode = settings.auth.mode
        self._defaults = settings.memory
        self._by_digest: dict[str, Tenant] = {}
        fallback = settings.upstream.api_key
        anthropic_fallback = settings.upstream.anthropic.api_key
        for name, conf in settings.auth.tenants.items():
            upstream_key = conf.upstream_api_key or fallback
            anthropic_key = conf.anthropic_api_key or anthropic_fallback
            tenant = Tenant(
                id=name,
                memory=settings.memory.for_tenant(conf.memory),
                forwards_credentials=False,
                upstream_key=upstream_key.value if upstream_key else None,
                anthropic_key=anthropic_key.value if anthropic_key else None,
            )
            for key in conf.keys:
                self._by_digest[_digest(key.value)] = tenant
        # Memory off for this caller: the pipeline forwards its requests untouched.
        self._keyless = (
            Tenant(ANONYMOUS_TENANT, self._defaults)
            if settings.auth.anonymous
            else Tenant(KEYLESS_TENANT, replace(self._defaults, enabled=False))
        )
        self._passthrough_cache: dict[str, Tenant] = {}

    @property
    def tenants(self) -> Mapping[str, Tenant]:
        """The configured tenants (keys mode) by id."""
        return {t.id: t for t in self._by_digest.values()}

    def resolve(self, headers: RawHeaders) -> Tenant:
        """The tenant of a request's headers; raises ``AuthError`` for a missing or unknown
        key in keys mode."""
        return self.for_credential(client_credential(headers))

    def resolve_owner(self, headers: RawHeaders) -> Tenant:
        """Like ``resolve``, for calls on stored memories: a keyless caller is refused (401)."""
        tenant = self.resolve(headers)
        if tenant.keyless:
            raise AuthError(NO_KEY, code="missing_api_key")
        return tenant

    def for_key(self, key: str) -> Tenant:
        """The tenant of API key ``key``, as a request carrying it in any key header gets."""
        return self.for_credential(Credential(key))

    def for_credential(self, credential: Credential | None) -> Tenant:
        """The tenant of a credential (``None``: the caller sent none)."""
        if self._mode == "keys":
            tenant = None
            if credential is not None and credential.scheme is None:
                tenant = self._by_digest.get(_digest(credential.value))
            if tenant is None:
                raise AuthError(UNKNOWN_KEY)
            return tenant
        if credential is None:
            return self._keyless
        identity = credential.identity
        cached = self._passthrough_cache.get(identity)
        if cached is None:
            # Bounded: a flood of random keys must not grow memory without limit.
            if len(self._passthrough_cache) >= PASSTHROUGH_CACHE_ENTRIES:
                self._passthrough_cache.clear()
            cached = Tenant(tenant_id(credential), self._defaults)
            self._passthrough_cache[identity] = cached
        return cached
