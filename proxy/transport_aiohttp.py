"""``Transport`` over aiohttp's client (``upstream.client: aiohttp``, the default; adr/0085).

One ``ClientSession`` per process: no cookie jar, no automatic decompression, none of aiohttp's
default headers, no redirects, response heads bounded by ``MAX_HEAD_LINE``/``MAX_HEADERS``. The
proxy comes from ``TransportConfig.proxy`` (``proxy.transport.env_proxy``), not ``trust_env``.

A request goes through the session's connector, not ``ClientSession.request`` (adr/0178):
``exchange`` does the part of ``request`` memproxy uses (one pooled connection, the request,
the response head, one resend of an idempotent request whose connection broke) and skips what it
never uses (redirects, cookies, auth, traces, middlewares, per-request timeouts and headers
merged three times), ~20 us of Python a request warm and more right after the memory stage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client import IDEMPOTENT_METHODS
from aiohttp.client_reqrep import ClientRequest
from aiohttp.helpers import EMPTY_BODY_METHODS, TimerNoop
from aiohttp.payload import BytesPayload
from multidict import CIMultiDict
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
# The same, in the form a request checks, built once instead of once a request.
SKIPPED: CIMultiDict[None] = CIMultiDict((name, None) for name in sorted(SKIP_AUTO_HEADERS))
DNS_CACHE_S = 300
# aiohttp's defaults, pinned: ``exchange`` passes them where ``ClientSession.request`` would.
READ_BUFSIZE = 2**16
TIMEOUT_CEIL_S = 5.0
# A request's timer: the session has no total timeout (``proxy/upstream.py`` applies them).
NO_TIMER = TimerNoop()
SHUTTING_DOWN = "The upstream client is closed: memproxy is shutting down."


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


class PassThroughRequest(ClientRequest):
    """aiohttp's request with its automatic headers off, skipped without a per-request merge."""

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        """Add none of aiohttp's headers; ``SKIPPED`` also keeps the body's type header off."""
        self._skip_auto_headers = SKIPPED


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
        self._connector: aiohttp.TCPConnector | None = None
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=config.settings.timeouts.connect, sock_read=None
        )
        # Parsed once (``env_proxy`` checked it), not per request as ``request`` does.
        self._proxy = URL(config.proxy) if config.proxy else None

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
            timeout_ceil_threshold=TIMEOUT_CEIL_S,
        )
        self._connector = connector
        # The session owns the connector (closing it) and is each response's session.
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=SKIP_AUTO_HEADERS,
            proxy=self.config.proxy,
            max_line_size=MAX_HEAD_LINE,
            max_field_size=MAX_HEAD_LINE,
            max_headers=MAX_HEADERS,
            read_bufsize=READ_BUFSIZE,
            request_class=PassThroughRequest,
        )

    async def close(self) -> None:
        """Close the session."""
        if self._session is not None:
            await self._session.close()
            self._session = None
            self._connector = None

    def ready(self) -> bool:
        """Whether the session is open."""
        return self._session is not None and not self._session.closed

    async def send(
        self, method: str, url: str, headers: Headers, body: bytes, written: Written | None = None
    ) -> TransportResponse:
        """Send the request and wait for the response head."""
        data = None if not body else body if written is None else WrittenBody(body, written)
        try:
            # encoded=True: the target goes byte for byte as checked, never re-quoted.
            response = await self.exchange(
                method,
                URL(url, encoded=True),
                [(k.decode("ascii"), header_text(v)) for k, v in headers],
                data,
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

    async def exchange(
        self,
        method: str,
        url: URL,
        headers: list[tuple[str, str]],
        data: bytes | BytesPayload | None,
    ) -> aiohttp.ClientResponse:
        """Send one request on a pooled connection; the response once its head is read.

        ``ClientSession.request``'s steps that memproxy uses, in its order: connect (bounded by
        ``timeouts.connect``), set the response parser's bounds, send, read the head; an
        idempotent request whose connection breaks before the head is sent once more, as aiohttp
        does (pooled or new: it does not tell them apart; a failed connect is not resent), unless
        the client is closing: a connection that breaks then is ``SHUTTING_DOWN``, never resent.
        """
        session, connector = self._session, self._connector
        if session is None or connector is None:
            raise UpstreamError("The upstream client is not started.")
        if connector.closed:
            # The lifespan is closing the session (its connections are being let go): say so,
            # rather than the connector's bare "Connector is closed" as an unreachable upstream.
            raise UpstreamError(SHUTTING_DOWN)
        method = method.upper()
        retry = method in IDEMPOTENT_METHODS
        while True:
            request = PassThroughRequest(
                method,
                url,
                headers=headers,
                data=data,
                loop=asyncio.get_running_loop(),
                proxy=self._proxy,
                timer=NO_TIMER,
                session=session,
            )
            connection = await connector.connect(request, traces=[], timeout=self._timeout)
            protocol = connection.protocol
            assert protocol is not None
            protocol.set_response_params(
                timer=NO_TIMER,
                skip_payload=method in EMPTY_BODY_METHODS,
                read_until_eof=True,
                auto_decompress=False,
                read_timeout=None,
                read_bufsize=READ_BUFSIZE,
                timeout_ceil_threshold=TIMEOUT_CEIL_S,
                max_line_size=MAX_HEAD_LINE,
                max_field_size=MAX_HEAD_LINE,
                max_headers=MAX_HEADERS,
            )
            try:
                try:
                    response = await request.send(connection)
                    try:
                        await response.start(connection)
                    except BaseException:
                        response.close()
                        raise
                except BaseException:
                    connection.close()
                    raise
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
                if connector.closed:
                    # Closing the connector closed this connection: no resend (it would open a
                    # new connection only to be refused), and no unreachable upstream either.
                    raise UpstreamError(SHUTTING_DOWN) from exc
                # Mostly a pooled connection the upstream had closed: aiohttp's own retry.
                if not retry:
                    raise
                retry = False
                await request.close()  # the body's writer has settled before it is sent again
                continue
            return response


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
