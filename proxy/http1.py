"""A lean HTTP/1.1 client connection on asyncio protocols with httptools' response parser.

Why not aiohttp: at 50 concurrent requests aiohttp's request building, header handling and
stream machinery cost more CPU per proxied request than the rest of the proxy (ADR-0008). The
proxy only needs one origin, bytes in and bytes out, so a connection here is a protocol that
writes one pre-encoded request and hands the response body on as the socket delivers it:

- framing by Content-Length, chunked, or (without either) the end of the connection;
- body bytes are buffered only until the reader takes them; reading from the socket pauses
  above ``HIGH_WATER`` unread bytes (a slow client slows the upstream, memory stays bounded);
- a connection goes back to the pool only when its response was read to the end and both
  sides allow keep-alive (HEAD answers and anything unusual close it instead);
- waits use one timer per wait (``loop.call_at``), not a cancel scope, and none at all when
  the bytes are already there (the common case for a non-streamed answer).

The pool is in ``proxy/http1_pool.py``, the response object in ``proxy/http1_response.py``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import httptools

from proxy.errors import UpstreamError, UpstreamTimeout

if TYPE_CHECKING:
    from proxy.http1_pool import Http1Pool

HIGH_WATER = 256 * 1024
NO_BODY_STATUSES = frozenset({204, 304})
HEADER_TIMEOUT_MESSAGE = "The upstream did not answer in time."
BODY_TIMEOUT_MESSAGE = "The upstream stopped sending data in time."


def _wake(waiter: asyncio.Future[bool], value: bool) -> None:
    if not waiter.done():
        waiter.set_result(value)


class Http1Connection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time."""

    def __init__(self, pool: Http1Pool) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.reused = False
        self._active = False
        self._head = False
        self._received = False
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._headers_done = False
        self._complete = False
        self._keep_alive = False
        self._body: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._error: UpstreamError | None = None
        self._cause: BaseException | None = None
        self._waiter: asyncio.Future[bool] | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        # uvloop's transports do not derive from asyncio.Transport: no isinstance check.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Feed the parser; bytes outside an exchange mean a confused peer: drop it."""
        if not self._active or self._complete:
            self.close()
            return
        self._received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"The upstream sent invalid HTTP: {exc}."), exc)
            self.close()
            return
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        if self._waiter is not None:
            _wake(self._waiter, True)

    def eof_received(self) -> bool | None:
        """Half-close from the upstream: close our side too (HTTP/1.1 has no use for it)."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Finish a read-until-close body, or fail the exchange in progress."""
        self.closed = True
        self.pool.forget(self)
        if self._active and not self._complete and self._error is None:
            if self._headers_done and self._until_close():
                self._complete = True
            else:
                self._fail(self._broken(exc), exc)
        if self._waiter is not None:
            _wake(self._waiter, True)

    # -- httptools callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        """Collect one response header (httptools hands over complete names and values).

        Trailer fields of a chunked body arrive here too, after the headers: dropped, as
        aiohttp did (the relay has sent the headers by then).
        """
        if not self._headers_done:
            self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        """Status and headers are known; a HEAD answer is complete here (no body follows)."""
        self._status = self.parser.get_status_code()
        if self._status < 200:
            return
        self._headers_done = True
        if self._head:
            self._complete = True

    def on_body(self, body: bytes) -> None:
        """Buffer body bytes until the reader takes them."""
        if self._head:
            return
        self._body.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        """End of one response; an interim 1xx answer is skipped."""
        if self._status < 200:
            self._headers = []
            return
        self._complete = True
        self._keep_alive = self.parser.should_keep_alive() and not self._head

    # -- the exchange -----------------------------------------------------------------------

    def send(self, data: bytes, body: bytes, head: bool) -> None:
        """Start an exchange: write the encoded request head and body."""
        self._active = True
        self._head = head
        self._received = False
        self._status = 0
        self._headers = []
        self._headers_done = False
        self._complete = False
        self._keep_alive = False
        self._body = []
        self._buffered = 0
        self._error = None
        self._cause = None
        assert self.transport is not None
        if len(body) < HIGH_WATER:
            self.transport.write(data + body)
        else:
            self.transport.write(data)
            self.transport.write(body)

    @property
    def usable(self) -> bool:
        """Open, and not closing (the peer may have hung up before we heard of it)."""
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    @property
    def received(self) -> bool:
        """Whether any response byte arrived for the current exchange."""
        return self._received

    async def _wait(self, deadline: float) -> bool:
        waiter: asyncio.Future[bool] = self.loop.create_future()
        self._waiter = waiter
        timer = self.loop.call_at(deadline, _wake, waiter, False)
        try:
            woken: bool = await waiter
        finally:
            timer.cancel()
            self._waiter = None
        return woken

    async def headers(self, deadline: float) -> tuple[int, list[tuple[bytes, bytes]]]:
        """Wait for the status line and headers."""
        while not self._headers_done:
            if self._error is not None:
                raise self._error from self._cause
            if self.closed:
                raise self._broken(None)
            if not await self._wait(deadline):
                raise UpstreamTimeout(HEADER_TIMEOUT_MESSAGE)
        return self._status, self._headers

    async def chunk(self, deadline: float) -> bytes:
        """The body bytes received so far (waiting for some), or ``b""`` at the end."""
        while not self._body:
            if self._error is not None:
                raise self._error from self._cause
            if self._complete:
                return b""
            if not await self._wait(deadline):
                raise UpstreamTimeout(BODY_TIMEOUT_MESSAGE)
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        self._body = []
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def read_all(self, deadline: float) -> bytes:
        """The whole body (usually already here: then no wait and no timer at all)."""
        if self._complete and self._error is None:
            body = self._body
            self._body = []
            return body[0] if len(body) == 1 else b"".join(body)
        parts = []
        while chunk := await self.chunk(deadline):
            parts.append(chunk)
        return b"".join(parts)

    def finish(self) -> None:
        """End the exchange: back to the pool if fully read and reusable, else close."""
        self._active = False
        self._body = []
        if self._complete and self._keep_alive and self._error is None and self.usable:
            if self._paused and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            self.pool.release(self)
        else:
            self.close()

    def close(self) -> None:
        """Close the socket (the pool forgets the connection in ``connection_lost``)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        if not self.closed:
            self.closed = True
            self.pool.forget(self)

    # -- helpers ----------------------------------------------------------------------------

    def _fail(self, error: UpstreamError, cause: BaseException | None) -> None:
        if self._error is None:
            self._error = error
            self._cause = cause

    def _broken(self, exc: BaseException | None) -> UpstreamError:
        kind = type(exc).__name__ if exc is not None else "ServerDisconnected"
        if self._headers_done:
            return UpstreamError(f"The upstream connection broke: {kind}.")
        return UpstreamError(f"Cannot reach the upstream: {kind}.")

    def _until_close(self) -> bool:
        """True when the body is framed by the end of the connection (no length, not chunked)."""
        if self._status in NO_BODY_STATUSES:
            return True
        for name, value in self._headers:
            lower = name.lower()
            if lower == b"content-length":
                return False
            if lower == b"transfer-encoding" and b"chunked" in value.lower():
                return False
        return True
