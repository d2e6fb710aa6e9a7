"""Settings: the only module that reads configuration files and the environment.

Precedence, lowest to highest: built-in defaults < YAML file (``MEMPROXY_CONFIG`` or
``--config``) < ``MEMPROXY_*`` environment variables < command-line flags. The result is one
frozen ``Settings`` tree of pydantic models (adr/0090), validated once at start: an unknown key
or variable, a wrong type or a broken rule between fields raises ``ConfigError`` naming the
dotted key and where its value came from (the file, the variable, the command line).

YAML values must have their real type: ``"yes"`` is a string, not a bool, and a list is written
as a list. Environment values are strings, parsed by the setting's type (``true/false/1/0/yes/
no/on/off`` for a bool). Secrets are never written in the file: they are references
(``env:OPENAI_API_KEY``) resolved here into ``Secret`` values whose ``repr`` shows the
reference, never the value.
"""

from __future__ import annotations

import difflib
import os
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, Self, TypeVar, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WrapSerializer,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError

from proxy.defaults import (
    ANTHROPIC_URL,
    BLOCKS_TTL_S,
    CACHE_LOCAL_MAX_ENTRIES,
    CACHE_TIMEOUT_MS,
    CAPTURES,
    COLLECTION,
    COUNT_FLUSH_S,
    EMBEDDING_TTL_S,
    HYBRID,
    LEXICAL_CANDIDATES,
    LOG_FOLD_BYTES,
    MAX_CONTENT_CHARS,
    MEMORY_MAX_TOKENS,
    MEMORY_POSITION,
    MEMORY_TOP_K,
    MIB,
    NEIGHBOUR_CANDIDATES,
    RECORD_CACHE_ENTRIES,
    RETRIEVAL_TTL_S,
    SEARCH_THREADS,
    SEARCH_THREADS_MAX,
    SOURCES,
    TOKEN_PRICE,
    TOKENS_TTL_S,
    UPSTREAM_URL,
    BudgetRule,
    Capture,
    Position,
    Source,
)
from proxy.errors import ConfigError

__all__ = [
    "ALL_SOURCES",
    "MIB",
    "AnthropicSettings",
    "AuthSettings",
    "CacheSettings",
    "EmbedderSettings",
    "HttpServerSettings",
    "LimitsSettings",
    "MemorySettings",
    "PoolSettings",
    "Secret",
    "ServerSettings",
    "Settings",
    "StageTimeouts",
    "StoreSettings",
    "TenantMemory",
    "TenantSettings",
    "TimeoutSettings",
    "UpstreamSettings",
    "UpstreamTlsSettings",
    "load_settings",
    "replace",
]

ALL_SOURCES = SOURCES
ENV_PREFIX = "env:"
VARIABLE_PREFIX = "MEMPROXY_"
CONFIG_VARIABLE = "MEMPROXY_CONFIG"
COMMAND_LINE = "command line"

