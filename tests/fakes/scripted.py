"""Scripted servers over real sockets: an upstream answering byte for byte, and a forward proxy.

``serving(handler)`` runs an asyncio server whose ``handler`` reads requests and writes exactly
the bytes a test wants (framing, resets, endless heads), so transports are exercised as on the
wire. ``forward_proxy()`` is a tiny HTTP proxy: ``CONNECT host:port`` tunnels (what an https
upstream goes through), any other request is passed to the host of its absolute-form target.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]
OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


class Server:
    """A scripted upstream: ``handler`` serves each accepted connection."""

    def __init__(self, handler: Handler, scheme: str = "http") -> None:
        self.handler = handler
        self.scheme = scheme
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.closed = asyncio.Event()
        self.port = 0

    @property
    def origin(self) -> str:
        """``scheme://127.0.0.1:port`` (``localhost`` for TLS: the test certificates name it)."""
        host = "localhost" if self.scheme == "https" else "127.0.0.1"
        return f"{self.scheme}://{host}:{self.port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
            self.closed.set()

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
        """One request (head, body), or ``None`` when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        self.requests.append((head, body))
        return head, body


@asynccontextmanager
async def serving(
    handler: Handler, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[Server]:
    """Run a scripted server on a free local port for the block."""
    server = Server(handler, "https" if ssl_context else "http")
    srv = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=ssl_context)
    server.port = srv.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        srv.close()


async def keep_alive_json(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> None:
    """Answer every request on the connection with a small JSON body ``{"n": <count>}``."""
    while await server.read_request(reader) is not None:
        body = b'{"n": %d}' % len(server.requests)
        writer.write(OK_HEAD + b"content-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()


def replying(
    *parts: bytes, keep_alive: bool = False, hold: float = 0.0, abort: bool = False
) -> Handler:
    """A handler answering a request with ``parts`` written in turn.

    ``keep_alive``: every request on the connection gets the same answer. Otherwise one request
    is answered, the connection is held ``hold`` seconds, then closed, or reset if ``abort``.
    """

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await s.read_request(reader) is not None:
            for part in parts:
                writer.write(part)
                await writer.drain()
            if not keep_alive:
                break
        await asyncio.sleep(hold)
        if abort:
            writer.transport.abort()

    return handler


def trickling(head: bytes, piece: bytes, count: int, gap: float) -> Handler:
    """A handler answering one request with ``head``, then ``count`` pieces ``gap`` s apart."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(head)
        for _ in range(count):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(gap)

    return handler


class EndlessHead:
    """A hostile upstream: a response head of ``limit`` bytes (lines of ``line`` bytes each, or
    one line if ``line`` is 0), counting what it managed to write before the client hung up."""

    def __init__(self, limit: int, line: int = 0) -> None:
        self.limit = limit
        self.line = line
        self.written = 0

    async def __call__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        piece = b"x-filler: " + b"a" * self.line + b"\r\n" if self.line else b"a" * 65536
        if not self.line:
            writer.write(b"x-filler: ")
        while self.written < self.limit:
            writer.write(piece)
            self.written += len(piece)
            await writer.drain()
        writer.write(b"\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()


@dataclass
class ForwardProxy:
    """What the forward proxy saw: the first line of each request it was asked to carry."""

    port: int = 0
    lines: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@asynccontextmanager
async def forward_proxy() -> AsyncIterator[ForwardProxy]:
    """A forward proxy on a free local port (one request or tunnel per connection)."""
    proxy = ForwardProxy()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0]
        proxy.lines.append(line)
        method, target, _ = line.split(b" ", 2)
        if method == b"CONNECT":
            host, _, port = target.decode().rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            parts = urlsplit(target.decode())
            up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
            up_writer.write(head)  # absolute-form is valid for an origin server too
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    proxy.port = srv.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        srv.close()
