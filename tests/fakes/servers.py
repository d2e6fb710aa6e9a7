"""Run memproxy over a real socket in a background thread, on a free port.

The server is configured by ``proxy.server.server_config``, as ``memproxy serve`` configures it:
the tests exercise the production server (its head limits, timeouts and draining).
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.applications import Starlette

from proxy.server import server_config
from proxy.settings import ServerSettings

START_TIMEOUT_S = 10.0


class ProxyServer:
    """memproxy's server serving an app in a thread; a context manager.

    ``server`` is the ``server.*`` section (defaults: production's); its host and port are
    ignored, the socket is bound here.
    """

    def __init__(
        self, app: Starlette, host: str = "127.0.0.1", server: ServerSettings | None = None
    ) -> None:
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port: int = self._sock.getsockname()[1]
        self.server = uvicorn.Server(server_config(app, server or ServerSettings()))
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        """Base URL ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root(self) -> str:
        """Base URL without ``/v1`` (what ``ANTHROPIC_BASE_URL`` takes)."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ProxyServer:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("memproxy did not start")
            time.sleep(0.01)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=START_TIMEOUT_S)
        self._sock.close()
