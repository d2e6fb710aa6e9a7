"""``Transport`` over aiohttp's client (``upstream.client: aiohttp``, the default; adr/0085).

One ``ClientSession`` per process: no cookie jar, no automatic decompression, none of aiohttp's
default headers, no redirects, response heads bounded by ``MAX_HEAD_LINE``/``MAX_HEADERS``. The
proxy comes from ``TransportConfig.proxy`` (``proxy.transport.env_proxy``), not ``trust_env``.
"""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import BytesPayload
from yarl import URL

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.transport import (
    MAX_HEAD_LINE,
    MAX_HEADERS,
    Headers,
    TransportConfig,
    TransportResponse,
    Written,
    tls_context,
)

# aiohttp adds these unless told not to; the client's own go through instead.
SKIP_AUTO_HEADERS = ("Accept-Encoding", "User-Agent", "Content-Type", "Accept")
DNS_CACHE_S = 300


def header_text(value: bytes) -> str:
    """A header value as aiohttp takes it (a str it writes as UTF-8).

    ASCII and UTF-8 values go out byte for byte; other bytes (obsolete latin-1 text) are read as
    latin-1, the only reading that keeps every byte a character.
    """
    if value.isascii():
        return value.decode("ascii")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


class WrittenBody(BytesPayload):
    """A request body that calls ``written`` once aiohttp has handed it to the connection.

    aiohttp writes a body in a task of its own after ``request`` has started waiting, so the
    caller cannot tell from its side when the request went out (adr/0128).
    """

    def __init__(self, body: bytes, written: Written) -> None:
        # Its type header is never sent (``SKIP_AUTO_HEADERS``): the client's own goes instead.
        super().__init__(body)
        self._written = written

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        """Write the body (headers go with it), then tell."""
        await super().write_with_length(writer, content_length)
        self._written()


def broken(exc: BaseException) -> UpstreamError:
    """A failure while reading the body."""
    return UpstreamError(f"The upstream connection broke: {type(exc).__name__}.")


class AiohttpResponse:
    """``TransportResponse`` over an aiohttp response."""

    __slots__ = ("_response", "raw_headers", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.raw_headers: Sequence[tuple[bytes, bytes]] = response.raw_headers

    async def chunk(self) -> bytes:
        """The next body bytes as they arrive, ``b""`` at the end."""
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise broken(exc) from exc

    async def read(self) -> bytes:
        """The whole body."""
        try:
            return await self._response.read()
        except (aiohttp.ClientError, OSError) as exc:
            raise broken(exc) from exc

    def close(self) -> None:
        """Release the connection; an unfinished body closes it instead of reusing it."""
        self._response.close()


class AiohttpTransport:
    """``Transport`` over one ``aiohttp.ClientSession``."""

    def __init__(self, config: TransportConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the session and its connection pool."""
        settings = self.config.settings
        https = settings.url.startswith("https:")
        connector = aiohttp.TCPConnector(
            limit=settings.pool.max_connections,
            limit_per_host=0,
            keepalive_timeout=settings.pool.keepalive_s,
            ttl_dns_cache=DNS_CACHE_S,
            ssl=tls_context(settings.tls) if https else True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, connect=settings.timeouts.connect, sock_read=None
            ),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=SKIP_AUTO_HEADERS,
            proxy=self.config.proxy,
            max_line_size=MAX_HEAD_LINE,
            max_field_size=MAX_HEAD_LINE,
            max_headers=MAX_HEADERS,
        )

    async def close(self) -> None:
        """Close the session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def ready(self) -> bool:
        """Whether the session is open."""
        return self._session is not None and not self._session.closed

    async def send(
        self, method: str, url: str, headers: Headers, body: bytes, written: Written | None = None
    ) -> TransportResponse:
        """Send the request and wait for the response head."""
        if self._session is None:
            raise UpstreamError("The upstream client is not started.")
        data = None if not body else body if written is None else WrittenBody(body, written)
        try:
            response = await self._session.request(
                method,
                # encoded=True: the target goes byte for byte as checked, never re-quoted.
                URL(url, encoded=True),
                headers=[(k.decode("ascii"), header_text(v)) for k, v in headers],
                data=data,
                allow_redirects=False,
            )
        except TimeoutError as exc:
            raise UpstreamTimeout("The upstream did not answer in time.") from exc
        except aiohttp.ClientResponseError as exc:
            # The response head broke the protocol or a bound (line length, header count).
            raise UpstreamError("The upstream sent an invalid or oversized response head.") from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            where = URL(url, encoded=True).host_port_subcomponent or "?"
            raise UpstreamError(f"Cannot reach the upstream {where}: {why(exc)}.") from exc
        if written is not None and data is None:
            written()  # no body to carry the call: the head's answer shows the request went
        return AiohttpResponse(response)


def why(exc: BaseException) -> str:
    """Why a connection failed, in words (never the exception's text: it may hold the URL)."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "name resolution failed"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "its TLS certificate is not trusted"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the TLS handshake failed"
    if isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        return "the HTTP proxy refused or failed the connection"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the connection was closed before an answer"
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return type(exc).__name__
