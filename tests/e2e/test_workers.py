"""``memproxy serve --workers 2`` on the embedded store, as real processes over real sockets.

Which worker answers a new connection is the kernel's choice; to make it ours, the other
worker is paused (SIGSTOP): a stopped process accepts nothing, so the one running takes every
new connection. Each step below names the worker that served it. The supervisor is paused too
meanwhile: it kills a worker that misses its health pings for 5 s, as a paused one would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from proxy.memory.edge import EdgeStore
from proxy.settings import load_settings
from proxy.tenancy import TenantResolver
from tests.fakes.upstream import FakeServer
from tests.test_cli import ROOT, free_port, wait_healthy

pytestmark = pytest.mark.slow
AUTH = {"Authorization": "Bearer sk-workers-test"}
USER = "ana"
# Generous: on a loaded 2-core machine a worker takes tens of seconds to import and start.
START_TIMEOUT_S = 180.0
RESTART_TIMEOUT_S = 120.0


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[bytes]
    data_dir: Path

    def workers(self) -> list[int]:
        """The supervisor's live worker processes (not its multiprocessing resource tracker)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                alive = stat[0] != "Z"
                if int(stat[1]) == self.proc.pid and alive and b"spawn_main" in cmdline:
                    pids.append(int(entry.name))
        return sorted(pids)

    def holding_log_lock(self, pids: list[int]) -> bool:
        """Whether one of ``pids`` holds a lock on the write log or its state file."""
        inodes = set()
        for name in ("memories.log", "memories.log.state"):
            with contextlib.suppress(FileNotFoundError):
                inodes.add((self.data_dir / name).stat().st_ino)
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if "->" in fields:
                continue  # a process waiting for a lock holds none by it
            pid, inode = int(fields[4]), int(fields[5].rsplit(":", 1)[1])
            if pid in pids and inode in inodes:
                return True
        return False

    @contextmanager
    def only(self, pid: int) -> Iterator[httpx.Client]:
        """A client whose new connections worker ``pid`` serves (every other one paused)."""
        paused = [self.proc.pid, *(p for p in self.workers() if p != pid)]
        while True:
            for other in paused:
                signal_if_alive(other, signal.SIGSTOP)
            # A process paused while it holds the write log's lock (a worker mid-write, the
            # supervisor mid-fold) would stall the running worker's next read forever: in
            # production the supervisor kills such a worker after 5 s of missed pings, but it
            # is paused here too. So pause them only between their writes.
            if not self.holding_log_lock(paused):
                break
            for other in reversed(paused):
                signal_if_alive(other, signal.SIGCONT)
            time.sleep(0.05)
        try:
            # No keep-alive: every request a new connection, accepted by the running worker.
            limits = httpx.Limits(max_keepalive_connections=0)
            with httpx.Client(base_url=self.url, headers=AUTH, timeout=60, limits=limits) as c:
                yield c
        finally:
            for other in reversed(paused):
                signal_if_alive(other, signal.SIGCONT)


def established(pid: int, port: int) -> int:
    """Client connections to ``port`` that process ``pid`` holds open (from ``/proc``)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and local_port == port:  # 01: established
                    inodes.add(f"socket:[{fields[9]}]")
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            held += os.readlink(fd) in inodes
    return held


def signal_if_alive(pid: int, signum: int) -> None:
    """Send ``signum`` to ``pid`` unless it has exited meanwhile."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


LOOSE_DEADLINES_YAML = """\
memory:
  deadline_ms: 5000
  stage_timeouts:
    embed_ms: 5000
    search_ms: 5000
"""