# MEMPROXY_* variable -> dotted settings key. MEMPROXY_CONFIG names the file.
ENV_KEYS: Mapping[str, str] = {
    "MEMPROXY_HOST": "server.host",
    "MEMPROXY_PORT": "server.port",
    "MEMPROXY_WORKERS": "server.workers",
    "MEMPROXY_LOG_FORMAT": "server.log_format",
    "MEMPROXY_LOG_LEVEL": "server.log_level",
    "MEMPROXY_METRICS_DIR": "server.metrics_dir",
    "MEMPROXY_ACCESS_LOG": "server.access_log",
    "MEMPROXY_UPSTREAM_URL": "upstream.url",
    "MEMPROXY_UPSTREAM_API_KEY": "upstream.api_key",
    "MEMPROXY_ANTHROPIC_URL": "upstream.anthropic.url",
    "MEMPROXY_ANTHROPIC_API_KEY": "upstream.anthropic.api_key",
    "MEMPROXY_AUTH_MODE": "auth.mode",
    "MEMPROXY_AUTH_ANONYMOUS": "auth.anonymous",
    "MEMPROXY_MAX_BODY_BYTES": "limits.max_body_bytes",
    "MEMPROXY_MEMORY_ENABLED": "memory.enabled",
    "MEMPROXY_DATA_DIR": "store.data_dir",
    "MEMPROXY_QDRANT_URL": "store.qdrant_url",
    "MEMPROXY_QDRANT_API_KEY": "store.qdrant_api_key",
    "MEMPROXY_EMBEDDER": "embedder.kind",
    "MEMPROXY_REDIS_URL": "cache.redis_url",
}
# Variables whose value is the secret itself, not an ``env:`` reference.
ENV_SECRET_VALUES = frozenset(
    {"MEMPROXY_UPSTREAM_API_KEY", "MEMPROXY_ANTHROPIC_API_KEY", "MEMPROXY_QDRANT_API_KEY"}
)
KNOWN_VARIABLES = frozenset({CONFIG_VARIABLE, *ENV_KEYS})


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret value with the reference it came from; ``repr`` never shows the value."""

    ref: str
    value: str = field(repr=False)

    def __str__(self) -> str:
        return self.ref


def _secret(value: object, info: ValidationInfo) -> Secret:
    """An ``env:VAR`` reference resolved from the environment being loaded (``os.environ`` when
    a model is built directly)."""
    if isinstance(value, Secret):
        return value
    if not isinstance(value, str) or not value.startswith(ENV_PREFIX):
        raise PydanticCustomError(
            "secret_literal", "must reference a secret as 'env:VARIABLE', never hold it"
        )
    var = value[len(ENV_PREFIX) :]
    environ = info.context["environ"] if info.context else os.environ
    secret = environ.get(var)
    if not secret:
        raise PydanticCustomError(
            "secret_unset", "references ${var}, which is not set", {"var": var}
        )
    return Secret(ref=value, value=secret)


# Scalars keep their YAML type: a quoted "8080" is not a port, "yes" is not a bool. (Strict
# floats still take integers: `connect: 2` is 2.0.)
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]
Positive = Annotated[int, Strict(), Field(gt=0)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
NonNegative = Annotated[int, Strict(), Field(ge=0)]
AtLeastOne = Annotated[int, Strict(), Field(ge=1)]
SecretRef = Annotated[Secret, PlainValidator(_secret), PlainSerializer(str)]
Packer = Literal["optimal", "greedy"]


def _rule(key: str, message: str) -> PydanticCustomError:
    """A broken rule between fields, reported at ``key`` (dotted, relative to the model)."""
    return PydanticCustomError("rule", message, {"key": key})


class _Section(BaseModel):
    """A frozen, closed settings section: unknown keys are errors and assignment raises
    ``AttributeError`` as on a frozen dataclass. Building one directly validates it too, and
    an invalid one is a ``ConfigError``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc, _Origins(type(self).__name__)) from None

    # Like pydantic's own RootModel: validation (model_validate, nested sections) must not call
    # this __init__, or errors would lose where their values came from.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """A section left empty (``memory:`` with every line commented out) is YAML's null:
        it means the section's defaults."""
        if not isinstance(data, dict):
            return data
        return {
            name: {} if value is None and _holds_section(cls, name) else value
            for name, value in data.items()
        }

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


_S = TypeVar("_S", bound=_Section)


def replace(section: _S, /, **changes: Any) -> _S:
    """A copy of a settings section with ``changes``, validated like a loaded one (these
    models' counterpart of ``dataclasses.replace``)."""
    return type(section)(**{**dict(section), **changes})


class HttpServerSettings(_Section):
    """Limits of the HTTP server on request heads, idle connections and refused bodies."""

    # Request line plus header lines; a longer head answers 431 (and is never buffered whole).
    max_head_bytes: Positive = 64 * 1024
    max_headers: Positive = 100  # header fields per request; more answer 431
    # From the connection (or the first byte of a later request) to the end of its head.
    head_timeout_s: PositiveFloat = 10.0
    # Longest wait for the next bytes of a request body still arriving (not a total), like
    # nginx's client_body_timeout: a stalled upload answers 408 and is closed.
    body_timeout_s: PositiveFloat = 60.0
    # An idle keep-alive connection is closed after this; longer than the 60 s idle timeout
    # of common load balancers, so they close first and never reuse a connection being closed.
    keepalive_s: PositiveFloat = 75.0
    # After an answer sent before the whole body arrived (413), the rest of the body is read
    # and dropped, up to this many bytes and seconds, so the client reads the answer instead
    # of a connection reset.
    drain_bytes: Positive = 64 * MIB
    drain_s: PositiveFloat = 10.0


