"""The upstream client: URL mapping, header rules and timeouts over one ``Transport``.

The transport (``proxy/transport.py``; aiohttp by default, ``upstream.client`` picks it, adr/0085)
is opened and closed by the app lifespan. Bodies pass through as bytes: no decompression
(``Content-Encoding`` goes to the client as is), no re-framing. Timeouts follow the settings and
are the same for every transport: ``connect`` bounds making a connection (inside the transport),
``first_byte`` the wait for the response head, ``idle`` each wait for the next chunk, ``total``
the whole exchange. A timeout raises ``UpstreamTimeout`` (504), any other transport failure
``UpstreamError`` (502).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.types import Scope

from proxy.errors import RequestError, UpstreamError, UpstreamTimeout
from proxy.request_target import forward_target
from proxy.settings import UpstreamSettings
from proxy.transport import (
    Headers,
    Transport,
    TransportConfig,
    TransportResponse,
    Written,
    check_wire,
    env_proxy,
    valid_fields,
)
from proxy.transport_aiohttp import AiohttpTransport

if TYPE_CHECKING:
    from proxy.tenancy import UpstreamAuth

# RFC 9110 section 7.6.1 hop-by-hop headers, plus ones the transport recomputes. Any other
# header named in a Connection header is hop-by-hop too (``connection_named``).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", "expect"}
DROP_REQUEST_BYTES = frozenset(name.encode() for name in DROP_REQUEST)
# The server sets its own framing, date and identity.
DROP_RESPONSE = HOP_BY_HOP | {"content-length", "date", "server"}
DROP_RESPONSE_BYTES = frozenset(name.encode() for name in DROP_RESPONSE)
MEMORY_HEADER_PREFIX = b"x-memory-"
REQUEST_ID = b"x-request-id"
CONNECTION = b"connection"
EVENT_STREAM = b"text/event-stream"
HEADER_TIMEOUT_MESSAGE = "The upstream did not answer in time."
OK = "ok"
NOT_CHECKED = "not checked"
BODY_TIMEOUT_MESSAGE = "The upstream stopped sending data in time."
REDACTED = "***"

# ``upstream.client`` -> the transport it names (adr/0085: one, today).
TRANSPORTS: Mapping[str, Callable[[TransportConfig], Transport]] = {"aiohttp": AiohttpTransport}


def header_bytes(value: str) -> bytes:
    """A header value as bytes: latin-1 (what HTTP/1.1 carries), UTF-8 if it does not fit."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def connection_named(values: Iterable[bytes]) -> frozenset[bytes]:
    """The header names listed in ``Connection`` header values (``close, X-Foo`` -> x-foo)."""
    names = set()
    for value in values:
        for token in value.split(b","):
            token = token.strip().lower()
            if token:
                names.add(token)
    return frozenset(names)


def request_headers(
    raw: Iterable[tuple[bytes, bytes]],
    withhold: frozenset[bytes] = frozenset(),
    add: Iterable[tuple[bytes, bytes]] = (),
) -> Headers:
    """Headers to send upstream: hop-by-hop and memproxy's own removed, auth per tenant.

    ``withhold`` and ``add`` are the tenant's upstream auth (``proxy.tenancy.UpstreamAuth``):
    client headers (lower-case names) kept back, and headers sent instead.
    Bytes in, bytes out: the client's names and values go upstream exactly as received. A name
    that is not an HTTP token or a value with a control character is the client's error (400).
    """
    drop = DROP_REQUEST_BYTES | withhold if withhold else DROP_REQUEST_BYTES
    out = []
    connection: list[bytes] = []
    for name, value in raw:
        lower = name.lower()
        if lower in drop or lower.startswith(MEMORY_HEADER_PREFIX):
            if lower == CONNECTION:
                connection.append(value)
            continue
        out.append((lower, value))
    if not valid_fields(out):
        bad = next(n for n, v in out if not valid_fields([(n, v)]))
        raise RequestError(
            f"Header {bad.decode('latin-1')[:64]!r} is not a valid HTTP header field "
            "(a name must be a token; a value may not contain control characters).",
            code="invalid_header",
        )
    if connection:
        named = connection_named(connection) - drop
        if named:
            out = [(n, v) for n, v in out if n not in named]
    out.extend(add)
    return out


def upstream_headers(scope: Scope, auth: UpstreamAuth) -> Headers:
    """The client's headers as they go upstream, with the request id and the tenant's auth.

    ``auth`` is the tenant's credentials in the upstream API's form
    (``proxy.tenancy.bearer_auth`` for OpenAI's).
    """
    headers = request_headers(scope["headers"], auth.withhold, auth.add)
    request_id = scope.get("state", {}).get("request_id")
    if request_id and not any(name == REQUEST_ID for name, _ in headers):
        headers.append((REQUEST_ID, request_id.encode("latin-1")))
    return headers


def first_header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case) in raw ``headers``, or ``None``."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Upstream response headers safe to relay to the client (hop-by-hop ones removed)."""
    out = []
    connection = []
    for name, value in headers:
        lower = name.lower()
        if lower in DROP_RESPONSE_BYTES:
            if lower == CONNECTION:
                connection.append(value)
            continue
        out.append((name, value))
    if connection:
        named = connection_named(connection)
        out = [(n, v) for n, v in out if n.lower() not in named]
    return out