@pytest.fixture
def served(fake: FakeServer, tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    env = {
        **os.environ,
        "MEMPROXY_UPSTREAM_URL": fake.url,
        "MEMPROXY_DATA_DIR": str(tmp_path),
        "MEMPROXY_LOG_FORMAT": "json",
    }
    # These tests are about which worker sees what, not speed: on a loaded 2-core machine the
    # default 50 ms deadline sent the surviving worker's first chat out without memory.
    config = tmp_path / "memproxy.yaml"
    config.write_text(LOOSE_DEADLINES_YAML)
    env["MEMPROXY_CONFIG"] = str(config)
    argv = [sys.executable, "-m", "proxy", "serve", "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    server = Served(f"http://127.0.0.1:{port}", proc, tmp_path)
    try:
        wait_healthy(server.url, proc, timeout=START_TIMEOUT_S)
        wait_for(lambda: len(server.workers()) == 2 and all_ready(server))
        yield server
    finally:
        for pid in [*server.workers(), proc.pid]:
            signal_if_alive(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def wait_for(check: object, timeout: float = RESTART_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def all_ready(server: Served) -> bool:
    """Whether every worker answers /readyz (each one asked with the others paused)."""
    for pid in server.workers():
        with server.only(pid) as client:
            try:
                if client.get("/readyz").status_code != 200:
                    return False
            except httpx.TransportError:
                return False
    return True


def add(client: httpx.Client, content: str) -> str:
    response = client.post("/v1/memories", json={"memories": [{"user": USER, "content": content}]})
    assert response.status_code == 201, response.text
    return str(response.json()["data"][0]["id"])


def search(client: httpx.Client, query: str) -> list[str]:
    body = {"user": USER, "query": query, "top_k": 10}
    response = client.post("/v1/memories/search", json=body)
    assert response.status_code == 200, response.text
    return [hit["content"] for hit in response.json()["data"]]


def chat(client: httpx.Client, question: str) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": question}]}
    return client.post("/v1/chat/completions", json=body, headers={"X-Memory-User": USER})


def test_a_write_through_one_worker_is_read_through_the_other(served: Served) -> None:
    a, b = served.workers()
    with served.only(a) as client:
        memory_id = add(client, "Ana keeps bees on her balcony in Porto")
    with served.only(b) as client:
        assert client.get(f"/v1/memories/{memory_id}").status_code == 200
        assert "Ana keeps bees on her balcony in Porto" in search(client, "bees balcony Porto")
        listed = client.get("/v1/memories", params={"user": USER}).json()["data"]
        assert [m["id"] for m in listed] == [memory_id]
        assert client.delete(f"/v1/memories/{memory_id}").status_code == 200
    with served.only(a) as client:
        assert client.get(f"/v1/memories/{memory_id}").status_code == 404


def test_a_write_through_one_worker_invalidates_the_others_cached_results(
    served: Served,
) -> None:
    a, b = served.workers()
    query = "what pets does Ana have"
    with served.only(b) as client:
        add(client, "Ana has a grey cat named Miso")
        first = search(client, query)  # cached in b's process now
        assert search(client, query) == first
    with served.only(a) as client:
        add(client, "Ana adopted a dog called Pastel last week")
    with served.only(b) as client:
        assert "Ana adopted a dog called Pastel last week" in search(client, query)


def test_a_killed_worker_is_replaced_and_chat_answers_meanwhile(served: Served) -> None:
    a, b = served.workers()
    with served.only(a) as client:
        add(client, "Ana's sister lives in Montreal")
    os.kill(a, signal.SIGKILL)
    wait_for(lambda: a not in served.workers())
    with served.only(b) as client:
        answered = chat(client, "Where does my sister live?")
        assert answered.status_code == 200
        assert answered.headers["x-memory-status"] == "injected"
    wait_for(lambda: len(served.workers()) == 2 and a not in served.workers())
    (replacement,) = [p for p in served.workers() if p != b]
    wait_for(lambda: all_ready(served))
    with served.only(replacement) as client:
        assert "Ana's sister lives in Montreal" in search(client, "sister Montreal")


def test_metrics_count_every_workers_requests(served: Served) -> None:
    a, b = served.workers()
    for pid in (a, b):
        with served.only(pid) as client:
            assert chat(client, "hello").status_code == 200
    with served.only(a) as client:
        metrics = client.get("/metrics").text
    assert 'memproxy_requests_total{method="POST",route="chat",status="200"} 2.0' in metrics


def test_sigterm_puts_every_write_in_the_primary(served: Served) -> None:
    a, b = served.workers()
    with served.only(a) as client:
        add(client, "Ana plays the cello on Sundays")
    with served.only(b) as client:
        add(client, "Ana is learning Japanese")
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=60) == 0
    assert (served.data_dir / "memories.log").stat().st_size == 0
    assert not (served.data_dir / "replicas").exists()

    # One process now, on the primary alone: both writes are there.
    async def count() -> int:
        store = await EdgeStore.open(served.data_dir, dimensions=256)
        try:
            return await store.count(tenant_of(served))
        finally:
            await store.close()

    assert asyncio.run(count()) == 2


def tenant_of(served: Served) -> str:
    """The tenant passthrough auth derives from ``AUTH``'s key."""
    resolver = TenantResolver(load_settings(env={}))
    return resolver.for_key(AUTH["Authorization"].removeprefix("Bearer ")).id


def test_fifty_long_lived_connections_spread_over_both_workers(served: Served) -> None:
    """wrk's start, as ``bench/workers.py`` runs it: 50 connections at once, each kept open.
    With the socket shared, whichever worker woke first used to take most of them (up to 50/0);
    a worker past its share now leaves them to the other (adr/0140)."""
    port = int(served.url.rsplit(":", 1)[1])
    connections = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
    try:
        for conn in connections:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: memproxy\r\n\r\n")
        for conn in connections:
            conn.settimeout(60)
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")  # accepted and served
        held = [established(pid, port) for pid in served.workers()]
        assert sum(held) == 50
        assert min(held) >= 20, held
    finally:
        for conn in connections:
            conn.close()
