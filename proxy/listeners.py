"""One listening socket per worker on one address, so the kernel spreads connections (adr/0135).

With one socket that every worker accepts from, a new connection goes to whichever worker wakes
first, and a worker that wakes takes every connection waiting. A client that opens its pool at
once (wrk's 50 connections, an SDK's pool after a deploy) can land wholly on one worker, which
then serves all of it while the other idles, for as long as the connections live: measured
with ``bench/workers.py``, splits of 50/0, 42/8 and 40/10 between 2 workers.

With ``SO_REUSEPORT`` each worker listens on a socket of its own bound to the same address, and
Linux hands each new connection to one of them by a hash of its addresses: an even split on
average, whatever the workers are doing. uvicorn's supervisor gives every worker the sockets it
was given, pickled; a ``WorkerListener`` arrives in the worker as a new socket of that worker
bound to the same address, not as a copy of the supervisor's. The supervisor's own socket is
bound but never listens, so it takes no connections; it keeps the port reserved.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

# Linux balances connections over the sockets of a port; other systems that have the option
# give them all to one socket (the last bound on macOS), so they keep the shared socket.
BALANCED = sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")


class WorkerListener(socket.socket):
    """A bound, not listening, ``SO_REUSEPORT`` socket that each worker it is sent to (pickled)
    receives as a socket of its own bound to the same address."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (bind_reuseport, (self.family, self.getsockname()))


def bind_reuseport(
    family: socket.AddressFamily, address: Any, kind: type[socket.socket] = socket.socket
) -> socket.socket:
    """A new TCP socket of ``kind`` bound to ``address`` with ``SO_REUSEPORT`` (not listening)."""
    sock = kind(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


def for_workers(probe: socket.socket) -> socket.socket:
    """The socket to hand the workers, in place of ``probe``: the supervisor's socket bound
    the ordinary way (no ``SO_REUSEPORT``), which proved the port free (a server already on
    it, memproxy or not, fails that bind) and, for port 0, chose it. Closed here and replaced
    by a ``WorkerListener`` on its address where connections are balanced; returned as it is
    elsewhere."""
    if not BALANCED or probe.family not in (socket.AF_INET, socket.AF_INET6):
        return probe
    family, address = probe.family, probe.getsockname()
    probe.close()
    return bind_reuseport(family, address, WorkerListener)
