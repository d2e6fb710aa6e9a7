"""How long does a shard flush hold the GIL, by what was written since the last one? (issue 14,
item 5)

A store of ``--memories`` real-text memories (``bench/lib/realtext.py``, the real
``StaticEmbedder``), indexed as a served store is. Then, per round and per case (interleaved):
``k`` new memories written through ``EdgeStore.add_sync`` (k = 0, 1, 10, 100, 1,000), or ``k``
payload-only updates (``set_payload`` of usefulness, as feedback writes), then one flush on a
thread, as the background flush runs, while the main thread ticks every 5 ms: the longest gap
between ticks is how long the flush held the GIL (an event loop would have frozen as long),
and the flush thread's CPU time (the rest is waiting for the disk's syncs).
The background flush is switched off meanwhile. ``--reopen`` also copies the data dir before
each flush and times opening the copy: the WAL replay a crash there would cost at restart.

``--steady SECONDS`` instead writes one memory at a time at ``--rate`` a second through
``EdgeStore.add`` on an event loop whose ticker wakes every 5 ms, with the tree's own background
flush policy on, into a store of ``--memories``: the loop's lag p50/p99/max, ticks over 100 ms
and the flushes started. Each tree runs in a process of its own, interleaved over ``--rounds``.
``--replica`` writes through a worker's ``ReplicaStore`` on that store (the primary) instead, as
a worker under capture does; each row also gives the flushes of the close and its time.
``--votes`` sets a memory's usefulness instead of adding one (feedback: a payload-only update).

    .venv/bin/python bench/flush_stall.py --smoke
    .venv/bin/python bench/flush_stall.py --memories 10000 --rounds 3 --reopen
    git -C /work/main archive <commit> | tar -x -C /tmp/memproxy-before
    .venv/bin/python bench/flush_stall.py --steady 60 --baseline-tree /tmp/memproxy-before
    .venv/bin/python bench/flush_stall.py --steady 60 --replica --baseline-tree /tmp/memproxy-before
    .venv/bin/python bench/flush_stall.py --steady 60 --votes --rate 2 --baseline-tree /tmp/before
    .venv/bin/python bench/flush_stall.py --memories 10000 --baseline-tree /tmp/memproxy-before

With ``--baseline-tree`` the flushes too run per tree in a process of its own, one round each,
the trees alternating per round (each process loads its own store).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if "--tree" in sys.argv:  # a worker measures the tree it is given
    sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
else:
    sys.path.insert(0, str(ROOT))
TICK_S = 0.005


def held(action: Any, cpu: list[float] | None = None) -> tuple[float, float]:
    """Run ``action`` on a thread; return (its wall seconds, the main thread's longest gap).
    ``cpu`` gets the thread's CPU seconds: the rest of the wall time is waiting (the disk)."""
    done = threading.Event()
    took = [0.0]

    def run() -> None:
        start, start_cpu = time.perf_counter(), time.thread_time()
        action()
        took[0] = time.perf_counter() - start
        if cpu is not None:
            cpu.append(time.thread_time() - start_cpu)
        done.set()

    gaps: list[float] = []
    thread = threading.Thread(target=run)
    last = time.perf_counter()
    thread.start()
    while not done.is_set():
        time.sleep(TICK_S)
        now = time.perf_counter()
        gaps.append(now - last - TICK_S)
        last = now
    thread.join()
    return took[0], max(gaps, default=0.0)


def real_records(total: int) -> list[Any]:
    from bench.lib import realtext
    from proxy.context.records import MemoryRecord

    # Built here, not in bench/lib: the worker imports the tree under test's bench/lib first,
    # and a baseline tree from before a shared builder would not have it.
    if realtext.available():
        texts = list(realtext.RealText().texts(total))
    else:  # a machine without the data still smoke-tests the benchmark's machinery
        print("LoCoMo data absent: synthetic text", file=sys.stderr)
        texts = [("learnings", f"synthetic memory number {i}") for i in range(total)]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return [
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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def steady(args: argparse.Namespace) -> dict[str, Any]:
    """Writes at a steady rate with the tree's own flush policy; the event loop's lag."""
    import proxy
    from proxy.memory.edge import EdgeStore
    from proxy.memory.embedders import StaticEmbedder

    embedder = StaticEmbedder()
    writes = int(args.steady * args.rate)
    records = real_records(args.memories + writes)
    vectors = embedder.embed_sync([r.content for r in records])
    with tempfile.TemporaryDirectory() as scratch:
        store = await EdgeStore.open(Path(scratch), dimensions=embedder.dimensions)
        for i in range(0, args.memories, 1000):
            end = min(i + 1000, args.memories)
            store.add_sync(records[i:end], vectors[i:end])
        await store.optimize()
        await store.flush()
        maintenance = store._maintenance
        if args.replica:  # that store is the primary: the writes go to a worker's replica
            from proxy.memory.record_cache import DEFAULT_MAX_ENTRIES
            from proxy.memory.replica import ReplicaStore

            await store.close()
            store = await ReplicaStore.open(  # type: ignore[assignment]
                Path(scratch),
                dimensions=embedder.dimensions,
                hybrid=True,
                record_cache_entries=DEFAULT_MAX_ENTRIES,
            )
            maintenance = store._replica._maintenance  # type: ignore[attr-defined]
        flushes = [0]
        plain = maintenance.flush

        def counted() -> None:
            flushes[0] += 1
            plain()

        maintenance.flush = counted  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        lags: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                due = loop.time() + TICK_S
                await asyncio.sleep(TICK_S)
                lags.append(max(0.0, loop.time() - due) * 1000)

        ticking = asyncio.ensure_future(ticker())
        start = loop.time()
        for n in range(writes):
            at = start + n / args.rate
            await asyncio.sleep(max(0.0, at - loop.time()))
            if args.votes:  # a feedback vote: a payload-only update (adr/0188)
                await store.set_usefulness("t", f"m{(n * 7919) % args.memories}", 0.5 + n % 2 / 4)
                continue
            i = args.memories + n
            await store.add(records[i : i + 1], vectors[i : i + 1])
        await asyncio.sleep(args.tail)  # the writes have paused: a quiet flush may start
        stop.set()
        await ticking
        background = flushes[0]
        closing = time.perf_counter()
        await store.close()
        closed_s = time.perf_counter() - closing
        maintenance.flush = plain  # type: ignore[method-assign]
    return {
        "tree": str(Path(proxy.__file__).parents[1]),
        "writes": writes,
        "background_flushes": background,
        "close_flushes": flushes[0] - background,
        "close_ms": closed_s * 1000,
        "lag_p50_ms": percentile(lags, 0.5),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_p999_ms": percentile(lags, 0.999),
        "lag_max_ms": max(lags),
        "ticks_over_50ms": sum(lag > 50 for lag in lags),
        "ticks_over_100ms": sum(lag > 100 for lag in lags),
        "lag_over_50ms_s": sum(lag for lag in lags if lag > 50) / 1000,  # the loop frozen
        "ticks": len(lags),
    }


def compare(args: argparse.Namespace) -> None:
    """Run ``steady``, or one round of the flushes (``main``), per tree in processes of their
    own, the trees interleaved per round."""
    trees = [str(ROOT)] + ([args.baseline_tree] if args.baseline_tree else [])
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    passed = [a for a in sys.argv[1:] if a != "--baseline-tree" and a != args.baseline_tree]
    if not args.steady:
        passed += ["--rounds", "1"]  # each worker one round: the trees alternate per round
    for _ in range(args.rounds):
        for tree in reversed(trees):
            argv = [sys.executable, __file__, *passed, "--worker", "--tree", tree]
            out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=tree)
            row = json.loads(out.stdout.splitlines()[-1])
            rows[tree].append(row if args.steady else flat(row["median"]))
            print(tree, rows[tree][-1], file=sys.stderr)
    for tree, runs in rows.items():
        keys = [k for k in runs[0] if k != "tree"]
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        if args.steady:
            print(f"{tree}: " + "  ".join(f"{k} {v:.1f}" for k, v in med.items()))
            continue
        print(tree)
        for case in dict.fromkeys(k.split(":")[0] for k in keys):
            cells = "  ".join(
                f"{k.split(':')[1]} {v * 1000:8.1f} ms"
                for k, v in med.items()
                if k.startswith(case + ":")
            )
            print(f"{case:>14}  {cells}")
    print(json.dumps(rows))


def flat(median: dict[str, dict[str, float]]) -> dict[str, float]:
    """One worker's per-case medians as one row: ``"<case>:<figure>"`` keys."""
    return {f"{case}:{key}": value for case, row in median.items() for key, value in row.items()}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import qdrant_edge as qe

    from proxy.memory import edge_maintenance
    from proxy.memory.edge import SHARD_DIR, EdgeStore
    from proxy.memory.embedders import StaticEmbedder

    edge_maintenance.FLUSH_AFTER_POINTS = 10**9  # this script flushes by hand
    edge_maintenance.FLUSH_QUIET_S = 86_400.0  # a timer takes no infinity
    edge_maintenance.FLUSH_MAX_AGE_S = 86_400.0
    embedder = StaticEmbedder()
    extra = sum(args.writes) * args.rounds
    records = real_records(args.memories + extra)
    vectors = embedder.embed_sync([r.content for r in records])
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        store = await EdgeStore.open(data, dimensions=embedder.dimensions, optimize_after=None)
        start = time.perf_counter()
        for i in range(0, args.memories, 1000):
            store.add_sync(
                records[i : min(i + 1000, args.memories)], vectors[i : min(i + 1000, args.memories)]
            )
        await store.optimize()
        store._maintenance.flush()
        print(f"loaded {args.memories} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
        cursor = args.memories
        for _ in range(args.rounds):
            for kind in ("add", "payload"):
                for k in args.writes:
                    if kind == "add":
                        store.add_sync(records[cursor : cursor + k], vectors[cursor : cursor + k])
                        cursor += k
                    else:
                        for j in range(k):
                            pid = store._point_id("t", f"m{(j * 7919) % args.memories}")
                            op = qe.UpdateOperation.set_payload([pid], {"usefulness": 0.5})
                            store._maintenance.update(op)
                    row: dict[str, float] = {}
                    if args.reopen:
                        copy = Path(scratch) / "copy"
                        shutil.copytree(data, copy, symlinks=True)
                        opening = time.perf_counter()
                        shard = qe.EdgeShard.load(str(copy / SHARD_DIR))
                        row["reopen_s"] = time.perf_counter() - opening
                        shard.close()
                        shutil.rmtree(copy)
                    cpu: list[float] = []
                    wall, gap = held(store._maintenance.flush, cpu)
                    row.update(flush_s=wall, gil_held_s=gap, flush_cpu_s=cpu[0])
                    results.setdefault(f"{kind} {k}", []).append(row)
        await store.close()
    summary = {
        case: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for case, rows in results.items()
    }
    return {"memories": args.memories, "rounds": args.rounds, "median": summary}


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writes", type=int, nargs="+", default=[0, 1, 10, 100, 1000])
    parser.add_argument("--reopen", action="store_true")
    parser.add_argument("--steady", type=float, help="seconds of steady writes per tree")
    parser.add_argument("--rate", type=float, default=100.0, help="steady writes a second")
    parser.add_argument("--tail", type=float, default=3.0, help="seconds after the writes")
    parser.add_argument(
        "--replica", action="store_true", help="--steady: write through a worker's replica"
    )
    parser.add_argument(
        "--votes", action="store_true", help="--steady: vote (set usefulness) instead of adding"
    )
    parser.add_argument("--baseline-tree", help="another checkout to compare with")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    args = parser.parse_args()
    if args.smoke:
        args.memories, args.rounds, args.writes, args.reopen = 300, 1, [0, 10], True
        for replica, votes in ((False, False), (True, False), (False, True)):
            smoke = argparse.Namespace(
                **{**vars(args), "steady": 1, "replica": replica, "votes": votes}
            )
            print(json.dumps(asyncio.run(steady(smoke))))
    if args.steady:
        if args.worker:
            print(json.dumps(asyncio.run(steady(args))))
        else:
            compare(args)
        return
    if args.baseline_tree and not args.worker:
        compare(args)
        return
    report = asyncio.run(main(args))
    for case, row in report["median"].items():
        cells = "  ".join(f"{k} {v * 1000:8.1f} ms" for k, v in row.items())
        print(f"{case:>14}  {cells}")
    print(json.dumps(report))


if __name__ == "__main__":
    cli()