class ServerSettings(_Section):
    """Where and how the HTTP server runs."""

    host: str = "127.0.0.1"
    port: Annotated[int, Strict(), Field(ge=1, le=65535)] = 8080
    workers: AtLeastOne = 1
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # One line per request at info level; costs ~30 us of CPU per request (bench/overhead.py).
    access_log: Bool = True
    # Seconds in-flight requests and streams get to finish on shutdown.
    graceful_timeout_s: Float = 30.0
    # Set by the CLI when several workers share Prometheus metrics (multiprocess mode).
    metrics_dir: str | None = None
    # The checks /readyz needs to answer 200 (adr/0102); any other failing check only makes
    # its status "degraded". Add store, embedder or cache to take a replica out of its
    # balancer while that memory backend is down (a single node that must not serve without
    # memory); with a shared Qdrant or Redis that drains every replica at once.
    ready_requires: tuple[Literal["upstream", "store", "embedder", "cache"], ...] = ("upstream",)
    http: HttpServerSettings = Field(default_factory=HttpServerSettings)


class TimeoutSettings(_Section):
    """Upstream timeouts in seconds; each one ends the request with 504 or a stream error."""

    connect: Float = 5.0
    first_byte: Float = 120.0  # request sent -> response headers
    idle: Float = 120.0  # between two chunks of the body
    total: Float = 900.0  # whole exchange, streaming included


class PoolSettings(_Section):
    """Connection pool towards the upstream."""

    max_connections: Int = 512
    keepalive_s: Float = 30.0


class UpstreamTlsSettings(_Section):
    """TLS towards the upstream: extra trusted CAs and a client certificate (paths to PEM files)."""

    ca_file: str | None = None  # trusted in addition to the system and certifi CAs
    cert_file: str | None = None  # client certificate chain, for upstreams that require one
    key_file: str | None = None  # its private key; None: the key is in cert_file


def _base_url(url: str) -> str:
    """An OpenAI-compatible base URL: http(s), and a path ending in ``/v1``.

    Without ``/v1`` the start would succeed and every call then 404 on real providers. A path
    prefix (``/openai/v1``) and a query (``?api-version=...``) are fine.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PydanticCustomError("url_scheme", "must start with http:// or https://")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        # Imported here: proxy.upstream imports this module. The hint is redacted like every
        # printed upstream URL (user information and query values).
        from proxy.upstream import redact_url

        hint = redact_url(urlunsplit((parts.scheme, parts.netloc, f"{path}/v1", parts.query, "")))
        raise PydanticCustomError(
            "url_v1",
            "must be an OpenAI-compatible base URL, its path ending in /v1: did you mean {hint}?",
            {"hint": hint},
        )
    return url


def _anthropic_url(url: str) -> str:
    """Anthropic's base URL as its SDK takes it: http(s), without ``/v1`` (memproxy forwards
    the client's ``/v1/messages`` below it, so ``.../v1`` would send ``/v1/v1/messages``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PydanticCustomError("url_scheme", "must start with http:// or https://")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        from proxy.upstream import redact_url  # see _base_url

        hint = redact_url(urlunsplit((parts.scheme, parts.netloc, path[:-3], parts.query, "")))
        raise PydanticCustomError(
            "url_no_v1",
            "is Anthropic's base URL as ANTHROPIC_BASE_URL takes it, without /v1: "
            "did you mean {hint}?",
            {"hint": hint},
        )
    return url


class AnthropicSettings(_Section):
    """Anthropic's Messages API, where ``POST /v1/messages`` goes (adr/0108).

    It shares the timeouts, pool limits, TLS files and client of the ``upstream`` section.
    """

    url: Annotated[str, AfterValidator(_anthropic_url)] = ANTHROPIC_URL
    # The operator's Anthropic key, sent as x-api-key in keys mode (tenants without their own).
    api_key: SecretRef | None = None


class UpstreamSettings(_Section):
    """The OpenAI-compatible provider behind the proxy."""

    url: Annotated[str, AfterValidator(_base_url)] = UPSTREAM_URL
    # Used in keys mode (tenants without their own key) and by the openai embedder.
    api_key: SecretRef | None = None
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    tls: UpstreamTlsSettings = Field(default_factory=UpstreamTlsSettings)
    # The HTTP client library behind proxy/transport.py (adr/0085).
    client: Literal["aiohttp"] = "aiohttp"
    anthropic: AnthropicSettings = Field(default_factory=AnthropicSettings)


class LimitsSettings(_Section):
    """Request limits."""

    max_body_bytes: Positive = 16 * MIB


