"""The one contract every upstream transport passes (run against each of ``TRANSPORTS``).

Each test drives ``UpstreamClient`` with one transport against a scripted server over real
sockets (``tests/fakes/scripted.py``), so framing, reuse, timeouts, failures, hygiene (control
bytes, response head bounds), proxies from the environment and TLS with client certificates are
exercised exactly as on the wire, the same way for every implementation.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trustme

from proxy.errors import ConfigError, UpstreamError, UpstreamTimeout
from proxy.settings import (
    PoolSettings,
    TimeoutSettings,
    UpstreamSettings,
    UpstreamTlsSettings,
    replace,
)
from proxy.transport import bypassed, env_proxy, tls_context
from proxy.upstream import TRANSPORTS, UpstreamClient, UpstreamResponse
from tests.fakes.scripted import (
    OK_HEAD,
    EndlessHead,
    Handler,
    Server,
    forward_proxy,
    keep_alive_json,
    replying,
    serving,
    trickling,
)
from tests.fakes.upstream import FakeServer

CHAT_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
JSON = [(b"content-type", b"application/json")]
# Headers a library adds when the client sent none (the contract allows no others).
LIBRARY_HEADERS: dict[str, set[bytes]] = {"aiohttp": set()}
HEAD_BYTES = 25 * 1024 * 1024


@pytest.fixture(params=sorted(TRANSPORTS))
def kind(request: pytest.FixtureRequest) -> str:
    """Each transport in turn."""
    kind: str = request.param
    return kind


@asynccontextmanager
async def opened(
    origin: str,
    kind: str,
    *,
    environ: dict[str, str] | None = None,
    tls: UpstreamTlsSettings | None = None,
    max_connections: int = 10,
    keepalive_s: float = 30.0,
    **timeouts: float,
) -> AsyncIterator[UpstreamClient]:
    """A started client for ``origin + /v1`` with this transport; closed after the block."""
    options: dict[str, float] = {"connect": 2.0, "first_byte": 2.0, "idle": 2.0, "total": 10.0}
    options.update(timeouts)
    settings = UpstreamSettings(
        url=origin + "/v1",
        timeouts=TimeoutSettings(**options),
        pool=PoolSettings(max_connections=max_connections, keepalive_s=keepalive_s),
        tls=tls or UpstreamTlsSettings(),
        client=kind,  # type: ignore[arg-type]
    )
    client = UpstreamClient(settings, environ=environ or {})
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def send(
    client: UpstreamClient,
    method: str = "POST",
    target: str = "/chat/completions",
    body: bytes = b"{}",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> UpstreamResponse:
    return await client.send(
        method, client.join(target), JSON if headers is None else headers, body
    )


async def read_all(client: UpstreamClient) -> bytes:
    response = await send(client)
    try:
        return await response.read()
    finally:
        response.close()


async def collect(response: UpstreamResponse, into: list[bytes]) -> None:
    """Append every chunk of ``response`` to ``into`` (kept when the stream fails)."""
    async for chunk in response.chunks():
        into.append(chunk)


# --- relaying ------------------------------------------------------------------------------


async def test_relays_bodies_and_streams_from_the_fake(fake: FakeServer, kind: str) -> None:
    async with opened(fake.url.removesuffix("/v1"), kind) as client:
        headers = [*JSON, (b"authorization", b"Bearer sk-1")]
        response = await send(client, body=CHAT_BODY, headers=headers)
        assert (response.status, response.is_event_stream) == (200, False)
        assert b"Hello from the fake upstream" in await response.read()
        response.close()
        response = await send(client, body=CHAT_BODY[:-1] + b', "stream": true}', headers=headers)
        assert response.is_event_stream
        raw = b"".join([chunk async for chunk in response.chunks()])
        response.close()
        assert raw.endswith(b"data: [DONE]\n\n")
        assert await client.ready()
    assert not await client.ready()
    assert fake.fake.requests[0].headers["authorization"] == "Bearer sk-1"


async def test_content_length_body_and_keep_alive_reuse(kind: str) -> None:
    async with serving(keep_alive_json) as server, opened(server.origin, kind) as client:
        for expected in (b'{"n": 1}', b'{"n": 2}', b'{"n": 3}'):
            response = await send(client)
            assert response.status == 200
            assert response.raw_headers_get(b"content-type") == b"application/json"
            assert await response.read() == expected
            response.close()
    assert server.connections == 1


async def test_request_goes_on_the_wire_byte_for_byte(kind: str) -> None:
    async with serving(keep_alive_json) as server, opened(server.origin, kind) as client:
        headers = [(b"authorization", b"Bearer k"), (b"x-note", b"caf\xc3\xa9"), *JSON]
        target = "/files/a%2Fb%3Fc//d.e?x=%20y&z=%0d%0a&w=[1]"
        response = await send(client, target=target, body=b"abc", headers=headers)
        await response.read()
        response.close()
        get = await send(client, "GET", "/models", b"", headers=[])
        await get.read()
        get.close()
    head, body = server.requests[0]
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /v1/files/a%2fb%3fc//d.e?x=%20y&z=%0d%0a&w=[1] http/1.1"
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"/v1" + target.encode()
    assert f"host: 127.0.0.1:{server.port}".encode() in lines
    assert b"authorization: bearer k" in lines
    assert b"x-note: caf\xc3\xa9" in lines
    assert b"content-length: 3" in lines
    assert body == b"abc"
    sent = {line.split(b":", 1)[0] for line in server.requests[1][0].lower().split(b"\r\n")[1:]}
    assert sent - {b"", b"host"} <= LIBRARY_HEADERS[kind]


async def test_written_is_told_once_per_request_that_went_out(kind: str) -> None:
    """``written`` (the relay's start of work that needs no answer) comes once per request
    handed to the connection, before its answer, changes nothing on the wire, and never comes
    for a request that could not go."""
    told: list[int] = []
    async with serving(keep_alive_json) as server, opened(server.origin, kind) as client:
        for method, body in (("POST", b"abc"), ("GET", b"")):
            response = await client.send(
                method, client.join("/chat/completions"), [], body, lambda: told.append(1)
            )
            assert len(told) == len(server.requests)  # told before the answer reached us
            await response.read()
            response.close()
    assert told == [1, 1]
    head, body = server.requests[0]
    assert body == b"abc"
    sent = {line.split(b":", 1)[0] for line in head.lower().split(b"\r\n")[1:]}
    assert sent - {b"", b"host", b"content-length"} <= LIBRARY_HEADERS[kind]
    async with opened(server.origin, kind) as client:  # the server is gone: refused
        with pytest.raises(UpstreamError):
            await client.send("POST", client.join("/x"), [], b"abc", lambda: told.append(1))
    assert told == [1, 1]


async def test_compressed_body_passes_untouched(kind: str) -> None:
    packed = gzip.compress(b'{"object": "list"}')

    handler = replying(
        OK_HEAD + b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(packed),
        packed,
        keep_alive=True,
    )

    async with serving(handler) as server, opened(server.origin, kind) as client:
        headers = [(b"accept-encoding", b"gzip")]
        response = await send(client, "GET", "/models", b"", headers=headers)
        assert response.raw_headers_get(b"content-encoding") == b"gzip"
        assert await response.read() == packed
        response.close()
    assert b"accept-encoding: gzip" in server.requests[0][0].lower()


async def test_chunked_stream_arrives_incrementally(kind: str) -> None:
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

    async with serving(handler) as server, opened(server.origin, kind) as client:
        # The head and the first event arrive while the upstream holds back the rest: no
        # buffering anywhere (a transport that waits for more would time out here).
        response = await asyncio.wait_for(send(client), 1.5)
        assert response.is_event_stream
        chunks = response.chunks()
        assert await asyncio.wait_for(anext(chunks), 1.5) == b"data: 1\n\n"
        release.set()
        assert b"".join([chunk async for chunk in chunks]) == b"data: 2\n\n"
        response.close()


async def test_chunked_trailers_are_dropped(kind: str) -> None:
    handler = replying(
        OK_HEAD + b"transfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n"
        b"2\r\nok\r\n0\r\nx-checksum: abc\r\n\r\n",
        keep_alive=True,
    )

    async with serving(handler) as server, opened(server.origin, kind) as client:
        response = await send(client)
        assert await response.read() == b"ok"
        assert response.raw_headers_get(b"x-checksum") is None
        response.close()
        again = await send(client)
        assert await again.read() == b"ok"
        again.close()
    assert server.connections == 1


async def test_body_until_close_is_complete(kind: str) -> None:
    handler = replying(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")

    async with serving(handler) as server, opened(server.origin, kind) as client:
        response = await send(client)
        assert await response.read() == b"all of it"
        response.close()


async def test_head_response_has_no_body(kind: str) -> None:
    handler = replying(OK_HEAD + b"content-length: 1234\r\n\r\n", hold=5)

    async with serving(handler) as server, opened(server.origin, kind, idle=0.5) as client:
        response = await send(client, "HEAD", "/models", b"", headers=[])
        assert response.raw_headers_get(b"content-length") == b"1234"
        assert await response.read() == b""
        response.close()


async def test_interim_100_continue_is_skipped(kind: str) -> None:
    handler = replying(
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK_HEAD + b"content-length: 2\r\n\r\nok", hold=5
    )

    async with serving(handler) as server, opened(server.origin, kind) as client:
        response = await send(client)
        assert response.status == 200
        assert await response.read() == b"ok"
        response.close()


async def test_large_bodies_both_ways_with_a_slow_reader(kind: str) -> None:
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

    async with serving(handler) as server, opened(server.origin, kind) as client:
        sent = bytes(range(256)) * (size // 256)
        response = await send(client, body=sent)
        received = bytearray()
        async for chunk in response.chunks():
            received += chunk
            await asyncio.sleep(0.001)  # a slow client
        assert bytes(received) == sent[::-1]
        response.close()
        again = await send(client, body=b"ab")
        assert await again.read() == b"ba"
        again.close()


# --- failures and timeouts -----------------------------------------------------------------


async def test_an_unknown_host_is_502_naming_it_and_the_reason(kind: str) -> None:
    # .invalid never resolves (RFC 6761); the user information is neither sent nor shown.
    async with opened("http://user:s3cret@memproxy-test.invalid", kind) as client:
        with pytest.raises(UpstreamError) as caught:
            await send(client)
    assert caught.value.message == (
        "Cannot reach the upstream memproxy-test.invalid: name resolution failed."
    )


async def test_connect_refused_is_502(kind: str) -> None:
    async with serving(keep_alive_json) as server:
        origin = server.origin
    async with opened(origin, kind) as client:
        with pytest.raises(UpstreamError, match="Cannot reach the upstream") as caught:
            await send(client)
    assert type(caught.value) is UpstreamError
    assert caught.value.status == 502
    assert caught.value.message == (
        f"Cannot reach the upstream {origin.removeprefix('http://')}: connection refused."
    )


async def test_a_request_while_the_client_closes_is_502_saying_so(kind: str) -> None:
    async with serving(keep_alive_json) as server:
        client = UpstreamClient(
            UpstreamSettings(url=server.origin + "/v1", client=kind),  # type: ignore[arg-type]
            environ={},
        )
        await client.start()
        assert await read_all(client)  # a pooled connection: closing waits for it to go
        closing = asyncio.create_task(client.close())
        await asyncio.sleep(0)
        assert not closing.done()
        with pytest.raises(UpstreamError) as caught:
            await send(client)
        await closing
    assert caught.value.status == 502
    assert caught.value.message == "The upstream client is closed: memproxy is shutting down."


async def test_closed_before_headers_is_502(kind: str) -> None:
    handler = replying()

    async with serving(handler) as server, opened(server.origin, kind) as client:
        with pytest.raises(UpstreamError) as caught:
            await send(client)
    assert caught.value.status == 502


async def answered_once_then_dropped(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> None:
    """Answer a connection's first request; take its second and close unanswered (a pooled
    connection the upstream dropped as it was reused)."""
    if await server.read_request(reader) is not None:
        writer.write(OK_HEAD + b"content-length: 2\r\n\r\nok")
        await writer.drain()
        await server.read_request(reader)


@pytest.mark.parametrize(("method", "body"), [("GET", b""), ("POST", b"{}")])
async def test_only_an_idempotent_request_is_resent_on_a_dropped_pooled_connection(
    kind: str, method: str, body: bytes
) -> None:
    """As aiohttp's own client does: a GET goes again once on a new connection; a POST may
    have been acted on, so it is a 502."""
    async with (
        serving(answered_once_then_dropped) as server,
        opened(server.origin, kind) as client,
    ):
        first = await send(client, method, "/models", body)
        assert await first.read() == b"ok"
        first.close()
        if method == "GET":
            again = await send(client, method, "/models", body)
            assert await again.read() == b"ok"
            again.close()
        else:
            with pytest.raises(UpstreamError) as caught:
                await send(client, method, "/models", body)
            assert caught.value.status == 502
    assert server.connections == (2 if method == "GET" else 1)
    assert len(server.requests) == (3 if method == "GET" else 2)


def answered_once_then_held(held: asyncio.Event) -> Handler:
    """A handler answering a connection's first request and holding its second unanswered
    (``held`` set once it is in) until the client hangs up: a request in flight at shutdown."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
    ) -> None:
        if await server.read_request(reader) is not None:
            writer.write(OK_HEAD + b"content-length: 2\r\n\r\nok")
            await writer.drain()
            if await server.read_request(reader) is not None:
                held.set()
                await reader.read()

    return handler


