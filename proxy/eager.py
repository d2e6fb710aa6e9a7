"""``start``: run a coroutine up to its first wait now, so work that never waits needs no task.

A task (``create_task``, ``ensure_future``) or a timer (``asyncio.timeout``) costs the loop
~4-5 us to set up and step, and a memory-on request made three tasks and three timers for work
that, with the in-process cache, never waits: the search started beside the recall of earlier
blocks, the cache writes after the request went upstream, the embedding stage under its own
timeout. ``start`` steps the coroutine in the caller (as Python 3.12's eager tasks do) and says
whether it finished; only when it is waiting does the caller need a task or a timer, for what
is left (``Rest``).

What runs before the first wait is what a task would have run in its first step, only sooner:
an exception from it is raised by ``start``. Everything after it runs exactly as it would have
inside ``await``: results, exceptions and cancellation pass through ``rest`` unchanged.
The part before the first wait runs in the caller's task and context: a ``Rest`` finished in
another task must not have bound anything to the current task there (``asyncio.timeout``
would cancel the caller when it expires).
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Rest(Generic[T]):
    """The rest of a started coroutine: await it (once) to run it to its end."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, T], first: Any) -> None:
        self._coro = coro
        self._first = first  # what the coroutine's first wait yielded (a future, or None)

    def __await__(self) -> Generator[Any, Any, T]:
        """``yield from`` the coroutine, its first yield already made."""
        coro, out = self._coro, self._first
        while True:
            try:
                sent = yield out
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation included: the coroutine decides
                try:
                    out = coro.throw(exc)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
            else:
                try:
                    out = coro.send(sent)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]

    def close(self) -> None:
        """Drop the rest unrun (its ``finally`` blocks run now)."""
        self._coro.close()


class Done(Generic[T]):
    """A coroutine that finished without waiting, and its result."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


def start(coro: Coroutine[Any, Any, T]) -> Done[T] | Rest[T]:
    """Run ``coro`` now until it finishes (``Done``) or first waits (``Rest``, to await);
    an exception from that part is raised here."""
    try:
        first = coro.send(None)
    except StopIteration as done:
        return Done(done.value)
    return Rest(coro, first)


async def finish(rest: Rest[T]) -> T:
    """Await ``rest``: a coroutine, for what runs it as a task (``create_task`` takes no other
    awaitable)."""
    return await rest