class StageTimeouts(_Section):
    """Per-stage budgets of the memory pipeline, in milliseconds."""

    embed_ms: Float = 30.0
    search_ms: Float = 30.0
    cache_ms: Float = CACHE_TIMEOUT_MS


def _capture_at_most(capture: Capture | None, max_capture: Capture | None) -> None:
    if capture and max_capture and CAPTURES.index(capture) > CAPTURES.index(max_capture):
        raise _rule("capture", f"is {capture!r}, above max_capture {max_capture!r}")


class ExtractionSettings(_Section):
    """Fact capture (``X-Memory-Capture: facts``, adr/0112): the extraction call and its queue."""

    model: str | None = None  # None: the model of the chat request that is being captured
    max_tokens: Positive = 1024  # cap on the extraction answer
    memories_shown: NonNegative = 8  # the user's closest memories the model reconciles against
    max_turn_chars: Positive = 4000  # each text of the turn is cut to this before the call
    timeout_s: PositiveFloat = 30.0  # one attempt, head to last byte
    max_attempts: AtLeastOne = 3  # tries on 429, 5xx and transport failures
    backoff_s: Annotated[float, Strict(), Field(ge=0)] = 0.5  # doubled each retry
    max_backoff_s: Annotated[float, Strict(), Field(ge=0)] = 8.0  # also caps Retry-After
    queue_size: Positive = 1000  # turns waiting; a full queue drops the turn (and counts it)
    workers: Positive = 4  # extraction calls in flight, all tenants together
    tenant_concurrency: Positive = 2  # calls in flight per tenant
    tenant_per_minute: PositiveFloat = 60.0  # turns a tenant may queue per minute (burst: 10 s)


class TenantMemory(_Section):
    """Per-tenant caps over ``MemorySettings``; ``None`` keeps the global value."""

    max_tokens: NonNegative | None = None
    top_k: AtLeastOne | None = None
    sources: tuple[Source, ...] | None = None
    # The tenant's capture mode, and its ceiling too unless max_capture is set.
    capture: Capture | None = None
    max_capture: Capture | None = None
    packer: Packer | None = None
    position: Position | None = None
    budget_rule: BudgetRule | None = None

    @model_validator(mode="after")
    def _capture_within_ceiling(self) -> Self:
        _capture_at_most(self.capture, self.max_capture)
        return self


class MemorySettings(_Section):
    """Memory defaults and caps. Request headers may lower these, never raise them."""

    enabled: Bool = True
    max_tokens: NonNegative = MEMORY_MAX_TOKENS
    top_k: AtLeastOne = MEMORY_TOP_K
    sources: tuple[Source, ...] = SOURCES
    # What a request without X-Memory-Capture captures, and the most one with it may ask for
    # (off < user < turn < facts).
    capture: Capture = "off"
    max_capture: Capture = "facts"
    packer: Packer = "optimal"
    # Where the block goes: the latest user turn (cacheable prefix) or the system prompt.
    position: Position = MEMORY_POSITION
    # adaptive: a memory is injected only while its value pays for its tokens (adr/0110);
    # fill: pack as much as max_tokens holds. X-Memory-Budget-Rule chooses per request.
    budget_rule: BudgetRule = "adaptive"
    # adaptive's price of 100 block tokens in value units (a memory's final score ** 4).
    token_price: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] = TOKEN_PRICE
    # adaptive: a dialog turn is worth what the question adds to the turn beside it (adr/0114).
    neighbour_turns: Bool = True
    # The dialog turns beside the first N dialog hits join the candidates (one more store
    # lookup, adr/0122); 0: none.
    neighbour_candidates: NonNegative = NEIGHBOUR_CANDIDATES
    # The hits of a hybrid search's lexical (BM25) branch that the fused top_k leaves out join
    # the candidates (adr/0136).
    lexical_candidates: Bool = LEXICAL_CANDIDATES
    query_window: Int = 2  # last N user messages form the retrieval query
    deadline_ms: Float = 50.0  # whole pipeline; past it the request goes without memories
    stage_timeouts: StageTimeouts = Field(default_factory=StageTimeouts)
    max_content_chars: Int = MAX_CONTENT_CHARS
    # Retrieval counts of injected memories are summed in memory and written this often: a hot
    # memory injected 100 times in the window costs one write, not 100 (adr/0082).
    count_flush_s: Annotated[float, Strict(), Field(ge=0)] = COUNT_FLUSH_S
    # Expired memories are out of retrieval at once and deleted this often; 0: never (adr/0113).
    purge_interval_s: Annotated[float, Strict(), Field(ge=0)] = 3600.0
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)

    @model_validator(mode="after")
    def _capture_within_ceiling(self) -> Self:
        _capture_at_most(self.capture, self.max_capture)
        return self

    def for_tenant(self, tenant: TenantMemory) -> MemorySettings:
        """A tenant's limits: its own values where it sets them, these elsewhere.

        A tenant's ``capture`` is its ceiling too unless it sets ``max_capture``: a tenant
        configured with ``capture: "off"`` captures nothing, whatever a request's header asks.
        """
        changes: dict[str, Any] = {
            name: value
            for name in TenantMemory.model_fields
            if (value := getattr(tenant, name)) is not None
        }
        if tenant.capture is not None and tenant.max_capture is None:
            changes["max_capture"] = tenant.capture
        elif tenant.capture is None and tenant.max_capture is not None:
            changes["capture"] = min(self.capture, tenant.max_capture, key=CAPTURES.index)
        return replace(self, **changes) if changes else self