@pytest.mark.parametrize(("method", "body"), [("GET", b""), ("POST", b"{}")])
async def test_a_request_broken_by_the_client_closing_is_502_saying_so(
    kind: str, method: str, body: bytes
) -> None:
    """Closing the client breaks a request in flight on a pooled connection: a GET is not
    resent on a new connection, and neither it nor a POST reads as an unreachable upstream."""
    held = asyncio.Event()
    async with serving(answered_once_then_held(held)) as server:
        client = UpstreamClient(
            UpstreamSettings(url=server.origin + "/v1", client=kind),  # type: ignore[arg-type]
            environ={},
        )
        await client.start()
        first = await send(client, method, "/models", body)
        assert await first.read() == b"ok"
        first.close()
        pending = asyncio.ensure_future(send(client, method, "/models", body))
        await held.wait()
        closing = asyncio.create_task(client.close())
        with pytest.raises(UpstreamError) as caught:
            await pending
        await closing
    assert caught.value.status == 502
    assert caught.value.message == "The upstream client is closed: memproxy is shutting down."
    assert server.connections == 1


async def by_path(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server
) -> None:
    """``/hang``: never answered (held until the client hangs up); ``/drop``: closed
    unanswered; anything else: a small JSON."""
    while (request := await server.read_request(reader)) is not None:
        if b" /v1/hang " in request[0]:
            await reader.read()  # until the client hangs up
        if b" /v1/drop " in request[0]:
            return
        writer.write(OK_HEAD + b"content-length: 2\r\n\r\n{}")
        await writer.drain()


