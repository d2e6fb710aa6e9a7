"""Hostile request heads over raw sockets, against the production server (``proxy/server.py``).

Every malformed, ambiguous (smuggling), oversized or too slow head gets one clean 4xx in
OpenAI's shape and a closed connection, or just a closed connection when nothing was sent;
nothing ambiguous reaches the upstream; unusual but valid requests (pipelining, ``Expect:
100-continue``, HTTP/1.0) are served; and after every case the server keeps serving (``/healthz``
answers on a fresh connection) and logs no error. Timeouts are short through ``server.http``,
so the whole suite takes seconds.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Iterator

import pytest

from proxy.app import create_app
from proxy.settings import HttpServerSettings, ServerSettings
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.raw_http import (
    connect,
    exchange,
    parse_responses,
    read_all,
    request,
)

HEAD_TIMEOUT_S = 0.5
BODY_TIMEOUT_S = 0.5
HTTP = HttpServerSettings(
    head_timeout_s=HEAD_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S, keepalive_s=0.5, drain_s=2.0
)
MAX_HEAD = HTTP.max_head_bytes
MAX_HEADERS = HTTP.max_headers
# Long enough for any answer on a loaded machine, far shorter than the dribbles below.
READ_TIMEOUT_S = 5.0
CHAT_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def lines(*parts: str) -> bytes:
    """A head from its lines (CRLF endings, blank line at the end)."""
    return ("\r\n".join(parts) + "\r\n\r\n").encode("latin-1")


@pytest.fixture(scope="module")
def server(fake_server: FakeServer) -> Iterator[ProxyServer]:
    """memproxy with the production server setup, its timeouts shortened."""
    app = create_app(proxy_settings(fake_server.url))
    with ProxyServer(app, server=ServerSettings(http=HTTP)) as proxy:
        yield proxy


@pytest.fixture
def port(server: ProxyServer, fake: FakeServer, caplog: pytest.LogCaptureFixture) -> Iterator[int]:
    """The server's port; afterwards it must still serve and have logged no error."""
    caplog.set_level(logging.INFO)
    yield server.port
    after = exchange(server.port, request("GET", "/healthz", [("Connection", "close")]))
    assert after.statuses == [200]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]


# Each is refused with one 400 in OpenAI's shape, the connection closed, nothing forwarded.
MALFORMED = {
    "garbage request line": b"GARBAGE\r\n\r\n",
    "TLS client hello": bytes.fromhex("16030102000100020003030000") + b"\x00" * 40,
    "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "unknown version": lines("GET /healthz HTTP/9.9", "Host: x"),
    "lower-case method": lines("get /healthz HTTP/1.1", "Host: x"),
    "NUL in target": lines("GET /v1/\x00 HTTP/1.1", "Host: x"),
    "non-ASCII target": lines("GET /v1/\xff HTTP/1.1", "Host: x"),
    "CONNECT authority": lines("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443"),
    "header without colon": lines("GET /healthz HTTP/1.1", "Host: x", "Nocolon"),
    "empty header name": lines("GET /healthz HTTP/1.1", "Host: x", ": v"),
    "control char in value": lines("GET /healthz HTTP/1.1", "Host: x", "X-A: a\x01b"),
    "NUL in value": lines("GET /healthz HTTP/1.1", "Host: x", "X-A: a\x00b"),
}

