"""The upstream client: one connection pool, opened and closed by the app lifespan.

The lean HTTP/1.1 client (``proxy/http1.py``, ADR-0008) is the default; aiohttp (ADR-0002)
stays selectable with ``upstream.client: aiohttp``. Bodies pass through as bytes: no decompression
(``Content-Encoding`` goes to the client as is), no re-framing. Timeouts follow the settings:
``connect`` and ``first_byte`` bound the wait for response headers, ``idle`` bounds each wait
for the next chunk, ``total`` bounds the whole exchange. A timeout raises ``UpstreamTimeout``
(504), any other transport failure ``UpstreamError`` (502).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.http1_pool import Http1Pool
from proxy.settings import UpstreamSettings

# RFC 9110 section 7.6.1 hop-by-hop headers, plus ones the transport recomputes.
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
V1_PREFIX = "/v1"

Headers = list[tuple[bytes, bytes]]


def header_bytes(value: str) -> bytes:
    """A header value as bytes: latin-1 (what HTTP/1.1 carries), UTF-8 if it does not fit."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def request_headers(
    raw: Iterable[tuple[bytes, bytes]],
    withhold: frozenset[bytes] = frozenset(),
    add: Iterable[tuple[bytes, bytes]] = (),
) -> Headers:
    """Headers to send upstream: hop-by-hop and memproxy's own removed, auth per tenant.

    ``withhold`` and ``add`` are the tenant's upstream auth (``proxy.tenancy.UpstreamAuth``):
    client headers (lower-case names) kept back, and headers sent instead.
    Bytes in, bytes out: the client's names and values go upstream exactly as received.
    """
    drop = DROP_REQUEST_BYTES | withhold if withhold else DROP_REQUEST_BYTES
    out = []
    for name, value in raw:
        lower = name.lower()
        if lower in drop or lower.startswith(MEMORY_HEADER_PREFIX):
            continue
        out.append((lower, value))
    out.extend(add)
    return out


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Upstream response headers safe to relay to the client."""
    return [(k, v) for k, v in headers if k.lower() not in DROP_RESPONSE_BYTES]


class UpstreamResponse(Protocol):
    """An open upstream response: status and headers now, the body as it arrives."""

    @property
    def status(self) -> int:
        """The upstream's status code."""

    @property
    def raw_headers(self) -> Sequence[tuple[bytes, bytes]]:
        """The upstream's response headers, as received."""

    @property
    def is_event_stream(self) -> bool:
        """Whether the body is SSE (``text/event-stream``): relayed chunk by chunk."""

    def raw_headers_get(self, name: bytes) -> bytes | None:
        """The first raw header value named ``name`` (lower-case), or ``None``."""

    def chunks(self) -> AsyncIterator[bytes]:
        """Yield body bytes as they arrive; raise on an idle or total timeout or a broken body."""

    async def read(self) -> bytes:
        """Read a whole (non-streamed) body; ``idle`` (capped by ``total``) bounds the read."""

    def close(self) -> None:
        """Release the connection; an unfinished body drops it instead of reusing it."""