async def test_failed_and_cancelled_requests_give_their_connection_back(kind: str) -> None:
    """Every way a request can end before its response is handed over (cancelled while
    connecting, sending or waiting for the head, a first-byte timeout, a connection dropped
    unanswered, resent or not) releases or closes its connection: with a pool of one, a
    request afterwards still gets a connection, and a working one."""
    async with (
        serving(by_path) as server,
        opened(server.origin, kind, max_connections=1, connect=1.0, first_byte=0.05) as client,
    ):
        for turns in range(12):
            pending = asyncio.ensure_future(send(client, body=b"x" * 300_000, target="/hang"))
            for _ in range(turns):
                await asyncio.sleep(0)
            pending.cancel()
            with pytest.raises((asyncio.CancelledError, UpstreamTimeout)):
                await pending
        for method in ("GET", "POST", "DELETE"):
            with pytest.raises(UpstreamError):
                await send(client, method, "/drop", b"{}" if method == "POST" else b"")
        with pytest.raises(UpstreamTimeout):
            await send(client, "GET", "/hang", b"")
        for _ in range(2):
            response = await send(client)  # a POST: a stale pooled connection would fail it
            assert await response.read() == b"{}"
            response.close()


async def test_invalid_http_is_502(kind: str) -> None:
    handler = replying(b"NOT HTTP AT ALL\r\n\r\n", hold=1)

    async with serving(handler) as server, opened(server.origin, kind) as client:
        with pytest.raises(UpstreamError) as caught:
            await send(client)
    assert caught.value.status == 502


