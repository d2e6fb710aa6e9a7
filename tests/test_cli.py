"""``memproxy serve`` as a real process: workers, shared metrics, graceful shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy import __version__
from proxy.cli import build_parser, main
from proxy.errors import StoreError
from proxy.memory.edge import EdgeStore
from proxy.settings import load_settings
from tests.fakes.upstream import FakeServer
from tests.reliability.raw_http import connect, wait_for_metric

ROOT = Path(__file__).resolve().parents[1]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"memproxy exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("memproxy did not become healthy")


@pytest.fixture
def served(fake: FakeServer) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m proxy serve --workers 2`` in front of the fake upstream."""
    port = free_port()
    env = {
        **os.environ,
        "MEMPROXY_UPSTREAM_URL": fake.url,
        "MEMPROXY_LOG_FORMAT": "json",
        # The server itself is under test here (memory with workers: tests/e2e/test_workers.py).
        "MEMPROXY_MEMORY_ENABLED": "false",
    }
    argv = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_parser_has_serve_flags() -> None:
    args = build_parser().parse_args(
        ["serve", "--port", "9", "--workers", "3", "--host", "0.0.0.0"]
    )
    assert (args.port, args.workers, args.host, args.config) == (9, 3, "0.0.0.0", None)


def test_config_error_names_key_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("server:\n  prot: 1\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "server.prot" in err
    assert str(config) in err


def test_workers_serve_the_embedded_store_from_its_primary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Memory on, store.kind edge (the defaults): the supervisor holds the primary shard while
    the workers run (adr/0105), so nothing else can open the data dir meanwhile."""
    monkeypatch.setattr(os, "environ", {"MEMPROXY_DATA_DIR": str(tmp_path)})
    held: list[bool] = []

    def run(config: object) -> int:
        with pytest.raises(StoreError):  # the shard's lock is held
            asyncio.run(EdgeStore.open(tmp_path, dimensions=256))
        held.append(True)
        return 0

    monkeypatch.setattr("proxy.server.run", run)
    assert main(["serve", "--workers", "2"]) == 0
    assert held == [True]


def test_workers_get_the_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers load their settings from the environment; the count must reach them."""
    monkeypatch.setattr(os, "environ", {"MEMPROXY_MEMORY_ENABLED": "false"})
    seen: list[int] = []
    monkeypatch.setattr("proxy.server.run", lambda config: seen.append(config.workers) or 0)
    assert main(["serve", "--workers", "3"]) == 0
    assert seen == [3]
    assert load_settings().server.workers == 3  # what each worker process loads


@pytest.mark.slow
def test_workers_serve_and_shut_down_gracefully(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, proc = served
    for _ in range(6):
        assert httpx.post(f"{url}/v1/chat/completions", json=CHAT).status_code == 200
    metrics = httpx.get(f"{url}/metrics").text
    # Counted across both workers, whichever one served /metrics.
    assert 'memproxy_requests_total{method="POST",route="chat",status="200"} 6.0' in metrics

    received: list[bytes] = []
    started = threading.Event()

    def stream() -> None:
        body = {**CHAT, "stream": True}
        headers = {"X-Fake-Interval-Ms": "200", "X-Fake-Chunks": "5"}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            for chunk in r.iter_bytes():  # decoded: the fake gzips like the real upstream
                received.append(chunk)
                started.set()

    reader = threading.Thread(target=stream)
    reader.start()
    assert started.wait(10)
    proc.send_signal(signal.SIGTERM)  # mid-stream: the stream still finishes
    reader.join(timeout=20)
    assert proc.wait(timeout=30) == 0
    assert b"".join(received).endswith(b"data: [DONE]\n\n")
    assert proc.stderr is not None
    log = proc.stderr.read().decode()
    assert '"request_id"' in log  # JSON lines with the request id


@pytest.mark.slow
def test_workers_share_the_open_connections_gauge(
    served: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, _ = served
    port = int(url.rsplit(":", 1)[1])
    idle = [connect(port) for _ in range(4)]
    try:
        # Summed over both workers (livesum): the four idle ones and the one asking.
        assert wait_for_metric(port, "memproxy_connections_open", 5.0) == 5.0
    finally:
        for sock in idle:
            sock.close()
    assert wait_for_metric(port, "memproxy_connections_open", 1.0) == 1.0


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"memproxy {__version__}\n"
