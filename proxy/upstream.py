"""The upstream client: one pooled aiohttp session, opened and closed by the app lifespan.

aiohttp won the client benchmark (ADR-0002). Bodies pass through as bytes: no decompression
(``Content-Encoding`` goes to the client as is), no re-framing. Timeouts follow the settings:
``connect`` and ``first_byte`` bound the wait for response headers, ``idle`` bounds each wait
for the next chunk, ``total`` bounds the whole exchange. A timeout raises ``UpstreamTimeout``
(504), any other transport failure ``UpstreamError`` (502).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

import aiohttp
from yarl import URL

from proxy.errors import UpstreamError, UpstreamTimeout
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
DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", "authorization", "expect"}
# The server sets its own framing, date and identity.
DROP_RESPONSE = HOP_BY_HOP | {"content-length", "date", "server"}
MEMORY_HEADER_PREFIX = "x-memory-"
V1_PREFIX = "/v1"


def request_headers(
    raw: Iterable[tuple[bytes, bytes]], authorization: str | None
) -> list[tuple[str, str]]:
    """Headers to send upstream: hop-by-hop and memproxy's own removed, auth per tenant."""
    out = []
    for name_b, value_b in raw:
        name = name_b.decode("latin-1").lower()
        if name in DROP_REQUEST or name.startswith(MEMORY_HEADER_PREFIX):
            continue
        out.append((name, value_b.decode("latin-1")))
    if authorization:
        out.append(("authorization", authorization))
    return out


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Upstream response headers safe to relay to the client."""
    return [(k, v) for k, v in headers if k.decode("latin-1").lower() not in DROP_RESPONSE]


class UpstreamResponse:
    """An open upstream response: status and headers now, the body as it arrives."""

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
    """One pooled HTTP client for the configured upstream."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self.base_url = settings.url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the connection pool (inside the running event loop)."""
        pool = self.settings.pool
        connector = aiohttp.TCPConnector(
            limit=pool.max_connections,
            limit_per_host=0,
            keepalive_timeout=pool.keepalive_s,
            ttl_dns_cache=300,
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
        if self._session is not None:
            await self._session.close()
            self._session = None

    def url_for(self, path: str, query: str) -> URL:
        """Map a client path (``/v1/models``) onto the upstream base URL, keeping the query."""
        tail = path[len(V1_PREFIX) :] if path.startswith(V1_PREFIX) else path
        url = self.base_url + tail
        if query:
            url = f"{url}?{query}"
        # encoded=True: the query is relayed byte for byte, not re-quoted.
        return URL(url, encoded=True)

    async def send(
        self, method: str, url: URL, headers: list[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        """Send a request and wait for the response headers."""
        if self._session is None:
            raise UpstreamError("The upstream client is not started.")
        timeouts = self.settings.timeouts
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeouts.total
        try:
            async with asyncio.timeout(min(timeouts.first_byte, timeouts.total)):
                response = await self._session.request(
                    method, url, headers=headers, data=body or None, allow_redirects=False
                )
        except TimeoutError as exc:
            raise UpstreamTimeout("The upstream did not answer in time.") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(f"Cannot reach the upstream: {type(exc).__name__}.") from exc
        return UpstreamResponse(response, self, deadline)

    async def ready(self) -> bool:
        """True when the pool is open (readiness does not call the paid upstream)."""
        return self._session is not None and not self._session.closed