async def test_reset_mid_body_raises(kind: str) -> None:
    handler = replying(OK_HEAD + b"content-length: 100\r\n\r\n" + b"x" * 10, abort=True)

    async with serving(handler) as server, opened(server.origin, kind) as client:
        response = await send(client)
        with pytest.raises(UpstreamError, match="connection broke") as caught:
            await response.read()
        assert type(caught.value) is UpstreamError
        response.close()


async def test_stream_delivers_received_bytes_before_the_break(kind: str) -> None:
    handler = replying(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
        hold=0.1,
        abort=True,
    )

    async with serving(handler) as server, opened(server.origin, kind) as client:
        response = await send(client)
        got: list[bytes] = []
        with pytest.raises(UpstreamError, match="connection broke"):
            await collect(response, got)
        assert got == [b"hello"]
        response.close()


async def test_slow_first_byte_is_a_timeout(kind: str) -> None:
    handler = replying(hold=5)

    async with serving(handler) as server, opened(server.origin, kind, first_byte=0.2) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UpstreamTimeout, match="did not answer") as caught:
            await send(client)
        assert caught.value.status == 504
        assert loop.time() - started < 2


async def test_idle_gap_in_a_stream_is_a_timeout(kind: str) -> None:
    handler = replying(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n", hold=5)

    async with serving(handler) as server, opened(server.origin, kind, idle=0.2) as client:
        response = await send(client)
        chunks = response.chunks()
        assert await anext(chunks) == b"abc"
        with pytest.raises(UpstreamTimeout, match="stopped sending"):
            await anext(chunks)
        response.close()


async def test_total_deadline_caps_a_stream(kind: str) -> None:
    handler = trickling(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n", b"1\r\nx\r\n", 50, 0.05)

    async with serving(handler) as server, opened(server.origin, kind, idle=1, total=0.5) as client:
        response = await send(client)
        got: list[bytes] = []
        with pytest.raises(UpstreamTimeout):
            await collect(response, got)
        assert 0 < len(b"".join(got)) < 50
        response.close()


async def test_unfinished_response_closes_the_upstream_connection(kind: str) -> None:
    """A client that leaves mid-body: closing the response hangs up on the upstream."""

    handler = trickling(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n", b"1\r\nx\r\n", 200, 0.02)

    async with serving(handler) as server, opened(server.origin, kind) as client:
        response = await send(client)
        assert await anext(response.chunks())
        response.close()
        await asyncio.wait_for(server.closed.wait(), 2)


async def test_pool_exhaustion_waits_then_times_out_or_gets_the_connection(kind: str) -> None:
    release = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_request(reader)
        writer.write(OK_HEAD + b"transfer-encoding: chunked\r\n\r\n4\r\nheld\r\n")
        await writer.drain()
        await release.wait()  # the first response stays unfinished until the test says so
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await keep_alive_json(reader, writer, s)

    async with (
        serving(handler) as server,
        opened(server.origin, kind, max_connections=1, connect=0.3) as client,
    ):
        held = await send(client)
        with pytest.raises(UpstreamTimeout):
            await send(client)
        waiting = asyncio.ensure_future(send(client))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        release.set()
        assert await held.read() == b"held"
        held.close()
        second = await waiting
        assert await second.read() == b'{"n": 2}'
        second.close()
    assert server.connections == 1


# --- hygiene -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "headers"),
    [
        ("/models\r\nx-injected: 1", []),
        ("/models\x00", []),
        ("/models x", []),
        ("/models", [(b"x-note", b"a\r\nx-injected: 1")]),
        ("/models", [(b"x-note", b"a\nb")]),
        ("/models", [(b"x-note", b"a\x00b")]),
        ("/models", [(b"x-note", b"a\x7fb")]),
        ("/models", [(b"x note", b"v")]),
        ("/models", [(b"x-note:", b"v")]),
        ("/models", [(b"", b"v")]),
    ],
)
async def test_control_bytes_never_reach_the_wire(
    kind: str, target: str, headers: list[tuple[bytes, bytes]]
) -> None:
    async with serving(keep_alive_json) as server, opened(server.origin, kind) as client:
        with pytest.raises(UpstreamError, match="Refused to send") as caught:
            await send(client, "GET", target, b"", headers=headers)
    assert caught.value.status == 502
    assert server.connections == 0


async def test_tab_in_a_header_value_is_allowed(kind: str) -> None:
    async with serving(keep_alive_json) as server, opened(server.origin, kind) as client:
        response = await send(client, "GET", "/models", b"", headers=[(b"x-note", b"a\tb")])
        await response.read()
        response.close()
    assert b"x-note: a\tb\r\n" in server.requests[0][0]


@pytest.mark.parametrize("shape", ["one line", "many lines"])
async def test_an_endless_response_head_is_a_502_and_is_not_kept(kind: str, shape: str) -> None:
    """A hostile upstream's 25 MB head: refused after a bounded read, the connection dropped."""
    handler = EndlessHead(HEAD_BYTES, line=0 if shape == "one line" else 8000)

    async with serving(handler) as server, opened(server.origin, kind) as client:
        with pytest.raises(UpstreamError) as caught:
            await send(client, "GET", "/models", b"", headers=[])
        await asyncio.wait_for(server.closed.wait(), 5)
    assert caught.value.status == 502
    # The client stopped reading and hung up long before the end: at most socket buffers' worth.
    assert handler.written < HEAD_BYTES // 2


# --- proxies from the environment ----------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "url", "expected"),
    [
        ({}, "https://api.example.org/v1", None),
        ({"HTTPS_PROXY": "http://p:3128"}, "https://api.example.org/v1", "http://p:3128"),
        ({"HTTPS_PROXY": "http://p:3128"}, "http://api.example.org/v1", None),
        ({"HTTP_PROXY": "http://p:1"}, "http://api.example.org/v1", "http://p:1"),
        (
            {"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:1"},
            "https://h/v1",
            "http://low:1",
        ),
        ({"ALL_PROXY": "http://all:1"}, "https://h/v1", "http://all:1"),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.org"}, "https://api.example.org", None),
        (
            {"HTTPS_PROXY": "http://p:1", "no_proxy": ".example.org"},
            "https://api.example.org",
            None,
        ),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, "https://h/v1", None),
        (
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "ample.org"},
            "https://example.org",
            "http://p:1",
        ),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "h:8443"}, "https://h:8443/v1", None),
        ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "h:9"}, "https://h:8443/v1", "http://p:1"),
        ({"HTTPS_PROXY": ""}, "https://h/v1", None),
    ],
)
def test_env_proxy(environ: dict[str, str], url: str, expected: str | None) -> None:
    assert env_proxy(url, environ) == expected