def redact_url(url: str) -> str:
    """``url`` fit to print: user information and every query value replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    # A parameter's name stays (it says what is configured); a bare item may be the secret.
    query = "&".join(
        f"{item.partition('=')[0]}={REDACTED}" if "=" in item else REDACTED
        for item in parts.query.split("&")
        if item
    )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


class UpstreamResponse:
    """An open upstream response: status and headers now, the body as it arrives.

    ``idle`` bounds each wait for body bytes and ``total`` (``deadline``) all of them.
    """

    __slots__ = ("_deadline", "_idle", "_raw", "is_event_stream", "raw_headers", "status")

    def __init__(self, raw: TransportResponse, idle: float, deadline: float) -> None:
        self._raw = raw
        self._idle = idle
        self._deadline = deadline
        self.status = raw.status
        self.raw_headers: Sequence[tuple[bytes, bytes]] = raw.raw_headers
        self.is_event_stream = False
        for name, value in self.raw_headers:
            if name.lower() == b"content-type":
                self.is_event_stream = value.startswith(EVENT_STREAM)
                break

    def raw_headers_get(self, name: bytes) -> bytes | None:
        """The first raw header value named ``name`` (lower-case), or ``None``."""
        return first_header(self.raw_headers, name)

    def _wait(self) -> float:
        return min(self._idle, self._deadline - asyncio.get_running_loop().time())

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield body bytes as they arrive; raise on an idle or total timeout or a broken body."""
        raw = self._raw
        while True:
            try:
                async with asyncio.timeout(self._wait()):
                    chunk = await raw.chunk()
            except TimeoutError as exc:
                raise UpstreamTimeout(BODY_TIMEOUT_MESSAGE) from exc
            if not chunk:
                return
            yield chunk

    async def read(self) -> bytes:
        """Read a whole (non-streamed) body; ``idle`` bounds the whole read, as does ``total``.

        A non-streamed body is complete when the upstream starts sending it, so one timeout
        around the read is enough (and cheaper than one per chunk).
        """
        try:
            async with asyncio.timeout(self._wait()):
                return await self._raw.read()
        except TimeoutError as exc:
            raise UpstreamTimeout(BODY_TIMEOUT_MESSAGE) from exc

    def close(self) -> None:
        """Release the connection; an unfinished body drops it instead of reusing it."""
        self._raw.close()


class UpstreamClient:
    """The configured upstream: where requests go, and the transport that carries them.

    Credentials written into ``upstream.url`` (``https://user:pass@host``) are never sent (the
    ``Authorization`` header carries the key) and never printed: ``display_url`` redacts them
    and every query value. A query in ``upstream.url`` (``?api-version=...``) is sent first,
    before the client's own.
    """

    def __init__(
        self,
        settings: UpstreamSettings,
        *,
        environ: Mapping[str, str] | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        host = parts.netloc.rpartition("@")[2]
        self._prefix = f"{parts.scheme}://{host}{parts.path.rstrip('/')}"
        self._base_query = parts.query
        self.display_url = redact_url(settings.url)
        self.proxy = env_proxy(settings.url, os.environ if environ is None else environ)
        self.display_proxy = redact_url(self.proxy) if self.proxy else None
        config = TransportConfig(settings=settings, proxy=self.proxy)
        self.transport = transport or TRANSPORTS[settings.client](config)
        # What the last exchange showed, for /readyz (which never calls the paid upstream):
        # None until a request went upstream, then "ok" or why it could not be reached.
        self.last_outcome: str | None = None

    async def start(self) -> None:
        """Open the transport's pool (inside the running event loop)."""
        await self.transport.start()

    async def close(self) -> None:
        """Close the transport's pool."""
        await self.transport.close()

    def join(self, target: str) -> str:
        """The upstream URL for a checked target below ``/v1`` (``/models?x=1``)."""
        if not self._base_query:
            return self._prefix + target
        path, _, query = target.partition("?")
        joined = f"{self._base_query}&{query}" if query else self._base_query
        return f"{self._prefix}{path}?{joined}"

    def url_for(self, scope: Scope) -> str:
        """The upstream URL for the client's raw path and query; 400 if they may not go."""
        return self.join(forward_target(scope))

    async def send(
        self, method: str, url: str, headers: Headers, body: bytes, written: Written | None = None
    ) -> UpstreamResponse:
        """Send a request and wait for the response headers (``Transport.send``: ``written``)."""
        check_wire(url, headers)
        timeouts = self.settings.timeouts
        deadline = asyncio.get_running_loop().time() + timeouts.total
        try:
            async with asyncio.timeout(min(timeouts.first_byte, timeouts.total)):
                raw = await self.transport.send(method, url, headers, body, written)
        except TimeoutError as exc:
            self.last_outcome = HEADER_TIMEOUT_MESSAGE
            raise UpstreamTimeout(HEADER_TIMEOUT_MESSAGE) from exc
        except UpstreamError as exc:
            self.last_outcome = exc.message
            raise
        self.last_outcome = OK
        return UpstreamResponse(raw, timeouts.idle, deadline)

    async def ready(self) -> bool:
        """True when the pool is open (readiness does not call the paid upstream)."""
        return self.transport.ready()

    def status(self) -> str:
        """``/readyz``'s word on the upstream, from the last exchange: ``ok``, ``not checked``
        (no request went upstream yet) or why the last one failed."""
        if not self.transport.ready():
            return "not ready"
        return self.last_outcome or NOT_CHECKED
