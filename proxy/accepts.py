"""Accept balancing: workers sharing one listening socket take turns by open connections.

With ``server.workers > 1`` every worker accepts from the one socket uvicorn's supervisor
bound, and the kernel wakes them all for each new connection. uvloop's listener accepts every
connection waiting at once, so the worker that wakes first took a whole burst: wrk's 50
connections split up to 50/0, one worker idle for a whole run (adr/0140). Here each worker
accepts itself (``BalancedListener``) and counts its open connections in a small file every
worker maps (``ConnectionShares``); a worker holding more than its fair share leaves a waiting
connection to the others, checking every ``ACCEPT_CHECK_S`` whether it may take it, and takes it
anyway after ``ACCEPT_STALL_S``, so a stopped or stuck worker never keeps connections waiting
longer than that. One socket stays shared (``SO_REUSEPORT`` would queue a stuck worker's share
of the connections in its own queue until the supervisor killed it).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import mmap
import os
import select
import socket
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import uvloop

from proxy.defaults import (
    ACCEPT_BATCH,
    ACCEPT_CHECK_S,
    ACCEPT_RETRY_S,
    ACCEPT_SLACK,
    ACCEPT_STALL_S,
)
from proxy.processes import alive, start_time

LOGGER = logging.getLogger("memproxy.server")
SLOT = struct.Struct("<QQQ")  # pid, process start time, open connections
SLOT_COUNT = 64  # workers, with room for restarted ones whose slots are not free yet
SHARES_BYTES = SLOT.size * SLOT_COUNT
ALL_SLOTS = struct.Struct(f"<{3 * SLOT_COUNT}Q")


def may_accept(mine: int, total: int, workers: int, slack: int = ACCEPT_SLACK) -> bool:
    """Whether a worker holding ``mine`` of the ``total`` open connections of ``workers`` live
    workers takes the next one: it holds no more than their mean plus ``slack``."""
    return mine * max(workers, 1) <= total + slack * max(workers, 1)


def create_shares() -> str:
    """A new shares file for one server (the supervisor's); its path."""
    handle, path = tempfile.mkstemp(prefix="memproxy-accepts-")
    try:
        os.ftruncate(handle, SHARES_BYTES)
    finally:
        os.close(handle)
    return path


class ConnectionShares:
    """One worker's handle on the shares file: its own slot, everyone's counts."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, SHARES_BYTES)
            fcntl.flock(fd, fcntl.LOCK_EX)  # claims by two starting workers at once
            try:
                self._slot = self._claim()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _claim(self) -> int:
        pid = os.getpid()
        for slot in range(SLOT_COUNT):
            owner, started, _ = SLOT.unpack_from(self._map, slot * SLOT.size)
            if owner == 0 or not alive(owner, started):
                SLOT.pack_into(self._map, slot * SLOT.size, pid, start_time(pid) or 0, 0)
                return slot
        raise OSError(f"more than {SLOT_COUNT} workers share one listening socket")

    def publish(self, count: int) -> None:
        """Say how many connections this worker holds open (one store into the map); after
        ``close`` (connections closing at shutdown), nothing."""
        if self._map.closed:
            return
        struct.pack_into("<Q", self._map, self._slot * SLOT.size + 16, count)

    def totals(self, *, check_alive: bool) -> tuple[int, int]:
        """The open connections of the workers and how many workers there are; with
        ``check_alive``, only workers still running count (a killed one's slot keeps its last
        count until a new worker takes it)."""
        values = ALL_SLOTS.unpack_from(self._map)
        total = workers = 0
        for at in range(0, len(values), 3):
            owner, started, count = values[at : at + 3]
            if owner and (not check_alive or alive(owner, started)):
                total += count
                workers += 1
        return total, workers

    def close(self) -> None:
        """Free the slot and unmap."""
        SLOT.pack_into(self._map, self._slot * SLOT.size, 0, 0, 0)
        self._map.close()


class BalancedListener(asyncio.AbstractServer):
    """Accepts from a shared listening socket while this worker holds no more than its share.

    Connections are counted from accept until the protocol's ``connection_lost`` (the factory
    hands each protocol a ``release`` callback as ``on_lost``).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        shares: ConnectionShares,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._shares = shares
        self._open = 0
        self._serving = False
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_since: float | None = None  # a connection waits while we hold back
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start accepting."""
        self._serving = True
        self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def _may_accept(self) -> bool:
        # Only running workers count: a killed one's slot keeps the count it died with.
        total, workers = self._shares.totals(check_alive=True)
        return may_accept(self._open, total, workers)

    def _on_readable(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if not self._may_accept():
                self._hold_back()
                return
            if not self._accept_one():
                return

    def _hold_back(self) -> None:
        """Stop watching the socket; check again every ``ACCEPT_CHECK_S``."""
        self._loop.remove_reader(self._sock.fileno())
        self._waiting_since = self._loop.time()
        self._timer = self._loop.call_later(ACCEPT_CHECK_S, self._check)

    def _check(self) -> None:
        self._timer = None
        if not self._serving:
            return
        if not self._poll.poll(0):  # another worker took it: watch for the next one
            self._waiting_since = None
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
            return
        if self._may_accept():
            self._waiting_since = None
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
            return
        waited = self._loop.time() - (self._waiting_since or self._loop.time())
        if waited >= ACCEPT_STALL_S:
            # Nobody took it in time: the others are stopped, stuck or busy. Take what waits,
            # and keep the clock running until the queue is empty: restarting it per
            # connection would serve a burst behind a stuck worker at one per ACCEPT_STALL_S.
            for _ in range(ACCEPT_BATCH):
                if not self._accept_one():
                    break
            if self._timer is not None:  # it backed off: ``_resume`` watches the socket again
                return
        self._timer = self._loop.call_later(ACCEPT_CHECK_S, self._check)

    def _back_off(self) -> None:
        self._loop.remove_reader(self._sock.fileno())
        if self._timer is not None:
            self._timer.cancel()
        self._waiting_since = None
        self._timer = self._loop.call_later(ACCEPT_RETRY_S, self._resume)

    def _resume(self) -> None:
        self._timer = None
        if self._serving:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def _accept_one(self) -> bool:
        """Accept one connection; ``False`` when none is waiting (another worker took it)."""
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return False  # none waiting, or the client gave up before we took it
        except OSError as exc:
            # Out of descriptors or memory: the socket stays readable, so watching it again at
            # once would spin the loop and log on every pass. Back off as asyncio's own
            # listener does, and let the other workers take what waits meanwhile.
            LOGGER.warning(
                "accepting a connection failed, retrying in %.1f s: %s", ACCEPT_RETRY_S, exc
            )
            self._back_off()
            return False
        conn.setblocking(False)
        self._open += 1
        self._shares.publish(self._open)
        task = self._loop.create_task(self._connect(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _connect(self, conn: socket.socket) -> None:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open -= 1
                self._shares.publish(self._open)

        def factory() -> asyncio.BaseProtocol:
            protocol = self._factory()
            protocol.on_lost = release  # type: ignore[attr-defined]
            return protocol

        try:
            await self._loop.connect_accepted_socket(factory, conn)
        except Exception as exc:
            release()
            conn.close()
            LOGGER.warning("setting up an accepted connection failed: %s", exc)

    # asyncio.AbstractServer, as uvicorn uses it

    def close(self) -> None:
        """Stop accepting (the socket itself is uvicorn's to close)."""
        if not self._serving:
            return
        self._serving = False
        if self._timer is not None:
            self._timer.cancel()
        self._loop.remove_reader(self._sock.fileno())
        self._shares.close()

    async def wait_closed(self) -> None:
        """Wait for connections being set up."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def is_serving(self) -> bool:
        """Whether it accepts."""
        return self._serving

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop it accepts on."""
        return self._loop

    async def start_serving(self) -> None:
        """Accepting starts at creation; nothing to do."""

    async def serve_forever(self) -> None:
        """Not used: uvicorn runs its own main loop."""
        raise NotImplementedError


class BalancedLoop(uvloop.Loop):
    """uvloop's loop, whose listener on a socket shared with other workers is balanced."""

    def __init__(self, shares_path: str) -> None:
        super().__init__()
        self.shares_path = shares_path

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: Any = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        **kwargs: Any,
    ) -> asyncio.AbstractServer:
        """A ``BalancedListener`` on ``sock``; anything else is uvloop's."""
        if sock is None or host is not None or port is not None or kwargs.get("ssl"):
            return await super().create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, **kwargs
            )
        sock.setblocking(False)
        sock.listen(backlog)
        listener = BalancedListener(
            self, sock, protocol_factory, ConnectionShares(self.shares_path)
        )
        listener.start()
        return listener


def balanced_loop_factory(shares_path: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop factory of a worker that balances its accepts through ``shares_path``."""
    return lambda: BalancedLoop(shares_path)