# Framing two parsers could read differently (request smuggling): refused, never forwarded.
POST = "POST /v1/embeddings HTTP/1.1"
SMUGGLED = b"GET /v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
SMUGGLING = {
    "Content-Length and Transfer-Encoding": lines(
        POST, "Host: x", "Content-Length: 4", "Transfer-Encoding: chunked"
    )
    + b"0\r\n\r\n"
    + SMUGGLED,
    "Transfer-Encoding and Content-Length": lines(
        POST, "Host: x", "Transfer-Encoding: chunked", "Content-Length: 40"
    )
    + b"0\r\n\r\n"
    + SMUGGLED,
    "duplicate Content-Length, different": lines(
        POST, "Host: x", "Content-Length: 2", "Content-Length: 41"
    )
    + b"{}"
    + SMUGGLED,
    "duplicate Content-Length, same": lines(
        POST, "Host: x", "Content-Length: 2", "Content-Length: 2"
    )
    + b"{}",
    "Content-Length list": lines(POST, "Host: x", "Content-Length: 2, 2") + b"{}",
    "negative Content-Length": lines(POST, "Host: x", "Content-Length: -1") + SMUGGLED,
    "signed Content-Length": lines(POST, "Host: x", "Content-Length: +2") + b"{}",
    "Content-Length overflow": lines(POST, "Host: x", "Content-Length: 99999999999999999999999"),
    "space before colon": lines(POST, "Host: x", "Transfer-Encoding : chunked") + b"0\r\n\r\n",
    "chunked then identity": lines(POST, "Host: x", "Transfer-Encoding: chunked, identity")
    + b"0\r\n\r\n",
    "chunked not last": lines(POST, "Host: x", "Transfer-Encoding: chunked, gzip") + b"0\r\n\r\n",
    "unknown coding": lines(POST, "Host: x", "Transfer-Encoding: xchunked") + b"0\r\n\r\n",
    "duplicate Transfer-Encoding": lines(
        POST, "Host: x", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"
    )
    + b"0\r\n\r\n",
    "Transfer-Encoding in HTTP/1.0": lines(
        "POST /v1/embeddings HTTP/1.0", "Host: x", "Transfer-Encoding: chunked"
    )
    + b"0\r\n\r\n",
    "obs-fold": lines("GET /healthz HTTP/1.1", "Host: x", "X-A: a", " folded"),
    "obs-fold hiding Transfer-Encoding": lines(
        POST, "Host: x", "X-A: a", " Transfer-Encoding: chunked", "Content-Length: 2"
    )
    + b"{}",
    "bare LF line ends": b"GET /healthz HTTP/1.1\nHost: x\n\n",
    "bare CR line ends": b"GET /healthz HTTP/1.1\rHost: x\r\r",
    "chunk size overflow": lines(POST, "Host: x", "Transfer-Encoding: chunked")
    + b"fffffffffffffffffff\r\nabc\r\n",
    "chunk without CRLF": lines(POST, "Host: x", "Transfer-Encoding: chunked")
    + b"2\r\n{}XX0\r\n\r\n"
    + SMUGGLED,
    "NUL in chunk extension": lines(POST, "Host: x", "Transfer-Encoding: chunked")
    + b"2;\x00\r\n{}\r\n0\r\n\r\n",
}


@pytest.mark.parametrize(
    "raw", [*MALFORMED.values(), *SMUGGLING.values()], ids=[*MALFORMED, *SMUGGLING]
)
def test_malformed_or_ambiguous_head_is_refused_and_not_forwarded(
    port: int, fake: FakeServer, raw: bytes
) -> None:
    result = exchange(port, raw, timeout=READ_TIMEOUT_S)
    assert result.statuses == [400], result.data[:300]
    assert result.responses[0].error_code() == "invalid_http_request"
    assert result.responses[0].headers[b"connection"] == b"close"
    assert result.ending == "closed"
    assert list(fake.fake.requests) == []


# Odd but parseable: answered (4xx or served), never a 5xx or a hang.
ODD = {
    "HTTP/0.9 style": (b"GET /\r\n\r\n", {404}),
    "absolute-form target": (lines("GET http://evil.example/healthz HTTP/1.1", "Host: x"), {200}),
    "asterisk-form OPTIONS": (lines("OPTIONS * HTTP/1.1", "Host: x"), {404}),
    "no Host": (b"GET /healthz HTTP/1.1\r\n\r\n", {200}),
    "websocket upgrade": (
        lines(
            "GET /healthz HTTP/1.1",
            "Host: x",
            "Connection: Upgrade",
            "Upgrade: websocket",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
        ),
        {200},
    ),
    "h2c upgrade": (
        lines(
            "GET /healthz HTTP/1.1",
            "Host: x",
            "Connection: Upgrade, HTTP2-Settings",
            "Upgrade: h2c",
            "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
        ),
        {200},
    ),
}


@pytest.mark.parametrize(("raw", "allowed"), ODD.values(), ids=ODD)
def test_odd_head_is_answered(port: int, raw: bytes, allowed: set[int]) -> None:
    result = exchange(port, raw, timeout=READ_TIMEOUT_S)
    assert len(result.statuses) == 1
    assert result.statuses[0] in allowed
    assert result.ending == "closed"  # at once, or when the keep-alive idle timeout ends


@pytest.mark.parametrize("size", [1024 * 1024, 8 * 1024 * 1024], ids=["1MiB", "8MiB"])
def test_oversized_header_is_refused_with_431(port: int, size: int) -> None:
    raw = lines("GET /healthz HTTP/1.1", "Host: x", "X-Big: " + "a" * size)
    result = exchange(port, raw, timeout=READ_TIMEOUT_S)
    assert result.statuses == [431]
    assert result.responses[0].error_code() == "request_header_fields_too_large"
    assert result.ending == "closed"  # the rest was read and dropped: no reset


