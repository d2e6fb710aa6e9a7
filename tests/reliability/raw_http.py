"""HTTP/1.1 over a raw socket for hostile tests: bytes go out exactly as written.

``exchange`` sends, then reads until the server closes (or a timeout), and says how the
connection ended; ``parse_responses`` splits what came back into responses with httptools.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import httptools
import orjson

Ending = Literal["closed", "reset", "open"]
READ_SIZE = 65536


@dataclass
class RawResponse:
    """One response as the server sent it."""

    status: int
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""

    def error_code(self) -> str | None:
        """The ``error.code`` of an OpenAI-shaped JSON error body."""
        assert self.headers.get(b"content-type", b"").startswith(b"application/json"), self
        error = orjson.loads(self.body)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["message"]
        code: str | None = error["code"]
        return code


@dataclass
class Exchange:
    """What came back on one connection, and how it ended."""

    data: bytes
    ending: Ending
    elapsed_s: float

    @property
    def responses(self) -> list[RawResponse]:
        """The complete responses in ``data``."""
        return parse_responses(self.data)

    @property
    def statuses(self) -> list[int]:
        """Their status codes, in order."""
        return [r.status for r in self.responses]


class _Collector:
    def __init__(self) -> None:
        self.done: list[RawResponse] = []
        self.current = RawResponse(0)
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.current = RawResponse(0)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.current.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.current.body += body

    def on_message_complete(self) -> None:
        self.done.append(self.current)


def parse_responses(data: bytes) -> list[RawResponse]:
    """Every complete response in ``data`` (a trailing partial one is left out)."""
    collector = _Collector()
    collector.parser.feed_data(data)
    return collector.done


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    """A connected socket to the local ``port``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_all(sock: socket.socket, timeout: float) -> tuple[bytes, Ending]:
    """Read until the server closes, resets, or ``timeout`` seconds pass without an end."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, "open"
        sock.settimeout(left)
        try:
            chunk = sock.recv(READ_SIZE)
        except TimeoutError:
            return data, "open"
        except ConnectionResetError:
            return data, "reset"
        if not chunk:
            return data, "closed"
        data += chunk


def exchange(
    port: int, parts: bytes | Iterable[bytes], *, pause_s: float = 0.0, timeout: float = 5.0
) -> Exchange:
    """Send ``parts`` (``pause_s`` apart), then read until the connection ends."""
    started = time.monotonic()
    with connect(port, timeout) as sock:
        for i, part in enumerate([parts] if isinstance(parts, bytes) else parts):
            if i and pause_s:
                time.sleep(pause_s)
            try:
                sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed early: read what it said
        data, ending = read_all(sock, timeout)
    return Exchange(data, ending, time.monotonic() - started)


def request(
    method: str,
    path: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "HTTP/1.1",
) -> bytes:
    """A request's bytes; ``Host`` comes first, ``Content-Length`` is added for a body."""
    lines = [f"{method} {path} {version}", "Host: memproxy"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body and not any(name.lower() == "content-length" for name, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def metric(port: int, name: str) -> float | None:
    """One sample's value from ``/metrics`` (``name`` with its labels), or ``None``."""
    answer = exchange(port, request("GET", "/metrics", [("Connection", "close")]))
    body = answer.responses[0].body.decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else None


def wait_for_metric(port: int, name: str, value: float, timeout: float = 10.0) -> float | None:
    """Poll ``metric`` until it equals ``value`` or ``timeout`` passes; the last value seen."""
    deadline = time.monotonic() + timeout
    seen = metric(port, name)
    while seen != value and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = metric(port, name)
    return seen
