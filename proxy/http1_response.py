"""The response object of the lean HTTP/1.1 client (``proxy/http1.py``).

It implements ``proxy.upstream.UpstreamResponse``: status and headers at once, then the body
through the connection, with the ``idle`` and ``total`` timeouts applied per wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.http1 import Http1Connection


class Http1Response:
    """An open response: status and headers now, the body as it arrives."""

    __slots__ = ("_conn", "_deadline", "_idle", "is_event_stream", "raw_headers", "status")

    def __init__(
        self,
        conn: Http1Connection,
        status: int,
        headers: list[tuple[bytes, bytes]],
        idle: float,
        deadline: float,
    ) -> None:
        self._conn = conn
        self._idle = idle
        self._deadline = deadline
        self.status = status
        self.raw_headers = headers
        self.is_event_stream = False
        for name, value in headers:
            if name.lower() == b"content-type":
                self.is_event_stream = value.startswith(b"text/event-stream")
                break

    def raw_headers_get(self, name: bytes) -> bytes | None:
        """The first raw header value named ``name`` (lower-case), or ``None``."""
        for key, value in self.raw_headers:
            if key.lower() == name:
                return value
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield body bytes as they arrive; ``idle`` bounds each wait, ``total`` all of them."""
        conn = self._conn
        loop = conn.loop
        idle = self._idle
        deadline = self._deadline
        while True:
            chunk = await conn.chunk(min(loop.time() + idle, deadline))
            if not chunk:
                return
            yield chunk

    async def read(self) -> bytes:
        """The whole body; ``idle`` (capped by ``total``) bounds the whole read."""
        conn = self._conn
        return await conn.read_all(min(conn.loop.time() + self._idle, self._deadline))

    def close(self) -> None:
        """Release the connection; an unfinished body closes it instead of reusing it."""
        self._conn.finish()