def test_unfinished_oversized_head_is_refused_before_it_ends(port: int) -> None:
    """Refused once over the limit, without waiting for (or buffering) the rest."""
    with connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (4 * MAX_HEAD))
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert [r.status for r in parse_responses(data)] == [431]
    assert ending == "closed"


@pytest.mark.parametrize(
    ("count", "status"),
    [(MAX_HEADERS - 1, 200), (MAX_HEADERS, 431), (50_000, 431)],
    ids=["at-limit", "one-over", "50k"],
)
def test_header_count_limit(port: int, count: int, status: int) -> None:
    # With Host, ``count + 1`` fields.
    raw = lines("GET /healthz HTTP/1.1", "Host: x", *(f"X-H{i}: v" for i in range(count)))
    result = exchange(port, [raw, request("GET", "/healthz", [("Connection", "close")])])
    assert result.statuses[0] == status
    if status == 431:
        assert result.responses[0].error_code() == "request_header_fields_too_large"
        assert result.statuses == [431]  # and the connection is closed, the next request unread
    else:
        assert result.statuses == [200, 200]


@pytest.mark.parametrize(("slack", "status"), [(-200, 200), (200, 431)], ids=["under", "over"])
def test_head_size_limit_holds_for_a_head_in_one_read(port: int, slack: int, status: int) -> None:
    """A whole head that arrives in one read is measured exactly, not by the read's size."""
    head = lines("GET /healthz HTTP/1.1", "Host: x", "X-Big: ")
    raw = lines(
        "GET /healthz HTTP/1.1", "Host: x", "X-Big: " + "a" * (MAX_HEAD - len(head) + slack)
    )
    assert (
        exchange(port, raw + request("GET", "/healthz", [("Connection", "close")])).statuses[0]
        == status
    )


def test_overlong_url_is_refused_with_431(port: int) -> None:
    result = exchange(port, lines(f"GET /v1/{'a' * MAX_HEAD} HTTP/1.1", "Host: x"))
    assert result.statuses == [431]


def test_never_sending_connection_is_closed_without_an_answer(port: int) -> None:
    with connect(port) as sock:
        started = time.monotonic()
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert (data, ending) == (b"", "closed")
    assert time.monotonic() - started >= HEAD_TIMEOUT_S * 0.9


def test_idle_keepalive_connection_is_closed(port: int) -> None:
    with connect(port) as sock:
        sock.sendall(request("GET", "/healthz"))
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert [r.status for r in parse_responses(data)] == [200]
    assert ending == "closed"


DRIBBLE_INTERVAL_S = 0.05
# Sent a byte at a time this head takes ~10 s, 20 head timeouts.
DRIBBLED = lines("GET /healthz HTTP/1.1", "Host: x", "X-Pad: " + "a" * 160)


def dribble(port: int, connections: int, deadline_s: float) -> list[tuple[bytes, str]]:
    """Send ``DRIBBLED`` a byte per interval on each connection; read what comes back.

    Returns, per connection, the bytes received and how it ended: "closed" or "reset" by the
    server, "sent" if the whole head went out, "open" if still open at the deadline.
    """
    socks = [connect(port) for _ in range(connections)]
    for sock in socks:
        sock.setblocking(False)
    received = {sock: b"" for sock in socks}
    ended: dict[socket.socket, str] = {}
    deadline = time.monotonic() + deadline_s
    position = 0
    try:
        while len(ended) < len(socks) and time.monotonic() < deadline:
            for sock in socks:
                if sock in ended:
                    continue
                if position >= len(DRIBBLED):
                    ended[sock] = "sent"
                    continue
                try:
                    sock.send(DRIBBLED[position : position + 1])
                except (BrokenPipeError, ConnectionResetError):
                    ended[sock] = "reset"
            position += 1
            waiting = [s for s in socks if s not in ended]
            readable, _, _ = select.select(waiting, [], [], DRIBBLE_INTERVAL_S)
            for sock in readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    ended[sock] = "reset"
                    continue
                if chunk:
                    received[sock] += chunk
                else:
                    ended[sock] = "closed"
    finally:
        for sock in socks:
            sock.close()
    return [(received[s], ended.get(s, "open")) for s in socks]


