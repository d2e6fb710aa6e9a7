"""Several workers get a listening socket each on one address, and the kernel spreads the
connections over them (adr/0135): a worker that wakes first no longer takes them all."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from multiprocessing.reduction import ForkingPickler

import pytest

from proxy import listeners
from proxy.listeners import WorkerListener, for_workers

pytestmark = pytest.mark.skipif(not listeners.BALANCED, reason="Linux balances SO_REUSEPORT")


def probe() -> socket.socket:
    """A socket bound as uvicorn's ``Config.bind_socket`` binds one: reuse-address, port 0."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def as_worker_gets_it(sock: socket.socket) -> socket.socket:
    """``sock`` as a worker process receives it: pickled the way uvicorn's supervisor sends
    its sockets (multiprocessing's pickler), then loaded."""
    loaded = ForkingPickler.loads(bytes(ForkingPickler.dumps(sock)))
    assert isinstance(loaded, socket.socket)
    return loaded


@contextmanager
def supervisor_socket() -> Iterator[socket.socket]:
    sock = for_workers(probe())
    try:
        yield sock
    finally:
        sock.close()


def drain(listener: socket.socket) -> int:
    """Accept every connection waiting on ``listener``; how many there were."""
    listener.setblocking(False)
    count = 0
    while True:
        try:
            accepted, _ = listener.accept()
        except BlockingIOError:
            return count
        accepted.close()
        count += 1


def test_the_supervisor_keeps_the_probes_address_in_a_reuseport_socket() -> None:
    first = probe()
    address = first.getsockname()
    sock = for_workers(first)
    try:
        assert first.fileno() == -1  # closed: its port is the listener's now
        assert isinstance(sock, WorkerListener)
        assert sock.getsockname() == address
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
    finally:
        sock.close()


def test_each_worker_gets_a_socket_of_its_own_and_the_connections_spread() -> None:
    with supervisor_socket() as sock, ExitStack() as stack:
        workers = [stack.enter_context(as_worker_gets_it(sock)) for _ in range(2)]
        assert len({w.fileno() for w in workers} | {sock.fileno()}) == 3
        for worker in workers:
            assert type(worker) is socket.socket  # a plain socket: it pickles no further
            assert worker.getsockname() == sock.getsockname()
            worker.listen(128)
        clients = [
            stack.enter_context(socket.create_connection(sock.getsockname())) for _ in range(64)
        ]
        # Each connection waits on the socket the kernel chose for it; a worker drains only
        # its own. One shared socket would give the first drain all 64.
        counts = [drain(worker) for worker in workers]
        assert sum(counts) == len(clients)
        assert min(counts) > 0, counts  # all on one socket: 2 ** -63 by chance


def test_a_second_server_on_the_port_still_fails_to_bind() -> None:
    with supervisor_socket() as sock, as_worker_gets_it(sock) as worker:
        worker.listen(8)
        with socket.socket() as second:
            second.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError, match="in use") as refused:
                second.bind(sock.getsockname())
        assert refused.value.errno == errno.EADDRINUSE


def test_other_sockets_are_handed_over_as_they_are() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        assert for_workers(unix) is unix
