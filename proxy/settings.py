"""Settings: the only module that reads configuration files and the environment.

Precedence, lowest to highest: built-in defaults < YAML file (``MEMPROXY_CONFIG`` or
``--config``) < ``MEMPROXY_*`` environment variables < command-line flags. The result is one
frozen ``Settings`` tree, validated at start: an unknown key or a wrong type raises
``ConfigError`` naming the dotted key and the file.

Secrets are never written in the file: they are references (``env:OPENAI_API_KEY``) resolved
here into ``Secret`` values whose ``repr`` shows the reference, never the value.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from proxy.errors import ConfigError

MIB = 1024 * 1024
ENV_PREFIX = "env:"
ALL_SOURCES: tuple[str, ...] = ("learnings", "playbook", "conversation", "summaries")

# MEMPROXY_* variable -> dotted settings key. MEMPROXY_CONFIG is handled separately.
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
ENV_SECRET_VALUES = frozenset({"MEMPROXY_UPSTREAM_API_KEY", "MEMPROXY_QDRANT_API_KEY"})


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret value with the reference it came from; ``repr`` never shows the value."""

    ref: str
    value: str = field(repr=False)

    def __str__(self) -> str:
        return self.ref


@dataclass(frozen=True, slots=True)
class HttpServerSettings:
    """Limits of the HTTP server on request heads, idle connections and refused bodies."""

    # Request line plus header lines; a longer head answers 431 (and is never buffered whole).
    max_head_bytes: int = 64 * 1024
    max_headers: int = 100  # header fields per request; more answer 431
    # From the connection (or the first byte of a later request) to the end of its head.
    head_timeout_s: float = 10.0
    # Longest wait for the next bytes of a request body still arriving (not a total), like
    # nginx's client_body_timeout: a stalled upload answers 408 and is closed.
    body_timeout_s: float = 60.0
    # An idle keep-alive connection is closed after this; longer than the 60 s idle timeout
    # of common load balancers, so they close first and never reuse a connection being closed.
    keepalive_s: float = 75.0
    # After an answer sent before the whole body arrived (413), the rest of the body is read
    # and dropped, up to this many bytes and seconds, so the client reads the answer instead
    # of a connection reset.
    drain_bytes: int = 64 * MIB
    drain_s: float = 10.0


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where and how the HTTP server runs."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # One line per request at info level; costs ~30 us of CPU per request (bench/overhead.py).
    access_log: bool = True
    # Seconds in-flight requests and streams get to finish on shutdown.
    graceful_timeout_s: float = 30.0
    # Set by the CLI when several workers share Prometheus metrics (multiprocess mode).
    metrics_dir: str | None = None
    http: HttpServerSettings = HttpServerSettings()


@dataclass(frozen=True, slots=True)
class TimeoutSettings:
    """Upstream timeouts in seconds; each one ends the request with 504 or a stream error."""

    connect: float = 5.0
    first_byte: float = 120.0  # request sent -> response headers
    idle: float = 120.0  # between two chunks of the body
    total: float = 900.0  # whole exchange, streaming included


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """Connection pool towards the upstream."""

    max_connections: int = 512
    keepalive_s: float = 30.0


@dataclass(frozen=True, slots=True)
class UpstreamTlsSettings:
    """TLS towards the upstream: extra trusted CAs and a client certificate (paths to PEM files)."""

    ca_file: str | None = None  # trusted in addition to the system and certifi CAs
    cert_file: str | None = None  # client certificate chain, for upstreams that require one
    key_file: str | None = None  # its private key; None: the key is in cert_file


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """The OpenAI-compatible provider behind the proxy."""

    url: str = "https://api.openai.com/v1"
    # Used in keys mode (tenants without their own key) and by the openai embedder.
    api_key: Secret | None = None
    timeouts: TimeoutSettings = TimeoutSettings()
    pool: PoolSettings = PoolSettings()
    tls: UpstreamTlsSettings = UpstreamTlsSettings()
    # The HTTP client library behind proxy/transport.py (adr/0085).
    client: Literal["aiohttp"] = "aiohttp"


@dataclass(frozen=True, slots=True)
class LimitsSettings:
    """Request limits."""

    max_body_bytes: int = 16 * MIB


