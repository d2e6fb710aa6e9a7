"""Logs: JSON lines with the request id; keys never appear."""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest

from proxy.logs import JsonFormatter, RequestIdFilter, configure_logging, request_id_var
from proxy.settings import ServerSettings
from tests.fakes.servers import ProxyServer


def test_json_formatter_carries_request_id_and_extras() -> None:
    record = logging.LogRecord("memproxy.test", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    record.status = 200
    token = request_id_var.set("req-1")
    try:
        RequestIdFilter().filter(record)
    finally:
        request_id_var.reset(token)
    line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "req-1"
    assert line["message"] == "hello x"
    assert line["status"] == 200
    assert line["level"] == "info"


def test_access_log_has_request_id_and_no_keys(
    proxy: ProxyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging(ServerSettings(log_format="json", log_level="info"))
    stream = io.StringIO()
    root.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": []},
            headers={"Authorization": "Bearer sk-super-secret", "X-Request-Id": "abc-123"},
        )
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    output = stream.getvalue()
    lines = [json.loads(line) for line in output.splitlines()]
    access = [line for line in lines if line["logger"] == "memproxy.access"]
    assert access
    assert access[0]["request_id"] == "abc-123"
    assert access[0]["status"] == 200
    assert "sk-super-secret" not in output
