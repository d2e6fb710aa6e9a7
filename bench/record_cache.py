"""What does the record cache's bound cost a search of a store larger than the old bound? (adr/0182)

One process, one store of ``--memories`` real-text memories seeded as ``bench/pipeline.py``
seeds it, copied once per bound in ``--entries`` and each copy opened with that
``store.record_cache_entries`` and its warm-up awaited (a store larger than its bound is not
warmed: its searches read the payloads they miss and ask the engine for the neighbour turns).
Each new LoCoMo question goes through every copy's ``_search_near_sync`` (top_k, lexical
candidates and neighbour seeds as the chat pipeline asks), the copies' order swapped each
question, each call after a 3 ms sleep (a served search follows such a gap). Reports per bound
the wall p50/p90 ms, the calling thread's CPU p50 ms (the engine's pool not included), the
paired difference against the first bound, and whether every copy found the same hits and
neighbour turns (records, cosines, order) as the first.

    .venv/bin/python bench/record_cache.py --smoke                          # seconds, for CI
    .venv/bin/python bench/record_cache.py --memories 100000 --questions 400   # ~3 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pipeline
from bench.lib import realtext
from proxy.defaults import (
    MEMORY_TOP_K,
    NEIGHBOUR_CANDIDATES,
    NEIGHBOUR_WINDOW_S,
    RECORD_CACHE_ENTRIES,
)
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.store import Found, SearchQuery

IDLE_S = 0.003  # before each measured call: what precedes a served search
WARM_UP = 30


def result_of(found: Found) -> tuple[list[Any], list[Any]]:
    """What a search returned, comparable: hits and neighbour turns with their records."""
    return (
        [(hit.record, round(hit.similarity, 6)) for hit in found.hits],
        [(turn.record, round(turn.similarity, 6)) for turn in found.turns or []],
    )


async def run(memories: int, questions: int, bounds: list[int]) -> None:
    embedder = StaticEmbedder()
    tenant = pipeline.bench_tenant()
    text = "real" if realtext.available() else "synthetic"
    if text == "synthetic":  # a machine without the data still smoke-tests the machinery
        print("LoCoMo data absent: synthetic text", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="memproxy-record-cache-") as where:
        seeded = Path(where) / "seeded"
        store = await EdgeStore.open(seeded, dimensions=embedder.dimensions)
        try:
            await pipeline.seed_store(store, embedder, tenant, memories, text)
        finally:
            await store.close()
        stores: dict[int, EdgeStore] = {}
        try:
            for bound in bounds:
                copy = Path(where) / f"bound-{bound}"
                shutil.copytree(seeded, copy)
                stores[bound] = store = await EdgeStore.open(
                    copy, dimensions=embedder.dimensions, record_cache_entries=bound
                )
                print(f"bound {bound}: warmed {await store.warmed()} memories", file=sys.stderr)
            texts = (
                list(itertools.islice(realtext.RealText().questions(), questions + WARM_UP))
                if text == "real"
                else [f"what did memory number {i} say about the trip" for i in range(questions)]
            )
            wall, cpu, equal = measure(stores, tenant, embedder, texts)
        finally:
            for store in stores.values():
                await store.close()
    first = bounds[0]
    for bound in bounds:
        paired = [a - b for a, b in zip(wall[bound], wall[first], strict=True)]
        print(
            f"bound {bound:>7}: wall p50 {statistics.median(wall[bound]):.3f} ms"
            f"  p90 {statistics.quantiles(wall[bound], n=10)[-1]:.3f}"
            f"  thread CPU p50 {statistics.median(cpu[bound]):.3f}"
            f"  paired vs {first} p50 {statistics.median(paired):+.3f}"
            f"  results equal {equal[bound]}/{len(wall[bound])}"
        )


def measure(
    stores: dict[int, EdgeStore], tenant: str, embedder: StaticEmbedder, texts: list[str]
) -> tuple[dict[int, list[float]], dict[int, list[float]], dict[int, int]]:
    """Wall and thread-CPU ms per bound, and per bound how many results equalled the first's."""
    wall: dict[int, list[float]] = {bound: [] for bound in stores}
    cpu: dict[int, list[float]] = {bound: [] for bound in stores}
    equal = dict.fromkeys(stores, 0)
    bounds = list(stores)
    for number, text in enumerate(texts):
        vector = embedder.embed_sync([text])[0]
        query = SearchQuery(
            vector, text, "", None, MEMORY_TOP_K, live_at=datetime.now(UTC), lexical=True
        )
        found: dict[int, Found] = {}
        for bound in bounds if number % 2 else bounds[::-1]:
            time.sleep(IDLE_S)
            began, began_cpu = time.perf_counter(), time.thread_time()
            found[bound] = stores[bound]._search_near_sync(
                tenant, query, vector, NEIGHBOUR_CANDIDATES, NEIGHBOUR_WINDOW_S
            )
            if number >= WARM_UP or len(texts) <= WARM_UP:
                wall[bound].append((time.perf_counter() - began) * 1e3)
                cpu[bound].append((time.thread_time() - began_cpu) * 1e3)
        if number >= WARM_UP or len(texts) <= WARM_UP:
            reference = result_of(found[bounds[0]])
            for bound in bounds:
                equal[bound] += result_of(found[bound]) == reference
    return wall, cpu, equal


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument(
        "--entries",
        default=f"20000,{RECORD_CACHE_ENTRIES}",
        help="comma list of record cache bounds, the first the reference",
    )
    args = parser.parse_args()
    if args.smoke:
        asyncio.run(run(300, 10, [100, RECORD_CACHE_ENTRIES]))
    else:
        bounds = [int(b) for b in args.entries.split(",") if b]
        asyncio.run(run(args.memories, args.questions, bounds))


if __name__ == "__main__":
    main()
