"""A keep-alive pool of lean HTTP/1.1 connections to one origin (see ``proxy/http1.py``).

- At most ``max_connections`` open or opening connections; a request beyond that waits for
  one to come back, within the ``connect`` timeout (like aiohttp's pool wait).
- Idle connections are reused newest first and closed after ``keepalive_s`` by one sweeper
  timer for the whole pool (not one timer per connection).
- https uses asyncio's TLS with certificate verification and SNI against the system CAs plus
  ``certifi``'s bundle (or an ``ssl.SSLContext`` given by the caller, e.g. a test CA).
- A request on a reused connection that the upstream closed before answering a single byte
  (it timed the idle connection out as we sent) is retried once on a fresh connection, for
  idempotent methods only: a POST may have been processed, so it fails with 502 instead.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from urllib.parse import quote, urlsplit

import certifi

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.http1 import HEADER_TIMEOUT_MESSAGE, Http1Connection
from proxy.http1_response import Http1Response

DEFAULT_PORTS = {"http": 80, "https": 443}
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
# RFC 3986 pchar and query characters, plus "%" (escapes the client already made stay as is).
TARGET_SAFE = "/?#[]@!$&'()*+,;=:-._~%"


def default_ssl_context() -> ssl.SSLContext:
    """Verifying TLS context: system CAs plus certifi's (slim containers often lack the former)."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


class Http1Pool:
    """Pooled HTTP/1.1 client for one origin (``scheme://host:port``)."""

    def __init__(
        self,
        origin: str,
        *,
        max_connections: int,
        keepalive_s: float,
        connect_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(origin)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise UpstreamError(f"Unsupported upstream URL {origin!r}.")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or DEFAULT_PORTS[parts.scheme]
        default = self.port == DEFAULT_PORTS[parts.scheme]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default else f"{host}:{self.port}"
        ascii_host = self.host_header.isascii()
        self._host = self.host_header.encode("ascii" if ascii_host else "idna")
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self.connect_timeout = connect_timeout
        self.ssl: ssl.SSLContext | None = None
        if self.scheme == "https":
            self.ssl = ssl_context or default_ssl_context()
        self._idle: list[Http1Connection] = []
        self._open: set[Http1Connection] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def size(self) -> int:
        """Open (or opening) connections."""
        return len(self._open)

    @property
    def idle(self) -> int:
        """Connections waiting in the pool for reuse."""
        return len(self._idle)

    def encode(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        """The request head on the wire (Host and Content-Length are ours)."""
        if not target.isascii() or " " in target:
            # ASGI paths arrive percent-decoded: re-quote what may not go on a request line.
            target = quote(target, safe=TARGET_SAFE)
        parts = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode(), target.encode(), self._host)]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        if body or method in BODY_METHODS:
            parts.append(b"content-length: %d\r\n" % len(body))
        parts.append(b"\r\n")
        return b"".join(parts)

    async def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        header_deadline: float,
        idle: float,
        deadline: float,
    ) -> Http1Response:
        """Send one request; return once the response headers are in."""
        data = self.encode(method, target, headers, body)
        fresh = False
        while True:
            conn = await self._acquire(fresh, header_deadline)
            conn.send(data, body, method == "HEAD")
            try:
                status, raw = await conn.headers(header_deadline)
            except UpstreamTimeout:
                conn.close()
                raise
            except UpstreamError:
                conn.close()
                retry = conn.reused and not conn.received and method in IDEMPOTENT_METHODS
                if retry and not fresh:
                    fresh = True
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            return Http1Response(conn, status, raw, idle, deadline)

    async def _acquire(self, fresh: bool, header_deadline: float) -> Http1Connection:
        loop = asyncio.get_running_loop()
        deadline = min(loop.time() + self.connect_timeout, header_deadline)
        while True:
            if self._closed:
                raise UpstreamError("The upstream client is closed.")
            now = loop.time()
            while self._idle and not fresh:
                conn = self._idle.pop()
                if not conn.usable or now - conn.idle_since >= self.keepalive_s:
                    conn.close()
                    continue
                conn.reused = True
                return conn
            if len(self._open) < self.max_connections:
                return await self._connect(deadline)
            if fresh and self._idle:
                self._idle.pop(0).close()
                continue
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException as exc:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    # Woken as we time out or are cancelled: hand the free slot on.
                    self._wake_one()
                if isinstance(exc, TimeoutError):
                    raise UpstreamTimeout("No upstream connection became free in time.") from exc
                raise

    async def _connect(self, deadline: float) -> Http1Connection:
        loop = asyncio.get_running_loop()
        conn = Http1Connection(self)
        self._open.add(conn)
        try:
            async with asyncio.timeout_at(deadline):
                await loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                )
        except TimeoutError as exc:
            conn.close()
            raise UpstreamTimeout(HEADER_TIMEOUT_MESSAGE) from exc
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            raise UpstreamError(f"Cannot reach the upstream: {type(exc).__name__}.") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def release(self, conn: Http1Connection) -> None:
        """Take a fully read keep-alive connection back."""
        if self._closed:
            conn.close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        self._idle.append(conn)
        if self._sweeper is None:
            self._schedule_sweep(self.keepalive_s)
        self._wake_one()

    def forget(self, conn: Http1Connection) -> None:
        """A connection closed: free its slot for a waiting request."""
        if conn in self._open:
            self._open.discard(conn)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _schedule_sweep(self, delay: float) -> None:
        self._sweeper = asyncio.get_running_loop().call_later(delay, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        keep = []
        for conn in self._idle:
            if conn.closed or now - conn.idle_since >= self.keepalive_s:
                conn.close()
            else:
                keep.append(conn)
        self._idle = keep
        if keep:
            oldest = min(conn.idle_since for conn in keep)
            self._schedule_sweep(max(oldest + self.keepalive_s - now, 0.01))

    async def close(self) -> None:
        """Close every connection; requests in flight fail."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._open):
            conn.close()
        self._idle = []
        # Let transports run connection_lost before the loop may go away.
        await asyncio.sleep(0)