class AiohttpResponse:
    """``UpstreamResponse`` over an aiohttp response (``upstream.client: aiohttp``)."""

    def __init__(self, response: aiohttp.ClientResponse, client: UpstreamClient, deadline: float):
        self._response = response
        self._client = client
        self._deadline = deadline
        self.status = response.status
        self.raw_headers = response.raw_headers
        content_type = response.headers.get("content-type", "")
        self.is_event_stream = content_type.startswith("text/event-stream")

    def raw_headers_get(self, name: bytes) -> bytes | None:
        """The first raw header value named ``name`` (lower-case), or ``None``."""
        for key, value in self.raw_headers:
            if key.lower() == name:
                return value
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield body bytes as they arrive; raise on an idle or total timeout or a broken body."""
        loop = asyncio.get_running_loop()
        idle = self._client.settings.timeouts.idle
        content = self._response.content
        while True:
            wait = min(idle, self._deadline - loop.time())
            try:
                async with asyncio.timeout(wait):
                    chunk = await content.readany()
            except TimeoutError as exc:
                raise UpstreamTimeout("The upstream stopped sending data in time.") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise UpstreamError(
                    f"The upstream connection broke: {type(exc).__name__}."
                ) from exc
            if not chunk:
                return
            yield chunk

    async def read(self) -> bytes:
        """Read a whole (non-streamed) body; ``idle`` bounds the whole read, as does ``total``.

        A non-streamed body is complete when the upstream starts sending it, so one timeout
        around the read is enough (and cheaper than one per chunk).
        """
        loop = asyncio.get_running_loop()
        wait = min(self._client.settings.timeouts.idle, self._deadline - loop.time())
        try:
            async with asyncio.timeout(wait):
                return await self._response.read()
        except TimeoutError as exc:
            raise UpstreamTimeout("The upstream stopped sending data in time.") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"The upstream connection broke: {type(exc).__name__}.") from exc

    def close(self) -> None:
        """Release the connection; an unfinished body drops it instead of reusing it."""
        self._response.close()


class UpstreamClient:
    """One pooled HTTP client for the configured upstream.

    ``upstream.client`` picks the transport: ``fast`` (default) is the lean HTTP/1.1 client of
    ``proxy/http1.py`` (ADR-0008), ``aiohttp`` the aiohttp session of ADR-0002. Both give the
    same ``UpstreamResponse`` interface, errors and timeouts.
    """

    def __init__(
        self, settings: UpstreamSettings, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.settings = settings
        self.base_url = settings.url.rstrip("/")
        parts = urlsplit(self.base_url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None
        self._pool: Http1Pool | None = None

    async def start(self) -> None:
        """Open the connection pool (inside the running event loop)."""
        pool = self.settings.pool
        if self.settings.client == "fast":
            self._pool = Http1Pool(
                self.origin,
                max_connections=pool.max_connections,
                keepalive_s=pool.keepalive_s,
                connect_timeout=self.settings.timeouts.connect,
                ssl_context=self._ssl_context,
            )
            return
        connector = aiohttp.TCPConnector(
            limit=pool.max_connections,
            limit_per_host=0,
            keepalive_timeout=pool.keepalive_s,
            ttl_dns_cache=300,
            ssl=self._ssl_context if self._ssl_context is not None else True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, connect=self.settings.timeouts.connect, sock_read=None
            ),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            # The client's own headers go through; aiohttp must not add defaults of its own.
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type", "Accept"),
        )

    async def close(self) -> None:
        """Close the pool."""
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url_for(self, path: str, query: str) -> str:
        """Map a client path (``/v1/models``) onto the upstream base URL, keeping the query."""
        tail = path[len(V1_PREFIX) :] if path.startswith(V1_PREFIX) else path
        url = self.base_url + tail
        if query:
            url = f"{url}?{query}"
        return url

    async def send(self, method: str, url: str, headers: Headers, body: bytes) -> UpstreamResponse:
        """Send a request and wait for the response headers."""
        timeouts = self.settings.timeouts
        now = asyncio.get_running_loop().time()
        deadline = now + timeouts.total
        if self._pool is not None:
            return await self._pool.request(
                method,
                url[len(self.origin) :] or "/",
                headers,
                body,
                header_deadline=now + min(timeouts.first_byte, timeouts.total),
                idle=timeouts.idle,
                deadline=deadline,
            )
        if self._session is None:
            raise UpstreamError("The upstream client is not started.")
        try:
            async with asyncio.timeout(min(timeouts.first_byte, timeouts.total)):
                response = await self._session.request(
                    method,
                    # encoded=True: the query is relayed byte for byte, not re-quoted.
                    URL(url, encoded=True),
                    headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers],
                    data=body or None,
                    allow_redirects=False,
                )
        except TimeoutError as exc:
            raise UpstreamTimeout("The upstream did not answer in time.") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"Cannot reach the upstream: {type(exc).__name__}.") from exc
        return AiohttpResponse(response, self, deadline)

    async def ready(self) -> bool:
        """True when the pool is open (readiness does not call the paid upstream)."""
        if self._pool is not None:
            return True
        return self._session is not None and not self._session.closed
