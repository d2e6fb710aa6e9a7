"""The lean HTTP/1.1 client (``proxy/http1*.py``) over real sockets.

Each test runs a scripted asyncio server that reads requests and answers byte for byte, so
framing, reuse, timeouts and failures are exercised exactly as on the wire.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trustme

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.http1_pool import Http1Pool
from proxy.http1_response import Http1Response

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]
OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


class Server:
    """A scripted upstream: ``handler`` serves each accepted connection."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.closed = asyncio.Event()
        self.port = 0

    @property
    def origin(self) -> str:
        """The plain-HTTP origin the pool connects to."""
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self.closed.set()

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
        """One request (head, body), or ``None`` when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
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
    server = Server(handler)
    srv = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=ssl_context)
    server.port = srv.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        srv.close()


def make_pool(origin: str, **kwargs: object) -> Http1Pool:
    options: dict[str, object] = {
        "max_connections": 10,
        "keepalive_s": 30.0,
        "connect_timeout": 2.0,
    }
    options.update(kwargs)
    return Http1Pool(origin, **options)  # type: ignore[arg-type]


async def request(
    pool: Http1Pool,
    method: str = "POST",
    target: str = "/v1/chat/completions",
    body: bytes = b"{}",
    *,
    first_byte: float = 2.0,
    idle: float = 2.0,
    total: float = 10.0,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> Http1Response:
    now = asyncio.get_running_loop().time()
    return await pool.request(
        method,
        target,
        headers if headers is not None else [(b"content-type", b"application/json")],
        body,
        header_deadline=now + first_byte,
        idle=idle,
        deadline=now + total,
    )


async def collect(response: Http1Response, into: list[bytes]) -> None:
    """Append every chunk of ``response`` to ``into`` (kept when the stream fails)."""
    async for chunk in response.chunks():
        into.append(chunk)


async def keep_alive_json(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> None:
    """Answer every request on the connection with a small JSON body."""
    while await server.read_request(reader) is not None:
        body = b'{"n": %d}' % len(server.requests)
        writer.write(OK_HEAD + b"content-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()


async def test_content_length_body_and_keep_alive_reuse() -> None:
    async with serving(keep_alive_json) as server:
        pool = make_pool(server.origin)
        for expected in (b'{"n": 1}', b'{"n": 2}', b'{"n": 3}'):
            response = await request(pool)
            assert response.status == 200
            assert not response.is_event_stream
            assert response.raw_headers_get(b"content-type") == b"application/json"
            assert await response.read() == expected
            response.close()
        assert server.connections == 1
        assert (pool.size, pool.idle) == (1, 1)
        await pool.close()


async def test_request_on_the_wire() -> None:
    async with serving(keep_alive_json) as server:
        pool = make_pool(server.origin)
        headers = [(b"authorization", b"Bearer k"), (b"x-note", b"cr\xe8me")]
        response = await request(pool, target="/v1/files?a=%20b&c", body=b"abc", headers=headers)
        await response.read()
        response.close()
        get = await request(pool, "GET", "/v1/models", b"", headers=[])
        await get.read()
        get.close()
        await pool.close()
    head, body = server.requests[0]
    assert head.startswith(b"POST /v1/files?a=%20b&c HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{server.port}\r\n".encode() in head
    assert b"authorization: Bearer k\r\n" in head
    assert b"x-note: cr\xe8me\r\n" in head
    assert b"content-length: 3\r\n" in head
    assert body == b"abc"
    assert b"content-length" not in server.requests[1][0]


async def test_chunked_stream_arrives_incrementally() -> None:
    release = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + b"9\r\ndata: 1\n\n\r\n"
        )
        await writer.drain()
        await release.wait()
        writer.write(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n")
        await writer.drain()
        await s.read_request(reader)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        assert response.is_event_stream
        chunks = response.chunks()
        assert await anext(chunks) == b"data: 1\n\n"
        release.set()
        rest = [chunk async for chunk in chunks]
        assert b"".join(rest) == b"data: 2\n\n"
        response.close()
        assert pool.idle == 1
        await pool.close()


async def test_chunked_trailers_are_dropped() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await s.read_request(reader) is not None:
            writer.write(
                OK_HEAD + b"transfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n"
                b"2\r\nok\r\n0\r\nx-checksum: abc\r\n\r\n"
            )
            await writer.drain()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        assert await response.read() == b"ok"
        assert response.raw_headers_get(b"x-checksum") is None
        response.close()
        assert pool.idle == 1
        await pool.close()


async def test_body_until_close_is_complete_and_not_reused() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        assert await response.read() == b"all of it"
        response.close()
        assert (pool.size, pool.idle) == (0, 0)
        await pool.close()


async def test_closed_before_headers_is_502() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        with pytest.raises(UpstreamError, match="Cannot reach the upstream") as caught:
            await request(pool)
        assert caught.value.status == 502
        assert pool.size == 0
        await pool.close()


async def test_connect_refused_is_502() -> None:
    async with serving(keep_alive_json) as server:
        port = server.port
    pool = make_pool(f"http://127.0.0.1:{port}")
    with pytest.raises(UpstreamError, match="Cannot reach the upstream"):
        await request(pool)
    assert pool.size == 0


async def test_reset_mid_body_raises_and_drops_the_connection() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(OK_HEAD + b"content-length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()
        writer.transport.abort()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        with pytest.raises(UpstreamError, match="connection broke") as caught:
            await response.read()
        assert type(caught.value) is UpstreamError
        response.close()
        assert pool.size == 0
        await pool.close()


async def test_stream_delivers_received_bytes_before_the_break() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        got: list[bytes] = []
        with pytest.raises(UpstreamError, match="connection broke"):
            await collect(response, got)
        assert got == [b"hello"]
        response.close()
        await pool.close()


async def test_slow_first_byte_is_a_timeout() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        await asyncio.sleep(5)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UpstreamTimeout, match="did not answer") as caught:
            await request(pool, first_byte=0.2)
        assert caught.value.status == 504
        assert loop.time() - started < 2
        assert pool.size == 0
        await pool.close()


async def test_idle_gap_in_a_stream_is_a_timeout() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool, idle=0.2)
        chunks = response.chunks()
        assert await anext(chunks) == b"abc"
        with pytest.raises(UpstreamTimeout, match="stopped sending"):
            await anext(chunks)
        response.close()
        assert pool.size == 0
        await pool.close()


async def test_total_deadline_caps_a_stream() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(50):
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool, idle=1.0, total=0.4)
        got: list[bytes] = []
        with pytest.raises(UpstreamTimeout):
            await collect(response, got)
        assert 0 < len(b"".join(got)) < 50
        response.close()
        await pool.close()


async def test_pool_exhaustion_waits_then_times_out_or_gets_the_connection() -> None:
    async with serving(keep_alive_json) as server:
        pool = make_pool(server.origin, max_connections=1, connect_timeout=0.2)
        held = await request(pool)
        with pytest.raises(UpstreamTimeout, match="No upstream connection"):
            await request(pool)
        waiting = asyncio.ensure_future(request(pool))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await held.read()
        held.close()
        second = await waiting
        assert await second.read() == b'{"n": 2}'
        second.close()
        assert server.connections == 1
        await pool.close()


async def test_unfinished_response_is_not_reused() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await s.read_request(reader) is not None:
            writer.write(OK_HEAD + b"content-length: 10\r\n\r\n12345")
            await writer.drain()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        response.close()  # the client went away before the body was complete
        assert (pool.size, pool.idle) == (0, 0)
        await asyncio.wait_for(server.closed.wait(), 2)
        await pool.close()


async def test_large_bodies_both_ways_with_a_slow_reader() -> None:
    size = 5 * 1024 * 1024

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while (got := await s.read_request(reader)) is not None:
            body = got[1][::-1]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            for i in range(0, len(body), 65536):
                writer.write(body[i : i + 65536])
                await writer.drain()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        sent = bytes(range(256)) * (size // 256)
        response = await request(pool, body=sent)
        received = bytearray()
        async for chunk in response.chunks():
            received += chunk
            await asyncio.sleep(0.001)  # a slow client: the pool pauses reading meanwhile
        assert bytes(received) == sent[::-1]
        response.close()
        again = await request(pool, body=b"ab")
        assert await again.read() == b"ba"
        again.close()
        assert server.connections == 1
        await pool.close()


async def test_complete_unread_body_is_reused_with_reading_resumed() -> None:
    size = 1024 * 1024  # over the pause threshold: reading pauses while nobody reads

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await s.read_request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            writer.write(b"z" * size)
            await writer.drain()

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        first = await request(pool)
        assert len(await anext(first.chunks())) > 0
        first.close()  # not complete yet: the connection must go
        assert pool.size == 0
        second = await request(pool)
        assert len(await second.read()) == size
        second.close()
        assert pool.idle == 1
        third = await request(pool)
        assert len(await third.read()) == size
        third.close()
        assert server.connections == 2
        await pool.close()


async def test_head_response_has_no_body_and_closes() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(OK_HEAD + b"content-length: 1234\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool, "HEAD", "/v1/models", b"", idle=0.5)
        assert response.raw_headers_get(b"content-length") == b"1234"
        assert await response.read() == b""
        response.close()
        assert pool.size == 0
        await pool.close()


async def test_interim_100_continue_is_skipped() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"content-length: 2\r\n\r\nok")
        await writer.drain()
        await s.read_request(reader)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        response = await request(pool)
        assert response.status == 200
        assert response.raw_headers_get(b"content-length") == b"2"
        assert await response.read() == b"ok"
        response.close()
        await pool.close()


async def test_invalid_http_is_502() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async with serving(handler) as server:
        pool = make_pool(server.origin)
        with pytest.raises(UpstreamError, match="invalid HTTP"):
            await request(pool)
        assert pool.size == 0
        await pool.close()


async def test_idle_connections_expire() -> None:
    async with serving(keep_alive_json) as server:
        pool = make_pool(server.origin, keepalive_s=0.1)
        response = await request(pool)
        await response.read()
        response.close()
        assert pool.idle == 1
        await asyncio.wait_for(server.closed.wait(), 2)
        assert (pool.size, pool.idle) == (0, 0)
        response = await request(pool)
        assert await response.read() == b'{"n": 2}'
        response.close()
        assert server.connections == 2
        await pool.close()


def stale_after_first(
    answered: list[int],
) -> Handler:
    """Answer one request per connection; on a reused one, read the request and hang up."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(OK_HEAD + b"content-length: 2\r\n\r\nok")
        await writer.drain()
        answered.append(1)
        await s.read_request(reader)  # the server timed this connection out meanwhile

    return handler


