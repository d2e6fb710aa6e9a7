"""``run_on``: a blocking call on a thread pool, its result handed straight back to the loop.

``loop.run_in_executor`` chains two futures: the pool's ``concurrent.futures.Future``, whose
callbacks (run by the worker) schedule the loop's own through ``wrap_future``. After waking the
loop the worker still runs Python (the future's condition, the pool's bookkeeping), so the loop
wakes only to wait for the GIL. ``run_on`` gives the pool a call that resolves the loop's future
itself, with one ``call_soon_threadsafe`` as the last thing it does before the worker blocks
again. Under uvloop on the 2-core bench machine a call holding the GIL for 1.3 ms came back
~0.1 ms sooner; on a whole store search the gain was inside that machine's noise
(docs/benchmarks.md, "The store's thread hand-off").

Cancelling the caller behaves as with ``run_in_executor``: a call that has not started never
runs; one already running finishes on its thread and its result or error is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def run_on(executor: Executor, func: Callable[[*Ts], T], *args: *Ts) -> T:
    """``func(*args)`` on one of ``executor``'s threads; the event loop waits, never blocks."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    executor.submit(_call, loop, future, func, args)
    return await future


def _call(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[T],
    func: Callable[[*Ts], T],
    args: tuple[*Ts],
) -> None:
    """On the worker: run ``func`` unless its caller has gone, then hand the outcome back."""
    if future.cancelled():  # the caller stopped waiting before the call started
        return
    try:
        result = func(*args)
    except BaseException as exc:  # the caller's to handle, as with run_in_executor
        with contextlib.suppress(RuntimeError):  # a closed loop (shutdown) has no caller left
            loop.call_soon_threadsafe(_fail, future, exc)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_succeed, future, result)


def _succeed(future: asyncio.Future[T], result: T) -> None:
    if not future.done():  # a cancelled caller drops the result
        future.set_result(result)


def _fail(future: asyncio.Future[T], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
