"""Would the assembler's CPU be better off the event loop? Loop lag with it inline vs on a thread.

``assemble`` is the one per-request step of the memory path above ~1 ms that runs on the event
loop (issue 14, item 5; adr/0104). Every other step either releases the GIL and already runs on
a thread (the store's search, exact token counting of large bodies, adr/0084) or is a short
C-speed pass. ``assemble`` is pure Python: on a thread it still holds the GIL except at the
interpreter's switch interval, so the question is measured, not assumed.

One process, one event loop. A ticker coroutine wakes every millisecond and records how late it
woke (the lag any other request's work would see). Meanwhile requests run ``assemble`` on LoCoMo
texts back to back, either inline on the loop or through ``proxy.pipeline.offload.Offloader``
(what the pipeline uses for off-loop CPU), the two modes alternating in batches. Reported per
mode and candidate count: assemble latency p50 as the request sees it, ticker lag p50 / p99 /
max.

    .venv/bin/python bench/loop_lag.py              # 50, 100 and 500 candidates, ~1 minute
    .venv/bin/python bench/loop_lag.py --smoke      # seconds, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.context import NOW, QUERY, SEED, candidates
from bench.lib.stats import format_table
from proxy.context.assembler import assemble
from proxy.context.render import BlockTokens
from proxy.pipeline.offload import Offloader
from proxy.pipeline.pipeline import LINE_CACHE_ENTRIES
from proxy.tokenizer import tiktoken_tokenizer

BUDGET = 1_000
TICK_S = 0.001
MODES = ("inline", "thread")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def ticker(lags: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + TICK_S
        await asyncio.sleep(TICK_S)
        lags.append(max(0.0, loop.time() - due) * 1000)


async def batch(mode: str, work: Any, offloader: Offloader, requests: int) -> tuple[list, list]:
    """Run ``requests`` assembles in ``mode`` with the ticker running; (latencies, lags) in ms."""
    lags: list[float] = []
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(lags, stop))
    await asyncio.sleep(0.01)
    lags.clear()
    latencies = []
    for _ in range(requests):
        start = time.perf_counter()
        if mode == "inline":
            work()
        else:
            await offloader.run(work)
        latencies.append((time.perf_counter() - start) * 1000)
        await asyncio.sleep(0)  # a request's other awaits: the ticker gets its turn
    stop.set()
    await tick
    return latencies, lags


async def run(sizes: list[int], rounds: int, requests: int) -> list[dict[str, Any]]:
    encoding = "o200k_base"
    tokens = BlockTokens(
        encoding, tiktoken_tokenizer().counter(encoding), lines_kept=LINE_CACHE_ENTRIES
    )
    offloader = Offloader()
    rows = []
    for size in sizes:
        pool = candidates(random.Random(SEED), size)

        def work(pool: list = pool) -> Any:
            return assemble(pool, QUERY, BUDGET, now=NOW, tokens=tokens)

        work()  # warm the line memo, as a running server has
        seen: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in MODES}
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                latencies, lags = await batch(mode, work, offloader, requests)
                seen[mode][0].extend(latencies)
                seen[mode][1].extend(lags)
        for mode in MODES:
            latencies, lags = seen[mode]
            rows.append(
                {
                    "candidates": size,
                    "mode": mode,
                    "assemble_p50_ms": round(percentile(latencies, 0.5), 3),
                    "lag_p50_ms": round(percentile(lags, 0.5), 3),
                    "lag_p99_ms": round(percentile(lags, 0.99), 3),
                    "lag_max_ms": round(max(lags, default=0.0), 3),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--sizes", default="50,100,500", help="candidates per assemble")
    parser.add_argument("--rounds", type=int, default=10, help="alternating batches per mode")
    parser.add_argument("--requests", type=int, default=50, help="assembles per batch")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.smoke:
        sizes, args.rounds, args.requests = [50], 2, 5
    rows = asyncio.run(run(sizes, args.rounds, args.requests))
    print(format_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