@pytest.mark.parametrize(("method", "retried"), [("GET", True), ("POST", False)])
async def test_stale_reused_connection_retries_only_idempotent(method: str, retried: bool) -> None:
    answered: list[int] = []
    async with serving(stale_after_first(answered)) as server:
        pool = make_pool(server.origin)
        first = await request(pool, method)
        await first.read()
        first.close()
        if retried:
            second = await request(pool, method)
            assert await second.read() == b"ok"
            second.close()
            assert server.connections == 2
        else:
            with pytest.raises(UpstreamError, match="Cannot reach"):
                await request(pool, method)
            assert server.connections == 1
        await pool.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_tls(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


def client_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_https_with_a_trusted_ca_and_sni(ca: trustme.CA) -> None:
    seen_sni: list[str | None] = []
    context = server_tls(ca, "localhost")
    context.sni_callback = lambda sock, name, ctx: seen_sni.append(name)  # type: ignore[assignment, misc, func-returns-value]
    async with serving(keep_alive_json, context) as server:
        pool = make_pool(f"https://localhost:{server.port}", ssl_context=client_tls(ca))
        for _ in range(2):
            response = await request(pool)
            assert response.status == 200
            assert await response.read()
            response.close()
        assert server.connections == 1
        assert seen_sni == ["localhost"]
        assert f"host: localhost:{server.port}\r\n".encode() in server.requests[0][0]
        await pool.close()


async def test_https_rejects_an_unknown_ca(ca: trustme.CA) -> None:
    async with serving(keep_alive_json, server_tls(ca, "localhost")) as server:
        pool = make_pool(f"https://localhost:{server.port}")  # system + certifi CAs only
        with pytest.raises(UpstreamError, match="Cannot reach the upstream") as caught:
            await request(pool)
        assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
        await pool.close()


async def test_https_rejects_a_certificate_for_another_host(ca: trustme.CA) -> None:
    async with serving(keep_alive_json, server_tls(ca, "api.example.org")) as server:
        pool = make_pool(f"https://localhost:{server.port}", ssl_context=client_tls(ca))
        with pytest.raises(UpstreamError, match="Cannot reach the upstream") as caught:
            await request(pool)
        assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
        await pool.close()


@pytest.mark.parametrize(
    ("origin", "host_header"),
    [
        ("https://api.openai.com", "api.openai.com"),
        ("http://h:80", "h"),
        ("http://h:8080", "h:8080"),
        ("http://[::1]:9", "[::1]:9"),
    ],
)
def test_host_header(origin: str, host_header: str) -> None:
    pool = Http1Pool(origin, max_connections=1, keepalive_s=1, connect_timeout=1)
    assert pool.host_header == host_header
    assert pool.encode("GET", "/", [], b"").startswith(
        f"GET / HTTP/1.1\r\nhost: {host_header}\r\n".encode()
    )


@pytest.mark.parametrize(
    ("target", "on_the_wire"),
    [
        ("/v1/files?a=%20b&c=d", b"/v1/files?a=%20b&c=d"),
        ("/v1/files/my file", b"/v1/files/my%20file"),
        ("/v1/files/caf\u00e9", b"/v1/files/caf%C3%A9"),
    ],
)
def test_request_target_is_sent_as_is_or_quoted(target: str, on_the_wire: bytes) -> None:
    pool = Http1Pool("http://h", max_connections=1, keepalive_s=1, connect_timeout=1)
    assert pool.encode("GET", target, [], b"").startswith(b"GET " + on_the_wire + b" HTTP/1.1")


def test_unsupported_scheme_is_refused() -> None:
    with pytest.raises(UpstreamError, match="Unsupported upstream URL"):
        Http1Pool("ftp://h", max_connections=1, keepalive_s=1, connect_timeout=1)
