"""Accept balancing between workers on one listening socket (adr/0140), in one process.

Two ``BalancedListener``s on two descriptors of one listening socket, each with its own slot
in one shares file, stand for two workers: the kernel wakes both for every connection, as it
wakes two worker processes. The multi-process version is ``tests/e2e/test_workers.py``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest

from proxy.accepts import SLOT, BalancedListener, ConnectionShares, create_shares, may_accept


@pytest.mark.parametrize(
    ("mine", "total", "workers", "expected"),
    [
        (0, 0, 2, True),  # nobody holds anything
        (1, 1, 2, True),  # within the slack
        (2, 2, 2, True),
        (3, 3, 2, False),  # 3 against a mean of 1.5 + 1
        (26, 50, 2, True),  # 25 + 1
        (27, 50, 2, False),
        (0, 50, 2, True),  # the other worker holds them all: take it
        (50, 50, 1, True),  # alone: always
        (5, 5, 0, True),  # no live slot counted (its own not published yet): never stuck
    ],
)
def test_a_worker_takes_a_connection_while_it_holds_no_more_than_its_share(
    mine: int, total: int, workers: int, expected: bool
) -> None:
    assert may_accept(mine, total, workers, slack=1) is expected


class Greeting(asyncio.Protocol):
    """Writes one byte when connected, so the client knows it was accepted."""

    def __init__(self) -> None:
        self.on_lost: object = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.WriteTransport subclasses, but have its methods.
        cast(asyncio.WriteTransport, transport).write(b"x")

    def connection_lost(self, exc: Exception | None) -> None:
        if callable(self.on_lost):
            self.on_lost()


@pytest.fixture
def shares_path() -> Iterator[str]:
    path = create_shares()
    yield path
    Path(path).unlink()


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    yield sock
    sock.close()


def listener(sock: socket.socket, shares: ConnectionShares) -> BalancedListener:
    # A descriptor of its own on the shared socket, as each worker process has.
    own = sock.dup()
    result = BalancedListener(asyncio.get_running_loop(), own, Greeting, shares)
    result.start()
    return result


async def connect(sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(*sock.getsockname())
    assert await reader.readexactly(1) == b"x"
    return reader, writer


@pytest.fixture
async def clients() -> AsyncIterator[list[asyncio.StreamWriter]]:
    writers: list[asyncio.StreamWriter] = []
    yield writers
    for writer in writers:
        writer.close()


async def test_fifty_connections_spread_over_two_workers(
    listening: socket.socket, shares_path: str, clients: list[asyncio.StreamWriter]
) -> None:
    a = listener(listening, ConnectionShares(shares_path))
    b = listener(listening, ConnectionShares(shares_path))
    opened = await asyncio.gather(*(connect(listening) for _ in range(50)))
    clients.extend(writer for _, writer in opened)
    assert a._open + b._open == 50
    assert abs(a._open - b._open) <= 3  # the slack of 1 each way, and one more in flight
    for writer in clients:
        writer.close()
    for _ in range(6000):  # until each lost connection is uncounted
        if not (a._open or b._open):
            break
        await asyncio.sleep(0.01)
    assert a._shares.totals(check_alive=False) == (0, 2)
    a.close()
    b.close()


async def test_a_stuck_worker_holding_its_share_does_not_keep_connections_waiting(
    listening: socket.socket, shares_path: str, clients: list[asyncio.StreamWriter]
) -> None:
    """The other worker holds 5 connections and accepts nothing (stopped): past its share, the
    running one still takes every new connection, after waiting for the other a while."""
    stuck = ConnectionShares(shares_path)
    stuck.publish(5)
    running = listener(listening, ConnectionShares(shares_path))
    for _ in range(12):  # its share is (12 + 5) / 2 + 1: past 9 it only takes what waits
        _, writer = await asyncio.wait_for(connect(listening), timeout=60)  # a hang guard
        clients.append(writer)
    assert running._open == 12
    running.close()


def spawn_and_reap() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_workers_slot_counts_nothing_and_is_reused(shares_path: str) -> None:
    mine = ConnectionShares(shares_path)
    mine.publish(3)
    other = ConnectionShares(shares_path)
    # The slot as a worker that was killed holding 40 connections left it.
    SLOT.pack_into(other._map, other._slot * SLOT.size, spawn_and_reap(), 1, 40)
    assert mine.totals(check_alive=False) == (43, 2)
    assert mine.totals(check_alive=True) == (3, 1)
    replacement = ConnectionShares(shares_path)
    assert replacement._slot == other._slot


class OutOfDescriptors(socket.socket):
    """A listening socket whose accepts fail as when the process has no descriptor left."""

    accepts = 0

    def accept(self) -> tuple[socket.socket, object]:
        OutOfDescriptors.accepts += 1
        raise OSError(errno.EMFILE, "Too many open files")


async def test_a_failing_accept_backs_off_instead_of_spinning(
    listening: socket.socket, shares_path: str
) -> None:
    # The socket stays readable while accepts fail: watching it again at once would call
    # accept (and log) on every pass of the loop.
    full = OutOfDescriptors(fileno=os.dup(listening.fileno()))
    full.setblocking(False)
    failing = BalancedListener(
        asyncio.get_running_loop(), full, Greeting, ConnectionShares(shares_path)
    )
    failing.start()
    client = socket.create_connection(listening.getsockname())
    try:
        await asyncio.sleep(0.3)  # a spinning listener calls accept thousands of times here
        assert OutOfDescriptors.accepts == 1
        assert failing._timer is not None  # the retry is scheduled
    finally:
        failing.close()
        client.close()
        full.close()


async def test_a_burst_behind_a_stuck_worker_is_taken_at_once_after_one_stall(
    listening: socket.socket, shares_path: str, clients: list[asyncio.StreamWriter]
) -> None:
    """Once nobody took a waiting connection in time, the running worker takes every one
    waiting, not one per stall (ten connections would wait ten stalls in a row)."""
    stuck = ConnectionShares(shares_path)
    stuck.publish(0)
    running = listener(listening, ConnectionShares(shares_path))
    for _ in range(3):  # (3 + 0) / 2 + 1: from here it holds back
        _, writer = await asyncio.wait_for(connect(listening), timeout=60)  # a hang guard
        clients.append(writer)
    assert running._open == 3
    burst = [socket.create_connection(listening.getsockname()) for _ in range(10)]
    try:
        for _ in range(60000):  # a hang guard
            if running._open > 3:
                break
            await asyncio.sleep(0.001)
        assert running._open == 13  # all in the pass that took the first
    finally:
        for client in burst:
            client.close()
        running.close()
