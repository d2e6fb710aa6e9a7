"""``Transport`` over pyreqwest, Rust's reqwest and hyper (``upstream.client: reqwest``, adr/0085).

Configured for a proxy: no decompression, no redirects, no Referer, header names sent as given
(lower-case) rather than title-cased, and a streamed body handed on as it arrives
(``streamed_read_buffer_limit`` of 1: with the default 64 KiB, pyreqwest holds the response
head back until that much body has arrived, which would buffer SSE). hyper bounds the response
head (about 400 KiB, 100 headers). Limits of this transport, kept for the record in adr/0085:
the URL goes through a WHATWG parser (a query's ``'`` is sent as ``%27``), reqwest adds
``Accept: */*`` and a ``User-Agent`` when the client sent none, and header values are text
(non-UTF-8 bytes are read as latin-1 and sent as UTF-8).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.transport import Headers, TransportConfig, TransportResponse, tls_pem
from proxy.transport_aiohttp import header_text

if TYPE_CHECKING:
    from pyreqwest.client import Client
    from pyreqwest.request import StreamRequest
    from pyreqwest.response import Response

# Hand each chunk on as it arrives (see the module docstring).
READ_BUFFER_LIMIT = 1


def _timeout_error(exc: BaseException) -> bool:
    from pyreqwest.exceptions import ConnectTimeoutError, PoolTimeoutError

    return isinstance(exc, ConnectTimeoutError | PoolTimeoutError)


class ReqwestResponse:
    """``TransportResponse`` over a streamed pyreqwest response."""

    __slots__ = ("_request", "_response", "raw_headers", "status")

    def __init__(self, request: StreamRequest, response: Response) -> None:
        self._request: StreamRequest | None = request
        self._response: Response | None = response
        self.status = response.status
        self.raw_headers: Sequence[tuple[bytes, bytes]] = [
            (name.encode("latin-1"), value.encode("utf-8"))
            for name, value in response.headers.items()
        ]

    async def chunk(self) -> bytes:
        """The next body bytes as they arrive, ``b""`` at the end."""
        from pyreqwest.exceptions import PyreqwestError

        if self._response is None:
            return b""
        try:
            data = await self._response.body_reader.read_chunk()
        except PyreqwestError as exc:
            raise UpstreamError(f"The upstream connection broke: {type(exc).__name__}.") from exc
        return b"" if data is None else bytes(data)

    async def read(self) -> bytes:
        """The whole body."""
        parts = []
        while chunk := await self.chunk():
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Drop the response: hyper reuses a finished connection and closes an unfinished one."""
        self._response = None
        self._request = None


class ReqwestTransport:
    """``Transport`` over one pyreqwest ``Client``."""

    def __init__(self, config: TransportConfig) -> None:
        self.config = config
        self._client: Client | None = None

    async def start(self) -> None:
        """Build the client."""
        from pyreqwest.client import ClientBuilder
        from pyreqwest.proxy import ProxyBuilder

        settings = self.config.settings
        builder = (
            ClientBuilder()
            .gzip(False)
            .brotli(False)
            .zstd(False)
            .deflate(False)
            .follow_redirects(False)
            .referer(False)
            .http1_lower_case_headers()
            .max_connections(settings.pool.max_connections)
            .pool_idle_timeout(timedelta(seconds=settings.pool.keepalive_s))
            .connect_timeout(timedelta(seconds=settings.timeouts.connect))
            .pool_timeout(timedelta(seconds=settings.timeouts.connect))
            .no_proxy()
        )
        if self.config.proxy:
            builder = builder.proxy(ProxyBuilder.all(self.config.proxy))
        if settings.url.startswith("https:"):
            cas, identity = tls_pem(settings.tls)
            for ca in cas:
                builder = builder.add_root_certificate_pem(ca)
            if identity is not None:
                builder = builder.identity_pem(identity)
        self._client = builder.build()

    async def close(self) -> None:
        """Close the client."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    def ready(self) -> bool:
        """Whether the client is open."""
        return self._client is not None

    async def send(self, method: str, url: str, headers: Headers, body: bytes) -> TransportResponse:
        """Send the request and wait for the response head."""
        from pyreqwest.exceptions import PyreqwestError

        if self._client is None:
            raise UpstreamError("The upstream client is not started.")
        try:
            builder = self._client.request(method, url).headers(
                [(k.decode("ascii"), header_text(v)) for k, v in headers]
            )
            if body:
                builder = builder.body_bytes(body)
            request = builder.streamed_read_buffer_limit(READ_BUFFER_LIMIT).build_streamed()
            response = await request.__aenter__()
        except PyreqwestError as exc:
            if _timeout_error(exc):
                raise UpstreamTimeout("The upstream did not answer in time.") from exc
            raise UpstreamError(f"Cannot reach the upstream: {type(exc).__name__}.") from exc
        except ValueError as exc:
            raise UpstreamError(f"Cannot send the request upstream: {exc}.") from exc
        return ReqwestResponse(request, response)