def test_no_proxy_matches_whole_labels_only() -> None:
    assert bypassed("api.corp.example", None, "corp.example, other")
    assert not bypassed("evilcorp.example", None, "corp.example")
    assert bypassed("127.0.0.1", 8080, "localhost,127.0.0.1")


@pytest.mark.parametrize(
    "proxy", ["http://proxy:port", "http://[::1", "http://user:s3cret@proxy:99999", "http://:8080"]
)
def test_a_malformed_proxy_is_a_config_error_at_start(kind: str, proxy: str) -> None:
    """No request could go through it: refused at start, clearly, credentials unquoted."""
    settings = UpstreamSettings(url="http://127.0.0.1:9/v1", client=kind)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="proxy") as caught:
        UpstreamClient(settings, environ={"HTTP_PROXY": proxy})
    assert "s3cret" not in caught.value.message
    assert caught.value.__suppress_context__


async def test_http_upstream_goes_through_http_proxy(kind: str) -> None:
    async with serving(keep_alive_json) as server, forward_proxy() as proxy:
        environ = {"HTTP_PROXY": proxy.url}
        async with opened(server.origin, kind, environ=environ) as client:
            response = await send(client, "GET", "/models?x=1", b"", headers=[])
            assert await response.read() == b'{"n": 1}'
            response.close()
    assert proxy.lines == [f"GET {server.origin}/v1/models?x=1 HTTP/1.1".encode()]


