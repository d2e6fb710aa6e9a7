"""``python -m proxy serve`` with a trace of which threads run what: for ``bench/threads.py``.

Run as ``python -m bench.lib.thread_trace serve``. Wraps (in this process only) the store's
thread hand-off, the pipeline's ``prepare`` and ``_assemble``, background spawns and the relay's
work after sending, recording monotonic-ns events; ``SIGUSR1`` writes them as JSON to
``$BENCH_THREAD_TRACE``. Each ``_assemble`` also records the main thread's CPU time (wall
equal to CPU: it never waited for the GIL nor a core) and runs twice more on the same inputs
(the replays' CPU: how much a first, cold run costs over a warm one); before it, one numpy
comparison of 400 and of 4,900 elements is timed (above 500 numpy releases the GIL: does the
request then wait for another thread?).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import proxy.background as background
import proxy.handoff as handoff
import proxy.memory.edge as edge
import proxy.relay as relay
from proxy.pipeline import pipeline

# (kind, thread, label, start_ns, end_ns, cpu_ns): kind "job" (a call on a store thread),
# "submit"/"resumed" (the loop handing a call over / going on with its result), "prepare",
# "assemble", "replay1"/"replay2", "numpy400"/"numpy4900" (one comparison of two float
# arrays of that size on the loop just before assemble), "spawn", "after_send".
PROBES = {size: (np.random.rand(size), np.random.rand(size)) for size in (400, 4_900)}
EVENTS: list[tuple[str, str, str, int, int, int]] = []
now = time.monotonic_ns


def _name(func: object) -> str:
    return str(getattr(func, "__qualname__", None) or getattr(func, "__name__", func))


def install() -> None:
    """Wrap the traced functions."""
    call = handoff._call

    def traced_call(*args: Any) -> None:
        start = now()
        call(*args)
        EVENTS.append(("job", threading.current_thread().name, _name(args[2]), start, now(), 0))

    handoff._call = traced_call
    run_on = handoff.run_on

    async def traced_run_on(executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        EVENTS.append(("submit", "", _name(func), now(), 0, 0))
        result = await run_on(executor, func, *args)
        EVENTS.append(("resumed", "", _name(func), now(), 0, 0))
        return result

    handoff.run_on = traced_run_on  # type: ignore[assignment]
    edge.run_on = traced_run_on  # type: ignore[assignment]

    assemble = pipeline.Pipeline._assemble

    async def traced_assemble(self: Any, *args: Any) -> Any:
        for size, (left, right) in PROBES.items():  # numpy releases the GIL above 500 elements
            start = now()
            np.less(left, right)
            EVENTS.append((f"numpy{size}", "", "", start, now(), 0))
        cpu, start = time.thread_time_ns(), now()
        result = await assemble(self, *args)
        EVENTS.append(("assemble", "", "", start, now(), time.thread_time_ns() - cpu))
        for replay in ("replay1", "replay2"):
            cpu = time.thread_time_ns()
            await assemble(self, *args)
            EVENTS.append((replay, "", "", 0, 0, time.thread_time_ns() - cpu))
        return result

    pipeline.Pipeline._assemble = traced_assemble  # type: ignore[method-assign]
    prepare = pipeline.Pipeline.prepare

    async def traced_prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = now()
        result = await prepare(self, *args, **kwargs)
        EVENTS.append(("prepare", "", "", start, now(), 0))
        return result

    pipeline.Pipeline.prepare = traced_prepare  # type: ignore[method-assign]
    spawn = background.Background.spawn

    def traced_spawn(self: Any, job: Any) -> None:
        EVENTS.append(("spawn", "", _name(job), now(), 0, 0))
        spawn(self, job)

    background.Background.spawn = traced_spawn  # type: ignore[method-assign]
    quietly = relay.quietly

    async def traced_quietly(work: Any) -> None:
        start = now()
        await quietly(work)
        EVENTS.append(("after_send", "", "", start, now(), 0))

    relay.quietly = traced_quietly


def dump(*_: object) -> None:
    """Write the events so far to ``$BENCH_THREAD_TRACE``."""
    with open(os.environ["BENCH_THREAD_TRACE"], "w") as out:
        json.dump(EVENTS, out)


if __name__ == "__main__":
    install()
    signal.signal(signal.SIGUSR1, dump)
    sys.argv = ["proxy", *sys.argv[1:]]
    runpy.run_module("proxy", run_name="__main__", alter_sys=True)