class TenantSettings(_Section):
    """One tenant of keys mode: its memproxy keys and upstream key."""

    keys: tuple[SecretRef, ...] = ()
    upstream_api_key: SecretRef | None = None  # falls back to upstream.api_key
    anthropic_api_key: SecretRef | None = None  # falls back to upstream.anthropic.api_key
    memory: TenantMemory = Field(default_factory=TenantMemory)


def _no_tenants() -> Mapping[str, TenantSettings]:
    return types.MappingProxyType({})


# Read-only, like the rest of the tree; dumped as the plain mapping it is.
Tenants = Annotated[
    Mapping[str, TenantSettings],
    AfterValidator(types.MappingProxyType),
    WrapSerializer(lambda tenants, dump: dump(dict(tenants))),
]


class AuthSettings(_Section):
    """How a request maps to a tenant (``proxy/tenancy.py``, adr/0086).

    ``passthrough``: the client's credentials go upstream; tenant = hash of its key.
    ``keys``: the client presents a memproxy key; the tenant's upstream key is used instead.
    ``anonymous`` (passthrough only): keyless callers share the ``anonymous`` tenant's memory;
    off, they get none (chat passes through with memory off, the memories API answers 401).
    """

    mode: Literal["passthrough", "keys"] = "passthrough"
    anonymous: Bool = False
    tenants: Tenants = Field(default_factory=_no_tenants)

    @model_validator(mode="after")
    def _tenants_fit_the_mode(self) -> Self:
        if self.mode == "keys" and not self.tenants:
            raise _rule("tenants", "keys mode needs at least one tenant")
        if self.mode == "keys" and self.anonymous:
            raise _rule(
                "anonymous", "is for passthrough mode only (keys mode refuses keyless calls)"
            )
        owner: dict[str, str] = {}
        for name, tenant in self.tenants.items():
            for key in tenant.keys:
                other = owner.setdefault(key.value, name)
                if other != name:
                    # A key names one tenant; otherwise the later one would silently win.
                    raise _rule(
                        f"tenants.{name}.keys",
                        f"holds the key of tenant {other!r} ({key.ref}): a key names one tenant",
                    )
        return self


class StoreSettings(_Section):
    """Where memories live: embedded Qdrant Edge or a Qdrant server/cluster."""

    kind: Literal["edge", "qdrant"] = "edge"
    data_dir: str = "./data"
    qdrant_url: str | None = None
    qdrant_api_key: SecretRef | None = None
    collection: str = COLLECTION
    hybrid: Bool = HYBRID  # dense + sparse (BM25-style) search
    # Decoded records the embedded store keeps for searches (~1 KB each); 0 disables.
    record_cache_entries: NonNegative = RECORD_CACHE_ENTRIES
    # workers > 1 on edge: fold the shared write log into the primary at this size (adr/0120).
    log_fold_bytes: Positive = LOG_FOLD_BYTES
    # Edge: threads in each process's search pool; ``auto`` shares this process's CPUs among
    # the workers, at least 2 (adr/0131).
    search_threads: (
        Annotated[int, Strict(), Field(gt=0, le=SEARCH_THREADS_MAX)] | Literal["auto"]
    ) = SEARCH_THREADS

    @model_validator(mode="after")
    def _server_has_url(self) -> Self:
        if self.kind == "qdrant" and not self.qdrant_url:
            raise _rule("qdrant_url", "is required when store.kind is 'qdrant'")
        return self


