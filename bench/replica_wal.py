"""How a shard's WAL grows under payload-only writes: a primary against a worker's replica.

A store of ``--memories`` real-text memories (``bench/lib/realtext.py``, the real
``StaticEmbedder``), indexed and flushed. Then, on that store (the primary, its own flush policy
on, plus an explicit flush per round) and on a worker's ``ReplicaStore`` opened on it (which
flushes nothing, adr/0179), ``--rounds`` rounds of ``--writes`` payload-only updates each (a
usefulness ``set_payload`` through the store's ``ShardMaintenance``, as a vote applies), and
10,000 retrieval counts through the store's API first. After each round, the shard's ``wal``
directory: its files, their apparent and allocated sizes, and the bytes its segments hold (up
to each one's last non-zero byte), and the replica's shard generation (a build's swap makes a
new one: ``REPLICA_WAL_CUT_WRITES`` writes start one, adr/0184).

    .venv/bin/python bench/replica_wal.py --smoke      # seconds, for CI
    .venv/bin/python bench/replica_wal.py --memories 10000 --writes 100000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK = 1 << 20


def held_bytes(path: Path) -> int:
    """The offset just past the last non-zero byte: a segment's entries, before its zeros."""
    with path.open("rb") as file:
        end = path.stat().st_size
        while end > 0:
            start = max(0, end - CHUNK)
            file.seek(start)
            data = file.read(end - start).rstrip(b"\0")
            if data:
                return start + len(data)
            end = start
    return 0


def wal(shard: Path) -> dict[str, Any]:
    """The WAL's files, apparent and allocated MB, and MB its segments hold."""
    files = sorted(p for p in (shard / "wal").iterdir() if p.is_file())
    return {
        "files": [p.name for p in files],
        "apparent_mb": round(sum(p.stat().st_size for p in files) / 1e6, 2),
        "allocated_mb": round(sum(p.stat().st_blocks * 512 for p in files) / 1e6, 2),
        "held_mb": round(sum(held_bytes(p) for p in files if p.name != "first-index") / 1e6, 3),
    }


def payload_writes(store: Any, count: int, memories: int, salt: int) -> float:
    """``count`` usefulness updates spread over the store's memories; their seconds."""
    import qdrant_edge as qe

    start = time.perf_counter()
    for j in range(count):
        pid = store._point_id("t", f"m{(j * 7919 + salt) % memories}")
        value = round(0.3 + (j % 7) / 10, 2)
        store._maintenance.update(qe.UpdateOperation.set_payload([pid], {"usefulness": value}))
    return time.perf_counter() - start


def report(**row: Any) -> None:
    print(json.dumps(row), flush=True)


async def main(args: argparse.Namespace) -> None:
    from bench.flush_stall import real_records
    from proxy.memory.edge import SHARD_DIR, EdgeStore
    from proxy.memory.edge_maintenance import wait_for_build
    from proxy.memory.edge_shard import current_generation
    from proxy.memory.embedders import StaticEmbedder
    from proxy.memory.record_cache import DEFAULT_MAX_ENTRIES
    from proxy.memory.replica import ReplicaStore

    embedder = StaticEmbedder()
    records = real_records(args.memories)
    vectors = embedder.embed_sync([r.content for r in records])
    counts = [f"m{(j * 7919) % args.memories}" for j in range(10_000)]
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch)
        store = await EdgeStore.open(data, dimensions=embedder.dimensions, optimize_after=None)
        for i in range(0, args.memories, 1000):
            end = min(i + 1000, args.memories)
            store.add_sync(records[i:end], vectors[i:end])
        await store.optimize()
        await store.flush()
        primary = data / SHARD_DIR
        report(store="primary", step="loaded", wal=wal(primary))
        for memory_id in counts:
            await store.increment_retrievals("t", [memory_id])
        report(store="primary", step="10000 retrieval counts", wal=wal(primary))
        for r in range(args.rounds):
            took = payload_writes(store, args.writes, args.memories, r)
            await store.flush()
            report(store="primary", step=f"round {r}, flushed", s=round(took, 1), wal=wal(primary))
        await store.close()
        replica = await ReplicaStore.open(
            data,
            dimensions=embedder.dimensions,
            hybrid=True,
            record_cache_entries=DEFAULT_MAX_ENTRIES,
        )
        inner = replica._replica
        shard = replica.directory / SHARD_DIR
        report(store="replica", step="opened", wal=wal(shard))
        for memory_id in counts:
            await replica.increment_retrievals("t", [memory_id])
        report(store="replica", step="10000 retrieval counts", wal=wal(shard))
        for r in range(args.rounds):
            took = 0.0
            for chunk in range(0, args.writes, 10_000):
                took += payload_writes(inner, 10_000, args.memories, 100 + r + chunk)
                # A build started meanwhile ends before more writes come, as at a real rate;
                # at this one it would record past ``RECORD_LIMIT_POINTS`` and be abandoned.
                wait_for_build(shard)
            generation = current_generation(shard)
            report(
                store="replica",
                step=f"round {r}",
                s=round(took, 1),
                generation=generation,
                wal=wal(shard),
            )
        wait_for_build(shard)
        report(
            store="replica",
            step="builds done",
            generation=current_generation(shard),
            wal=wal(shard),
        )
        await replica.close()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=100_000, help="payload updates a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    args = parser.parse_args()
    if args.smoke:
        args.memories, args.writes, args.rounds = 300, 500, 1
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
