"""What does the retrieval-count flush cost the thread it runs on? (issue 14, items 2 and 5)

At c=1 the only Python work beside a served request is the count flush (``bench/threads.py``):
every 5 s ~70 ``EdgeStore._increment_sync`` calls of 64 ids on a store thread, each holding
the GIL, and the count table's save. Per tree, in a process of its own (``--worker``), the
trees interleaved over ``--rounds``:

- ``increment``: the calling thread's CPU time (``time.thread_time``) per ``_increment_sync``
  of 64 distinct ids, on a store of ``--memories`` real-text memories (``bench/lib/realtext.py``;
  random unit vectors: the count path reads no vector) with the record cache warm and every id
  counted once already (a busy store's steady state), saves held off;
- ``save``: per save of a table of 10k and 100k entries after 64 changed counts, the calling
  thread's CPU and wall time (what the store thread pays) and the process's CPU until the save
  is on disk (the whole write, whichever thread did it).

    .venv/bin/python bench/count_flush.py --smoke
    git archive <commit> | tar -x -C /tmp/memproxy-before
    .venv/bin/python bench/count_flush.py --baseline-tree /tmp/memproxy-before
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IDS_PER_CALL = 64  # proxy.pipeline.counters.IDS_PER_CALL


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "max": round(ordered[-1], 3),
    }


async def increments(memories: int, calls: int) -> dict[str, float]:
    """Thread CPU ms per ``_increment_sync`` of 64 ids on a warm, fully counted store."""
    import numpy as np

    from bench.lib import realtext
    from proxy.context.records import MemoryRecord
    from proxy.memory import edge_counts
    from proxy.memory.edge import EdgeStore

    # Built here, not in bench/lib: the worker imports the tree under test's bench/lib first,
    # and a baseline tree from before a shared builder would not have it.
    if realtext.available():
        texts = list(realtext.RealText().texts(memories))
    else:  # a machine without the data still smoke-tests the benchmark's machinery
        print("LoCoMo data absent: synthetic text", file=sys.stderr)
        texts = [("learnings", f"synthetic memory number {i}") for i in range(memories)]
    now = datetime.now(UTC)
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
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((len(records), 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    edge_counts.SAVE_INTERVAL_S = float("inf")  # saves are measured on their own
    with tempfile.TemporaryDirectory() as data:
        store = await EdgeStore.open(data, dimensions=32, optimize_after=None)
        try:
            for start in range(0, len(records), 1_000):
                store.add_sync(records[start : start + 1_000], vectors[start : start + 1_000])
            await store.close()
            store = await EdgeStore.open(data, dimensions=32, optimize_after=None)
            await store.warmed()
            key = store._ids.key
            keys = [key("t", r.id) for r in records]
            for start in range(0, len(keys), IDS_PER_CALL):
                store._increment_sync("t", Counter(keys[start : start + IDS_PER_CALL]))
            pick = random.Random(3)
            times = []
            for _ in range(calls):
                deltas = Counter(pick.sample(keys, IDS_PER_CALL))
                started = time.thread_time()
                store._increment_sync("t", deltas)
                times.append((time.thread_time() - started) * 1000)
        finally:
            await store.close()
    return summary(times)


def saves(entries: int, repeats: int) -> dict[str, Any]:
    """Per save of a table of ``entries`` after 64 new counts: the caller's CPU and wall ms,
    and the process's CPU ms until the file is written."""
    from proxy.memory import edge_counts

    edge_counts.SAVE_INTERVAL_S = 0.0
    pick = random.Random(5)
    with tempfile.TemporaryDirectory() as data:
        table = edge_counts.RetrievalCounts(Path(data) / edge_counts.COUNTS_FILE)
        keys = [pick.getrandbits(128) for _ in range(entries)]
        table.set_many(dict.fromkeys(keys, 1))
        table.save()
        caller_cpu, caller_wall, total_cpu = [], [], []
        for n in range(repeats):
            table.set_many({k: n + 2 for k in pick.sample(keys, IDS_PER_CALL)})
            cpu, wall, process = time.thread_time(), time.perf_counter(), time.process_time()
            saving = table.save_if_due()
            caller_cpu.append((time.thread_time() - cpu) * 1000)
            caller_wall.append((time.perf_counter() - wall) * 1000)
            if isinstance(saving, threading.Thread):
                saving.join()
            total_cpu.append((time.process_time() - process) * 1000)
    return {
        "caller_cpu_ms": summary(caller_cpu),
        "caller_wall_ms": summary(caller_wall),
        "process_cpu_ms": summary(total_cpu),
    }


def worker(memories: int, calls: int, repeats: int, sizes: list[int]) -> dict[str, Any]:
    return {
        "increment_cpu_ms": asyncio.run(increments(memories, calls)),
        **{f"save_{size}": saves(size, repeats) for size in sizes},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=300, help="increments timed per run")
    parser.add_argument("--repeats", type=int, default=30, help="saves timed per size and run")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=2, help="runs per tree, interleaved")
    parser.add_argument("--baseline-tree", type=Path, default=None)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        sys.path.insert(0, str(args.worker))
        result = worker(args.memories, args.calls, args.repeats, args.sizes)
        print(json.dumps(result))
        return
    if args.smoke:
        args.memories, args.calls, args.repeats, args.sizes, args.rounds = 300, 10, 3, [1_000], 1
    trees = [("this", ROOT)]
    if args.baseline_tree is not None:
        trees.insert(0, ("baseline", args.baseline_tree.resolve()))
    for round_ in range(args.rounds):
        for name, tree in trees:
            argv = [sys.executable, __file__, "--worker", str(tree)]
            argv += ["--memories", str(args.memories), "--calls", str(args.calls)]
            argv += ["--repeats", str(args.repeats), "--sizes", *map(str, args.sizes)]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                raise SystemExit(f"worker for {tree} failed")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps({"name": name, "round": round_, **result}), flush=True)


if __name__ == "__main__":
    main()