def test_dribbled_head_times_out_with_408(port: int) -> None:
    ((data, ending),) = dribble(port, 1, deadline_s=READ_TIMEOUT_S)
    assert ending in ("closed", "reset"), (data, ending)  # long before the head was sent
    responses = parse_responses(data)
    assert [r.status for r in responses] == [408]
    assert responses[0].error_code() == "request_timeout"


def test_many_dribbling_connections_are_all_cut_off(server: ProxyServer, port: int) -> None:
    results = dribble(port, 100, deadline_s=READ_TIMEOUT_S)
    endings = [ending for _, ending in results]
    assert all(ending in ("closed", "reset") for ending in endings), endings
    # Each one that got an answer got a 408.
    for data, _ in results:
        assert [r.status for r in parse_responses(data)] in ([], [408])


def test_stalled_body_times_out_with_408(port: int, fake: FakeServer) -> None:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(CHAT_BODY)))]
    with connect(port) as sock:
        sock.sendall(request("POST", "/v1/chat/completions", headers) + CHAT_BODY[:10])
        data, ending = read_all(sock, READ_TIMEOUT_S)
    responses = parse_responses(data)
    assert [r.status for r in responses] == [408]
    assert responses[0].error_code() == "request_timeout"
    assert ending == "closed"
    assert list(fake.fake.requests) == []


def test_slow_but_steady_body_is_served(port: int, fake: FakeServer) -> None:
    """The body timeout is between reads, not a total: a byte every fifth of it goes through."""
    headers = [("Content-Type", "application/json"), ("Connection", "close")]
    head = request("POST", "/v1/chat/completions", headers, CHAT_BODY)[: -len(CHAT_BODY)]
    pieces = [CHAT_BODY[i : i + 5] for i in range(0, len(CHAT_BODY), 5)]  # ~3 body timeouts
    result = exchange(port, [head, *pieces], pause_s=BODY_TIMEOUT_S / 5, timeout=READ_TIMEOUT_S)
    assert result.statuses == [200]
    assert len(fake.fake.requests) == 1


def test_pipelined_requests_are_answered_in_order(port: int, fake: FakeServer) -> None:
    chat = request(
        "POST",
        "/v1/chat/completions",
        [("Content-Type", "application/json"), ("Authorization", "Bearer sk-pipe")],
        CHAT_BODY,
    )
    raw = request("GET", "/healthz") + chat + request("GET", "/v1/models") + chat
    result = exchange(port, raw + request("GET", "/healthz", [("Connection", "close")]))
    assert result.statuses == [200, 200, 200, 200, 200]
    assert len(fake.fake.requests) == 3


def test_pipelined_garbage_after_a_good_request(port: int) -> None:
    result = exchange(port, request("GET", "/healthz") + b"GARBAGE\r\n\r\n")
    assert result.statuses == [200, 400]
    assert result.ending == "closed"


def test_expect_100_continue_is_honoured(port: int) -> None:
    head = lines(
        "POST /v1/chat/completions HTTP/1.1",
        "Host: x",
        "Content-Type: application/json",
        f"Content-Length: {len(CHAT_BODY)}",
        "Expect: 100-continue",
        "Connection: close",
    )
    with connect(port) as sock:
        sock.sendall(head)
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(CHAT_BODY)
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert [r.status for r in parse_responses(interim[25:] + data)] == [200]
    assert ending == "closed"


def test_expect_100_continue_over_the_body_limit_gets_413_without_continue(port: int) -> None:
    head = lines(
        "POST /v1/chat/completions HTTP/1.1",
        "Host: x",
        "Content-Type: application/json",
        "Content-Length: 1000000000",
        "Expect: 100-continue",
    )
    with connect(port) as sock:
        sock.sendall(head)
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert b"100 Continue" not in data
    assert [r.status for r in parse_responses(data)] == [413]
    assert ending == "closed"  # the body never came: closed after the drain time


def test_eof_mid_body_is_a_client_disconnect(port: int, fake: FakeServer) -> None:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(CHAT_BODY)))]
    with connect(port) as sock:
        sock.sendall(request("POST", "/v1/chat/completions", headers) + CHAT_BODY[:10])
        sock.shutdown(socket.SHUT_WR)
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert (data, ending) == (b"", "closed")
    assert list(fake.fake.requests) == []


def test_http_1_0_is_served_and_closed(port: int, fake: FakeServer) -> None:
    chat = request(
        "POST",
        "/v1/chat/completions",
        [("Content-Type", "application/json")],
        CHAT_BODY,
        version="HTTP/1.0",
    )
    result = exchange(port, chat)
    assert result.statuses == [200]
    assert result.ending == "closed"
    assert len(fake.fake.requests) == 1