class EmbedderSettings(_Section):
    """How queries and memories become vectors."""

    kind: Literal["static", "openai"] = "static"
    model: str | None = None  # None: the bundled static model / text-embedding-3-small
    url: str | None = None  # openai kind; None: upstream.url
    api_key: SecretRef | None = None  # openai kind; None: upstream.api_key
    dimensions: Int | None = None


class CacheSettings(_Section):
    """Embedding, token-count and retrieval cache: Redis if configured, else in-process."""

    redis_url: str | None = None
    local_max_entries: Int = CACHE_LOCAL_MAX_ENTRIES
    embedding_ttl_s: Int = EMBEDDING_TTL_S
    tokens_ttl_s: Int = TOKENS_TTL_S
    retrieval_ttl_s: Int = RETRIEVAL_TTL_S
    blocks_ttl_s: Int = BLOCKS_TTL_S


class Settings(_Section):
    """The whole configuration, frozen."""

    server: ServerSettings = Field(default_factory=ServerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    source: str = "defaults"  # where the settings came from, for messages and /readyz


def load_settings(
    config: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build validated settings from a YAML file, ``MEMPROXY_*`` variables and flag overrides.

    ``config`` defaults to ``$MEMPROXY_CONFIG``; ``env`` to ``os.environ``; ``overrides`` maps
    dotted keys (``"server.port"``) to values from the command line (``None`` values ignored).
    """
    environ = os.environ if env is None else env
    _refuse_unknown_variables(environ)
    path = config if config is not None else environ.get(CONFIG_VARIABLE) or None
    source = str(path) if path else "defaults"
    origins = _Origins()
    data: dict[str, Any] = {}
    if path:
        data = _read_yaml(Path(path))
        origins.record_tree(data, source)
    for var, key in ENV_KEYS.items():
        raw = environ.get(var)
        if not raw:
            continue
        value = f"{ENV_PREFIX}{var}" if var in ENV_SECRET_VALUES else _parse_variable(var, key, raw)
        _put(data, key, value, origins, var)
    if environ.get("MEMPROXY_QDRANT_URL"):
        _put(data, "store.kind", "qdrant", origins, "MEMPROXY_QDRANT_URL")
    for key, value in (overrides or {}).items():
        if value is not None:
            _put(data, key, value, origins, COMMAND_LINE)
    try:
        return Settings.model_validate({**data, "source": source}, context={"environ": environ})
    except ValidationError as exc:
        raise _config_error(exc, origins) from None


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    """A misspelt ``MEMPROXY_*`` variable would otherwise be ignored without a word."""
    for var in sorted(environ):
        if var.startswith(VARIABLE_PREFIX) and var not in KNOWN_VARIABLES:
            close = difflib.get_close_matches(var, sorted(KNOWN_VARIABLES), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"{var}: unknown memproxy variable{hint} "
                f"(known: {', '.join(sorted(KNOWN_VARIABLES))})",
                param=var,
            )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    if "source" in data:  # a field of Settings, but set by the loader, never by the file
        raise ConfigError(f"{path}: 'source' {_unknown('source', _sections())}", param="source")
    return data


class _Origins:
    """Which layer set each dotted key last: the file, a variable, or the command line."""

    def __init__(self, default: str = "defaults") -> None:
        self.default = default
        self._labels: dict[str, str] = {}

    def record(self, key: str, label: str) -> None:
        self._labels[key] = label

    def record_default(self, key: str, label: str) -> None:
        self._labels.setdefault(key, label)

    def record_tree(self, data: Mapping[Any, Any], label: str, prefix: str = "") -> None:
        for name, value in data.items():
            key = f"{prefix}{name}"
            self.record(key, label)
            if isinstance(value, Mapping):
                self.record_tree(value, label, f"{key}.")

    def of(self, loc: tuple[str | int, ...]) -> str:
        """The layer that set ``loc`` or, failing that, its closest enclosing section."""
        parts = [str(p) for p in loc if not isinstance(p, int)]
        while parts:
            label = self._labels.get(".".join(parts))
            if label is not None:
                return label
            parts.pop()
        return self.default


def _put(data: dict[str, Any], key: str, value: Any, origins: _Origins, label: str) -> None:
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        # A rule broken inside a section nobody else set is blamed on this layer.
        origins.record_default(".".join(parts[: i + 1]), label)
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            return  # the file has a non-mapping here: validation reports it, naming the file
        node = child
    node[parts[-1]] = value
    origins.record(key, label)


def _parse_variable(var: str, key: str, raw: str) -> Any:
    """An environment string parsed by the type of the setting it sets."""
    try:
        return _string_adapter(key).validate_strings(raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise ConfigError(f"{var}: '{key}' {_describe(error, (), quote=repr)}", param=key) from None


@cache
def _string_adapter(key: str) -> TypeAdapter[Any]:
    info = _field_at(key)
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]  # the constraints (Strict, ge...)
    return TypeAdapter(annotation)


def _field_at(key: str) -> FieldInfo:
    """The field a dotted key (of a section, not a tenant) names."""
    section: type[_Section] = Settings
    *path, name = key.split(".")
    for part in path:
        inner = _section_in(section.model_fields[part])
        if inner is None:
            raise KeyError(key)
        section = inner[0]
    return section.model_fields[name]


def _section_in(info: FieldInfo) -> tuple[type[_Section], bool] | None:
    """The section a field holds, and whether a mapping's key (a tenant name) comes first."""
    inner: Any = info.annotation
    by_name = False
    origin = get_origin(inner)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        inner, by_name = get_args(inner)[1], True
    if isinstance(inner, type) and issubclass(inner, _Section):
        return inner, by_name
    return None


def _holds_section(model: type[_Section], name: str) -> bool:
    info = model.model_fields.get(name)
    inner = _section_in(info) if info is not None else None
    return inner is not None and not inner[1]


def _sections() -> list[str]:
    return [name for name in Settings.model_fields if name != "source"]


def _known_at(loc: tuple[str | int, ...]) -> list[str]:
    """The keys the section at ``loc`` accepts."""
    section: type[_Section] = Settings
    skip_name = False
    for part in loc:
        if skip_name:
            skip_name = False
            continue
        info = section.model_fields.get(str(part))
        inner = _section_in(info) if info is not None else None
        if inner is None:
            return []
        section, skip_name = inner
    return _sections() if section is Settings else list(section.model_fields)


def _unknown(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"is not a setting{hint} (known: {', '.join(known)})"


def _config_error(exc: ValidationError, origins: _Origins) -> ConfigError:
    """The first error as one line: where the value came from, the dotted key, what is wrong."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    if error["type"] == "rule":
        loc += tuple(str(error.get("ctx", {})["key"]).split("."))
    key = _dotted(loc)
    return ConfigError(f"{origins.of(loc)}: '{key}' {_describe(error, loc)}", param=key)


def _dotted(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "tuple": "a list",
    "list": "a list",
    "dict": "a mapping",
    "mapping": "a mapping",
    "model": "a mapping",
}
# pydantic's bound errors: (operator, key of the bound in the error's context).
BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}
# YAML 1.1 (PyYAML) reads these unquoted words as booleans.
YAML_BOOLS = {True: ("on", "yes", "true"), False: ("off", "no", "false")}
QUOTED = re.compile(r"'([^']*)'")


def _describe(
    error: ErrorDetails, loc: tuple[str | int, ...], quote: Callable[[str], str] | None = None
) -> str:
    """What is wrong with the value, in the words of a YAML file (``quote`` shows a string
    value; by default it says it is one, which a YAML type error is about)."""
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    got = quote(value) if quote is not None and isinstance(value, str) else _got(value)
    if kind == "extra_forbidden":
        return _unknown(str(loc[-1]), _known_at(loc[:-1]))
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        message = f"must be one of {expected}, got {got}"
        if isinstance(value, bool):
            word = next((w for w in QUOTED.findall(expected) if w in YAML_BOOLS[value]), None)
            if word is not None:
                name = loc[-1] if loc else "value"
                message += f': YAML read `{word}` as {got}; quote it: {name}: "{word}"'
        return message
    if kind in BOUNDS:
        operator, bound = BOUNDS[kind]
        return f"must be {operator} {ctx.get(bound)}, got {got}"
    expected = EXPECTED.get(kind.split("_")[0])
    if expected is not None:
        message = f"must be {expected}, got {got}"
        if expected == "a list" and isinstance(value, str):
            message += f"; write a list: [{value}]"
        return message
    text = error["msg"]
    return text[:1].lower() + text[1:]


def _got(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)
