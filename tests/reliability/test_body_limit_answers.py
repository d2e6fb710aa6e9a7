"""A 413 reaches clients that send the whole body before reading the answer.

Python's ``http.client`` and ``urllib`` write the whole body, then read; with ``Connection:
close`` the server used to close right after its early 413 with the rest of the body unread,
the kernel answered the client's next bytes with a reset, and the client saw ECONNRESET or a
broken pipe instead of the 413. The server now reads and drops the rest (bounded by
``server.http.drain_bytes`` and ``drain_s``) after sending its answer. Tested on the chat
route, the passthrough and the memories API, bodies just over and well over the limit.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest

from proxy.app import create_app
from proxy.settings import HttpServerSettings, LimitsSettings, ServerSettings, replace
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.raw_http import connect, exchange, parse_responses, read_all, request
from tests.reliability.support import MemoryProxy, memory_settings

LIMIT = 1024 * 1024
# Well over: more than loopback's socket buffers hold, so the client is still writing when
# the 413 is sent (the case that got a reset).
SIZES = {"just-over": LIMIT + 1, "well-over": 16 * LIMIT}
PATHS = {
    "chat": "/v1/chat/completions",
    "passthrough": "/v1/embeddings",
    "memories": "/v1/memories",
}
AUTH = ("Authorization", "Bearer sk-body-limit")
READ_TIMEOUT_S = 30.0


def assert_413(status: int, body: bytes) -> None:
    assert status == 413
    assert orjson.loads(body)["error"]["code"] == "payload_too_large"


@pytest.fixture(scope="module")
def server(fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """memproxy with memory on (the memories API) and a 1 MiB body limit; its port."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("body-limit"))
    settings = replace(settings, limits=LimitsSettings(max_body_bytes=LIMIT))
    with MemoryProxy(create_app(settings)) as proxy:
        yield proxy.port


@pytest.fixture
def port(server: int, fake: FakeServer) -> Iterator[int]:
    """The port; nothing over the limit reaches the upstream, and the server keeps serving."""
    yield server
    assert [r for r in fake.fake.requests if len(r.body) > LIMIT] == []
    assert exchange(server, request("GET", "/healthz", [("Connection", "close")])).statuses == [200]


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES)
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS)
def test_http_client_with_connection_close_reads_the_413(port: int, path: str, size: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=READ_TIMEOUT_S)
    try:
        headers = {"Connection": "close", "Content-Type": "application/json", AUTH[0]: AUTH[1]}
        conn.request("POST", path, body=b"x" * size, headers=headers)
        response = conn.getresponse()
        assert_413(response.status, response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES)
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS)
def test_urllib_reads_the_413(port: int, path: str, size: int) -> None:
    """urllib always sends ``Connection: close``."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=b"x" * size,
        headers={"Content-Type": "application/json", AUTH[0]: AUTH[1]},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(req, timeout=READ_TIMEOUT_S)
    assert_413(raised.value.code, raised.value.read())


def chunked(body: bytes, piece: int = 64 * 1024) -> bytes:
    parts = [
        b"%x\r\n%s\r\n" % (len(body[i : i + piece]), body[i : i + piece])
        for i in range(0, len(body), piece)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES)
@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS)
def test_raw_socket_with_connection_close_reads_the_413(
    port: int, path: str, size: int, framing: str
) -> None:
    """Declared too large (answered at once) or chunked (answered once the limit is passed)."""
    headers = [("Content-Type", "application/json"), AUTH, ("Connection", "close")]
    if framing == "chunked":
        raw = request("POST", path, [*headers, ("Transfer-Encoding", "chunked")]) + chunked(
            b"x" * size
        )
    else:
        raw = request("POST", path, headers, b"x" * size)
    with connect(port, READ_TIMEOUT_S) as sock:
        sock.sendall(raw)  # all of it, before reading: a reset would fail here or below
        data, ending = read_all(sock, READ_TIMEOUT_S)
    (response,) = parse_responses(data)
    assert_413(response.status, response.body)
    assert response.headers[b"connection"] == b"close"
    assert ending == "closed"


def test_keepalive_connection_is_reused_after_a_drained_413(port: int) -> None:
    """Without ``Connection: close`` the dropped body is parsed through; the next request on
    the same connection is served."""
    too_big = request("POST", PATHS["chat"], [AUTH], b"x" * SIZES["well-over"])
    result = exchange(port, [too_big, request("GET", "/healthz", [("Connection", "close")])])
    assert result.statuses == [413, 200]


DRAIN = HttpServerSettings(drain_bytes=LIMIT, drain_s=0.5)


@pytest.fixture(scope="module")
def tight_drain(fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """memproxy (memory off) that drops at most 1 MiB for at most 0.5 s after an early answer."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("drain"))
    settings = replace(
        settings,
        limits=LimitsSettings(max_body_bytes=1024),
        memory=replace(settings.memory, enabled=False),
    )
    with ProxyServer(create_app(settings), server=ServerSettings(http=DRAIN)) as proxy:
        yield proxy.port


@pytest.mark.parametrize("close", [True, False], ids=["connection-close", "keep-alive"])
def test_drain_is_bounded_in_time(tight_drain: int, close: bool) -> None:
    """A client that declares a huge body and sends none of it is closed after ``drain_s``."""
    headers = [("Content-Length", str(10**9))] + ([("Connection", "close")] if close else [])
    with connect(tight_drain, READ_TIMEOUT_S) as sock:
        sock.sendall(request("POST", PATHS["chat"], headers))
        data, ending = read_all(sock, READ_TIMEOUT_S)
    assert [r.status for r in parse_responses(data)] == [413]
    assert ending == "closed"


@pytest.mark.parametrize("close", [True, False], ids=["connection-close", "keep-alive"])
def test_drain_is_bounded_in_bytes(tight_drain: int, close: bool) -> None:
    """A client that keeps sending past ``drain_bytes`` is cut off before it is done."""
    headers = [("Content-Length", str(10**9))] + ([("Connection", "close")] if close else [])
    cut_off = False
    with connect(tight_drain, READ_TIMEOUT_S) as sock:
        sock.sendall(request("POST", PATHS["chat"], headers))
        try:
            for _ in range(64):  # 64 MiB in all, 64 times the drain budget
                sock.sendall(b"x" * LIMIT)
        except (BrokenPipeError, ConnectionResetError):
            cut_off = True
    assert cut_off
