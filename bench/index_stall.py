"""How long does a background index build hold the event loop? (issue 14, item 5; adr/0153)

qdrant-edge holds the GIL for the whole HNSW build. One process, one event loop, as a server
runs the store: a ticker coroutine wakes every 5 ms and records how late it woke, while real-text
memories (``bench/lib/realtext.py``, embedded with the real ``StaticEmbedder`` before timing)
are written through ``EdgeStore.add`` in batches of 100 with every default, so background
builds start at 5,000 and 10,000 unindexed points; after the last write the ticker runs on
until every build has ended. Reported per tree: the ticker's lag p50/p99/max and how many ticks
were over 100 ms and 1 s (the loop stalls), the writes' wall time, the peak disk of the data
dir sampled every 50 ms (a build's copy), the largest resident set of a child process, and the
stalls over 100 ms beside the store's events (each background flush, each build's phases, its
open's CPU from this tree on), on one clock from the first write.

Each tree runs in a process of its own (``--worker``), the trees interleaved over ``--rounds``:

    .venv/bin/python bench/index_stall.py --smoke       # one small build per tree, for CI
    git archive <commit> | tar -x -C /tmp/memproxy-before
    .venv/bin/python bench/index_stall.py --baseline-tree /tmp/memproxy-before --memories 10000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TICK_S = 0.005
BATCH = 100
SAMPLE_S = 0.05
STALL_MS = 100.0  # a tick this late is listed with its time


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def disk_bytes(path: Path) -> int:
    """Allocated bytes under ``path`` (holes are free), following no links."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed while walking
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


async def worker(memories: int, optimize_after: int | None) -> dict[str, Any]:
    """Write ``memories`` real-text memories into a new store with a ticker running."""
    from bench.lib import realtext
    from proxy.context.records import MemoryRecord
    from proxy.memory import edge_maintenance
    from proxy.memory.edge import SHARD_DIR, EdgeStore
    from proxy.memory.embedders import StaticEmbedder

    embedder = StaticEmbedder()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    # Built here, not in bench/lib: the worker imports the tree under test's bench/lib first,
    # and a baseline tree from before a shared builder would not have it.
    if realtext.available():
        texts = list(realtext.RealText().texts(memories))
    else:  # a machine without the data still smoke-tests the benchmark's machinery
        print("LoCoMo data absent: synthetic text", file=sys.stderr)
        texts = [("learnings", f"synthetic memory number {i}") for i in range(memories)]
    records = [
        MemoryRecord(
            id=f"m{i}",
            tenant="t",
            user=f"u{i % 5}",
            source=kind,
            content=content,
            created_at=now - timedelta(minutes=i),
        )
        for i, (kind, content) in enumerate(texts)
    ]
    vectors = embedder.embed_sync([r.content for r in records])
    lags: list[float] = []
    peak = [0]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    stalls: list[tuple[float, float]] = []  # (seconds since the first write, lag ms)
    events: list[tuple[float, str]] = []  # the store's log lines, same clock

    async def ticker() -> None:
        while not stop.is_set():
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            lags.append(max(0.0, loop.time() - due) * 1000)
            if lags[-1] > STALL_MS:
                stalls.append((round(due - origin, 2), round(lags[-1])))

    class Events(logging.Handler):
        def emit(self, entry: logging.LogRecord) -> None:
            events.append((round(time.monotonic() - origin, 2), entry.getMessage()[:160]))

    logging.getLogger("memproxy.store").addHandler(Events())
    logging.getLogger("memproxy.store").setLevel(logging.INFO)
    origin = time.monotonic()

    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch)

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], disk_bytes(data))
                time.sleep(SAMPLE_S)

        settings = {} if optimize_after is None else {"optimize_after": optimize_after}
        store = await EdgeStore.open(data, dimensions=embedder.dimensions, **settings)
        # Background flushes hold the GIL too (their fsyncs): listed, so a stall in a build's
        # replay window can be told from a flush that ran then.
        maintenance = store._maintenance
        plain_flush = maintenance.flush

        def logged_flush() -> None:
            began = time.monotonic()
            try:
                plain_flush()
            finally:
                took = time.monotonic() - began
                events.append((round(began - origin, 2), f"flush {took:.2f} s"))

        maintenance.flush = logged_flush  # type: ignore[method-assign]
        ticking = asyncio.ensure_future(ticker())
        sampling = loop.run_in_executor(None, sample)
        start = time.perf_counter()
        origin = time.monotonic()
        for i in range(0, memories, BATCH):
            await store.add(records[i : i + BATCH], vectors[i : i + BATCH])
        written = time.perf_counter() - start
        await asyncio.to_thread(edge_maintenance.wait_for_build, data / SHARD_DIR)
        built = time.perf_counter() - start
        unindexed = edge_maintenance.unindexed_points(store._shard)
        stop.set()
        await ticking
        await sampling
        await store.close()
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    import proxy

    return {
        "tree": str(Path(proxy.__file__).parents[1]),
        "lag_p50_ms": percentile(lags, 0.5),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": max(lags),
        "ticks_over_100ms": sum(lag > 100 for lag in lags),
        "ticks_over_1s": sum(lag > 1000 for lag in lags),
        "writes_s": written,
        "until_built_s": built,
        "unindexed_after": unindexed,
        "peak_disk_mb": peak[0] / 2**20,
        "child_max_rss_mb": child,
        "self_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "stalls": stalls,
        "events": events,
    }


def run_tree(tree: Path, memories: int, optimize_after: int | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # a build's child imports the same tree
    argv = [sys.executable, __file__, "--worker", str(tree), "--memories", str(memories)]
    if optimize_after is not None:
        argv += ["--optimize-after", str(optimize_after)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"worker for {tree} failed")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument(
        "--optimize-after", type=int, default=None, help="default: the store's (5,000)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="runs per tree, interleaved")
    parser.add_argument("--baseline-tree", type=Path, default=None)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        sys.path.insert(0, str(args.worker))
        print(json.dumps(asyncio.run(worker(args.memories, args.optimize_after))))
        return
    if args.smoke:
        # Enough for one build (a segment past the shard's indexing threshold) in seconds.
        args.memories, args.rounds, args.optimize_after = 2_500, 1, 2_200
    trees = [("this", ROOT)]
    if args.baseline_tree is not None:
        trees.insert(0, ("baseline", args.baseline_tree.resolve()))
    rows = []
    for round_ in range(args.rounds):
        for name, tree in trees:
            result = run_tree(tree, args.memories, args.optimize_after)
            row = {"name": name, "round": round_, **result}
            print(json.dumps(row), flush=True)
            rows.append(row)


if __name__ == "__main__":
    main()