@dataclass(frozen=True, slots=True)
class StageTimeouts:
    """Per-stage budgets of the memory pipeline, in milliseconds."""

    embed_ms: float = 30.0
    search_ms: float = 30.0
    cache_ms: float = 10.0


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Memory defaults and caps. Request headers may lower these, never raise them."""

    enabled: bool = True
    max_tokens: int = 4500
    top_k: int = 50
    sources: tuple[str, ...] = ALL_SOURCES
    capture: Literal["off", "user", "turn"] = "off"
    packer: Literal["optimal", "greedy"] = "optimal"
    query_window: int = 2  # last N user messages form the retrieval query
    deadline_ms: float = 50.0  # whole pipeline; past it the request goes without memories
    stage_timeouts: StageTimeouts = StageTimeouts()
    max_content_chars: int = 8000
    # Retrieval counts of injected memories are summed in memory and written this often: a hot
    # memory injected 100 times in the window costs one write, not 100 (adr/0082).
    count_flush_s: float = 5.0


@dataclass(frozen=True, slots=True)
class TenantMemory:
    """Per-tenant overrides of ``MemorySettings``; ``None`` keeps the global value."""

    max_tokens: int | None = None
    top_k: int | None = None
    sources: tuple[str, ...] | None = None
    capture: Literal["off", "user", "turn"] | None = None
    packer: Literal["optimal", "greedy"] | None = None


@dataclass(frozen=True, slots=True)
class TenantSettings:
    """One tenant of keys mode: its memproxy keys and upstream key."""

    keys: tuple[Secret, ...] = ()
    upstream_api_key: Secret | None = None  # falls back to upstream.api_key
    memory: TenantMemory = TenantMemory()


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """How a request maps to a tenant (``proxy/tenancy.py``, adr/0086).

    ``passthrough``: the client's credentials go upstream; tenant = hash of its key.
    ``keys``: the client presents a memproxy key; the tenant's upstream key is used instead.
    ``anonymous`` (passthrough only): keyless callers share the ``anonymous`` tenant's memory;
    off, they get none (chat passes through with memory off, the memories API answers 401).
    """

    mode: Literal["passthrough", "keys"] = "passthrough"
    anonymous: bool = False
    tenants: Mapping[str, TenantSettings] = field(
        default_factory=lambda: types.MappingProxyType({})
    )


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """Where memories live: embedded Qdrant Edge or a Qdrant server/cluster."""

    kind: Literal["edge", "qdrant"] = "edge"
    data_dir: str = "./data"
    qdrant_url: str | None = None
    qdrant_api_key: Secret | None = None
    collection: str = "memproxy"
    hybrid: bool = True  # dense + sparse (BM25-style) search
    # Decoded records the embedded store keeps for searches (~1 KB each); 0 disables.
    record_cache_entries: int = 20_000


@dataclass(frozen=True, slots=True)
class EmbedderSettings:
    """How queries and memories become vectors."""

    kind: Literal["static", "openai"] = "static"
    model: str | None = None  # None: the bundled static model / text-embedding-3-small
    url: str | None = None  # openai kind; None: upstream.url
    api_key: Secret | None = None  # openai kind; None: upstream.api_key
    dimensions: int | None = None


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """Embedding, token-count and retrieval cache: Redis if configured, else in-process."""

    redis_url: str | None = None
    local_max_entries: int = 10_000
    embedding_ttl_s: int = 7 * 24 * 3600
    tokens_ttl_s: int = 7 * 24 * 3600
    retrieval_ttl_s: int = 30


@dataclass(frozen=True, slots=True)
class Settings:
    """The whole configuration, frozen."""

    server: ServerSettings = ServerSettings()
    upstream: UpstreamSettings = UpstreamSettings()
    limits: LimitsSettings = LimitsSettings()
    auth: AuthSettings = AuthSettings()
    memory: MemorySettings = MemorySettings()
    store: StoreSettings = StoreSettings()
    embedder: EmbedderSettings = EmbedderSettings()
    cache: CacheSettings = CacheSettings()
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
    path = config if config is not None else environ.get("MEMPROXY_CONFIG") or None
    data: dict[str, Any] = _read_yaml(Path(path)) if path else {}
    source = str(path) if path else "defaults"
    env_data: dict[str, Any] = {}
    for var, key in ENV_KEYS.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        value: Any = f"{ENV_PREFIX}{var}" if var in ENV_SECRET_VALUES else raw
        _set_dotted(env_data, key, value)
    if "qdrant_url" in env_data.get("store", {}):
        env_data["store"].setdefault("kind", "qdrant")
    flag_data: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(flag_data, key, value)
    file_settings = _build(Settings, data, "", source, environ)
    base = _as_dict(file_settings)
    base.pop("source", None)
    merged = _merge(_merge(base, env_data), flag_data)
    built: Settings = _build(Settings, merged, "", f"{source} + environment", environ)
    settings = replace(built, source=source)
    _check(settings, source)
    return settings


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
    return data


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _as_dict(obj: Any) -> Any:
    """Turn built settings back into plain data (secrets as their references) for merging."""
    if isinstance(obj, Secret):
        return obj.ref
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _as_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, Mapping):
        return {k: _as_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [_as_dict(v) for v in obj]
    return obj


def _build(cls: type[Any], data: Any, where: str, source: str, environ: Mapping[str, str]) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: '{where or 'top level'}' must be a mapping", param=where)
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls) if f.name != "source"}
    unknown = sorted(set(data) - known)
    if unknown:
        key = _join(where, str(unknown[0]))
        raise ConfigError(
            f"{source}: unknown key '{key}' (known: {', '.join(sorted(known))})", param=key
        )
    values = {
        name: _convert(hints[name], value, _join(where, name), source, environ)
        for name, value in data.items()
    }
    return cls(**values)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _convert(tp: Any, value: Any, key: str, source: str, environ: Mapping[str, str]) -> Any:
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, key, source, environ)
    if origin is Literal:
        if value not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise ConfigError(
                f"{source}: '{key}' must be one of {allowed}, got {value!r}", param=key
            )
        return value
    if tp is Secret:
        return _resolve_secret(value, key, source, environ)
    if origin is tuple:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{source}: '{key}' must be a list, got {value!r}", param=key)
        return tuple(
            _convert(args[0], v, f"{key}[{i}]", source, environ) for i, v in enumerate(value)
        )
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: '{key}' must be a mapping", param=key)
        return types.MappingProxyType(
            {str(k): _convert(args[1], v, f"{key}.{k}", source, environ) for k, v in value.items()}
        )
    if isinstance(tp, type) and is_dataclass(tp):
        return _build(tp, value if value is not None else {}, key, source, environ)
    return _scalar(tp, value, key, source)


def _scalar(tp: Any, value: Any, key: str, source: str) -> Any:
    # Environment values arrive as strings; YAML values already carry their type.
    if isinstance(value, str) and tp is not str:
        value = _parse_env_scalar(tp, value, key, source)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is bool or tp is int:
        ok = isinstance(value, tp) and (tp is bool or not isinstance(value, bool))
    else:
        ok = isinstance(value, tp)
    if not ok:
        raise ConfigError(
            f"{source}: '{key}' must be {tp.__name__}, got {type(value).__name__} {value!r}",
            param=key,
        )
    return value


def _parse_env_scalar(tp: Any, value: str, key: str, source: str) -> Any:
    try:
        if tp is bool:
            lowered = value.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if tp is int:
            return int(value)
        if tp is float:
            return float(value)
    except ValueError as exc:
        raise ConfigError(
            f"{source}: '{key}' must be {tp.__name__}, got {value!r}", param=key
        ) from exc
    return value


def _resolve_secret(value: Any, key: str, source: str, environ: Mapping[str, str]) -> Secret:
    if not isinstance(value, str) or not value.startswith(ENV_PREFIX):
        raise ConfigError(
            f"{source}: '{key}' must reference a secret as 'env:VARIABLE', never hold it",
            param=key,
        )
    var = value[len(ENV_PREFIX) :]
    secret = environ.get(var)
    if not secret:
        raise ConfigError(f"{source}: '{key}' references ${var}, which is not set", param=key)
    return Secret(ref=value, value=secret)


def _check_http(http: HttpServerSettings) -> list[tuple[bool, str, str]]:
    """Every ``server.http`` value must be positive."""
    return [
        (getattr(http, f.name) > 0, f"server.http.{f.name}", "must be > 0") for f in fields(http)
    ]


def _check(settings: Settings, source: str) -> None:
    """Cross-field rules a type cannot express."""
    rules: list[tuple[bool, str, str]] = [
        (1 <= settings.server.port <= 65535, "server.port", "must be in 1..65535"),
        (settings.server.workers >= 1, "server.workers", "must be >= 1"),
        (settings.limits.max_body_bytes > 0, "limits.max_body_bytes", "must be > 0"),
        *_check_http(settings.server.http),
        (settings.memory.max_tokens >= 0, "memory.max_tokens", "must be >= 0"),
        (settings.memory.top_k >= 1, "memory.top_k", "must be >= 1"),
        (settings.store.record_cache_entries >= 0, "store.record_cache_entries", "must be >= 0"),
        (settings.memory.count_flush_s >= 0, "memory.count_flush_s", "must be >= 0"),
        (
            settings.upstream.url.startswith(("http://", "https://")),
            "upstream.url",
            "must start with http:// or https://",
        ),
        (
            settings.auth.mode != "keys" or bool(settings.auth.tenants),
            "auth.tenants",
            "keys mode needs at least one tenant",
        ),
        (
            settings.auth.mode != "keys" or not settings.auth.anonymous,
            "auth.anonymous",
            "is for passthrough mode only (keys mode refuses keyless calls)",
        ),
        (
            settings.store.kind != "qdrant" or bool(settings.store.qdrant_url),
            "store.qdrant_url",
            "is required when store.kind is 'qdrant'",
        ),
    ]
    for ok, key, message in rules:
        if not ok:
            raise ConfigError(f"{source}: '{key}' {message}", param=key)
    for name, tenant in settings.auth.tenants.items():
        bad = [s for s in tenant.memory.sources or () if s not in ALL_SOURCES]
        if bad:
            key = f"auth.tenants.{name}.memory.sources"
            raise ConfigError(f"{source}: '{key}' has unknown source {bad[0]!r}", param=key)
    bad = [s for s in settings.memory.sources if s not in ALL_SOURCES]
    if bad:
        raise ConfigError(
            f"{source}: 'memory.sources' has unknown source {bad[0]!r}", param="memory.sources"
        )
