"""A real ``redis-server`` for tests: started on a free port in a temp dir, stopped afterwards.

Import the fixture into a conftest (``from tests.redis_server import redis_server``) or use
``RedisServer`` directly. Tests that need it are skipped when the binary is missing; CI installs
it (``apt-get install -y redis-server``). ``kill``/``pause``/``resume``/``start`` let a test break
the server mid-run the way production breaks it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BINARY = "redis-server"
START_TIMEOUT_S = 10.0


def free_port() -> int:
    """Return a TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process without persistence, bound to 127.0.0.1."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``redis://`` URL of database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (again, on the same port) and wait until it answers PING."""
        if self.process is not None and self.process.poll() is None:
            return
        args = [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--dir"]
        args += [str(self.directory), "--save", "", "--appendonly", "no", "--loglevel", "warning"]
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start, see {self.directory}/redis.log")
            time.sleep(0.01)

    def answers(self) -> bool:
        """Return whether the server answers PING now."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server, as a crash would, and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing answers (a hung Redis)."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server for good (resuming it first if paused)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def require_binary() -> None:
    """Skip the calling test when ``redis-server`` is not installed."""
    if shutil.which(BINARY) is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh ``redis-server`` for one test, stopped afterwards."""
    require_binary()
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One ``redis-server`` for a whole session (flush it between tests that need it empty)."""
    require_binary()
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