async def test_no_proxy_bypasses_the_proxy(kind: str) -> None:
    async with serving(keep_alive_json) as server, forward_proxy() as proxy:
        environ = {"HTTP_PROXY": proxy.url, "NO_PROXY": "localhost,127.0.0.1"}
        async with opened(server.origin, kind, environ=environ) as client:
            response = await send(client, "GET", "/models", b"", headers=[])
            assert await response.read() == b'{"n": 1}'
            response.close()
    assert proxy.lines == []
    assert server.connections == 1


# --- TLS -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def pki(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    """The CA and a client certificate it issued, as PEM files."""
    client = ca.issue_cert("memproxy-client")
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "cert.pem", "key": tmp_path / "key.pem"}
    ca.cert_pem.write_to_path(files["ca"])
    for blob in client.cert_chain_pems:
        blob.write_to_path(files["cert"], append=True)
    client.private_key_pem.write_to_path(files["key"])
    return {name: str(path) for name, path in files.items()}


def server_tls(ca: trustme.CA, require_client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(context)
    return context


async def test_https_with_ca_file_and_a_required_client_certificate(
    kind: str, ca: trustme.CA, pki: dict[str, str]
) -> None:
    tls = UpstreamTlsSettings(ca_file=pki["ca"], cert_file=pki["cert"], key_file=pki["key"])
    async with (
        serving(keep_alive_json, server_tls(ca, require_client_cert=True)) as server,
        opened(server.origin, kind, tls=tls) as client,
    ):
        for _ in range(2):
            response = await send(client)
            assert response.status == 200
            assert await response.read()
            response.close()
        without_cert = replace(tls, cert_file=None, key_file=None)
        async with opened(server.origin, kind, tls=without_cert) as anonymous:
            # TLS 1.3 finishes the client's handshake first: the refusal may come with the head.
            with pytest.raises(UpstreamError):
                await read_all(anonymous)
    # The certificate-less handshake failed before a connection was handed to the server.
    assert (server.connections, len(server.requests)) == (1, 2)
    assert f"host: localhost:{server.port}".encode() in server.requests[0][0].lower()


async def test_https_rejects_an_unknown_ca(kind: str, ca: trustme.CA) -> None:
    async with (
        serving(keep_alive_json, server_tls(ca, require_client_cert=False)) as server,
        opened(server.origin, kind) as client,
    ):
        with pytest.raises(UpstreamError, match="Cannot reach the upstream"):
            await send(client)
    assert server.requests == []


async def test_https_upstream_through_a_connect_proxy(
    kind: str, ca: trustme.CA, pki: dict[str, str]
) -> None:
    tls = UpstreamTlsSettings(ca_file=pki["ca"])
    async with (
        serving(keep_alive_json, server_tls(ca, require_client_cert=False)) as server,
        forward_proxy() as proxy,
        opened(server.origin, kind, tls=tls, environ={"HTTPS_PROXY": proxy.url}) as client,
    ):
        response = await send(client)
        assert await response.read() == b'{"n": 1}'
        response.close()
    assert proxy.lines[0].startswith(f"CONNECT localhost:{server.port} HTTP/1.1".encode())


def test_unreadable_tls_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"upstream\.tls\.ca_file"):
        tls_context(UpstreamTlsSettings(ca_file=str(tmp_path / "missing.pem")))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"upstream\.tls"):
        tls_context(UpstreamTlsSettings(cert_file=str(bad)))
