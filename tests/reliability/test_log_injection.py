"""An escaped CR or LF in a path never forges an access-log line (it is logged as written)."""

from __future__ import annotations

import logging
import socket

import pytest

from tests.fakes.servers import ProxyServer


def test_an_escaped_line_break_in_the_path_stays_escaped_in_the_access_log(
    proxy: ProxyServer, caplog: pytest.LogCaptureFixture
) -> None:
    target = b"/v1/models%0d%0a127.0.0.1%20GET%20/admin%20200"
    with caplog.at_level(logging.INFO, logger="memproxy.access"):
        with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
            sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while sock.recv(65536):
                pass
        lines = [r.getMessage() for r in caplog.records if r.name == "memproxy.access"]
    assert lines, "no access line was logged"
    assert all("\r" not in line and "\n" not in line for line in lines)
    assert any(target.decode() in line for line in lines)
