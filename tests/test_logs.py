"""Logs: JSON lines with the request id; keys never appear."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from proxy.logs import JsonFormatter, RequestIdFilter, configure_logging, request_id_var
from proxy.settings import ServerSettings
from tests.fakes.servers import ProxyServer
from tests.test_cli import ROOT, free_port, wait_healthy


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
        logging.captureWarnings(False)
    output = stream.getvalue()
    lines = [json.loads(line) for line in output.splitlines()]
    access = [line for line in lines if line["logger"] == "memproxy.access"]
    assert access
    assert access[0]["request_id"] == "abc-123"
    assert access[0]["status"] == 200
    assert "sk-super-secret" not in output


@pytest.mark.slow
def test_json_logs_are_json_lines_only(tmp_path: Path) -> None:
    """Every line the server writes, its own, uvicorn's and Python warnings', is one object."""
    with socket.socket() as sock:  # a Qdrant that is not there: the store is retried
        sock.bind(("127.0.0.1", 0))
        qdrant_port = sock.getsockname()[1]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_")}
    env.update(
        MEMPROXY_LOG_FORMAT="json",
        MEMPROXY_DATA_DIR=str(tmp_path / "data"),
        # An API key over plain HTTP: qdrant-client warns (UserWarning) when the store opens.
        MEMPROXY_QDRANT_URL=f"http://127.0.0.1:{qdrant_port}",
        MEMPROXY_QDRANT_API_KEY="k",
        PYTHONWARNINGS="always",
    )
    argv = [sys.executable, "-m", "proxy", "serve", "--stand-in", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": "Bearer k"}, json=chat)
        httpx.get(f"{url}/readyz")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    lines = (out + err).decode().splitlines()
    objects = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    assert all(isinstance(o, dict) for o in objects)
    assert not [o for o in objects if "color_message" in o]
    messages = [o["message"] for o in objects]
    assert any("Uvicorn running" in m for m in messages)
    warned = [o for o in objects if o["logger"] == "py.warnings"]
    assert warned
    assert "insecure connection" in warned[0]["message"]
    assert any("memory store unavailable" in m for m in messages)
