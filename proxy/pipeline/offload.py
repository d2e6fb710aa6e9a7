"""Bounded off-loop CPU work: token counting too big to do on the event loop.

tiktoken releases the GIL while it encodes, so a worker thread keeps the loop free; but a thread
cannot be interrupted. A request that stops waiting (its memory deadline passed) leaves its
thread grinding until the count is done: seconds for megabytes of one repeated character, whose
BPE cost is superlinear. So the work is bounded, not the wait alone: at most ``workers`` threads
run at once, and a request waits for a free one only as long as its own deadline allows (then it
goes on without memories). A flood of pathological bodies costs ``workers`` cores at most, never
a pile of threads or queued work.

Threads are daemons started per job (tens of microseconds next to the milliseconds of work that
comes here), so a count still grinding never holds up the process's exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
DEFAULT_WORKERS = 1


class Offloader:
    """Runs blocking calls on at most ``workers`` daemon threads at a time."""

    def __init__(self, workers: int = DEFAULT_WORKERS) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        # Taken and given back on the event loop: a finished thread hands its slot back there.
        self._slots = asyncio.Semaphore(workers)

    @property
    def busy(self) -> bool:
        """Whether every worker is taken (also by threads whose caller stopped waiting)."""
        return self._slots.locked()

    async def run(
        self,
        func: Callable[[*Ts], T],
        *args: *Ts,
        on_done: Callable[[T], None] | None = None,
    ) -> T:
        """``func(*args)`` on a worker thread, once one is free; cancelling stops the wait only.

        ``on_done`` is called on the event loop with the result whenever it arrives, also after
        the caller stopped waiting (work already paid for can still be kept, e.g. cached).
        """
        loop = asyncio.get_running_loop()
        await self._slots.acquire()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def handed_back(result: T | None) -> None:  # on the event loop
            self._slots.release()
            if on_done is not None and result is not None:
                on_done(result)

        def finished(done: concurrent.futures.Future[T]) -> None:  # on the worker thread
            result = None if done.cancelled() or done.exception() else done.result()
            # A closed loop (shutdown) has no slot or caller left to hand anything back to.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(handed_back, result)

        future.add_done_callback(finished)

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(func(*args))
            except BaseException as exc:  # handed to the awaiting caller
                future.set_exception(exc)

        try:
            threading.Thread(target=work, name="memproxy-offload", daemon=True).start()
        except BaseException:
            future.cancel()  # gives the slot back through ``finished``
            raise
        return await asyncio.wrap_future(future)
