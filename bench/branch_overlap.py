"""Can a hybrid search's two branch queries overlap on two threads? (issue 14, item 2; adr/0167)

A chat search runs the dense and the BM25 query back to back on one store thread
(``edge_query.search_hits``). On a 2-core machine the BM25 query could run on a second thread
beside the dense one, or start before the question is embedded, if the engine let the GIL go
while it searches. One process, one store of ``--memories`` real-text memories seeded and
indexed as ``bench/pipeline.py`` seeds it (its default scope: tenant-shared memories), each
LoCoMo question's queries built first; before every measured call the process idles 3 ms (a
served search always follows such a gap), the variants shuffled question by question:

- ``dense``, ``bm25``: each branch query alone; ``back to back``: both on the calling thread
  (today); ``two threads``: the BM25 query handed to a second, waiting thread first, the dense
  query on the caller, then its result awaited. ``hand-off``: from the hand-off to the second
  thread starting its query. The same results either way (asserted).
- GIL probe: a second thread wakes every ~50 us to note the time; how often it ran during a
  dense query, during a ``hashlib`` digest of about the same length (lets the GIL go: the
  control that it can run) and during a Python loop of that length (holds the GIL).

    .venv/bin/python bench/branch_overlap.py --smoke      # seconds, for CI
    .venv/bin/python bench/branch_overlap.py              # 10k memories, 500 questions
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import hashlib
import itertools
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import qdrant_edge as qe  # noqa: E402

from bench import pipeline  # noqa: E402
from bench.lib import realtext  # noqa: E402
from proxy.memory import edge_query, lexical  # noqa: E402
from proxy.memory.edge import EdgeStore  # noqa: E402
from proxy.memory.embedders import StaticEmbedder  # noqa: E402
from proxy.memory.points import SPARSE_VECTOR  # noqa: E402
from proxy.memory.store import SearchQuery  # noqa: E402

IDLE_S = 0.003  # before each measured call: what precedes a served search
TICK_S = 0.00005
VARIANTS = ("dense", "bm25", "back to back", "two threads")


def branch_requests(
    store: EdgeStore, embedder: StaticEmbedder, tenant: str, texts: list[str], top_k: int
) -> list[tuple[qe.QueryRequest, qe.QueryRequest]]:
    """Each question's (dense, BM25) branch requests, built as ``search_hits`` builds them."""
    pairs = []
    for text in texts:
        indices, values = lexical.encode_query(text)
        if not indices:
            continue
        vector = embedder.embed_sync([text])[0]
        query = SearchQuery(vector, text, "", None, top_k, live_at=datetime.now(UTC))
        scope = edge_query.scope_filter(tenant, query, users=False, tenants=False)
        sparse = qe.Query.Nearest(qe.SparseVector(indices, values), using=SPARSE_VECTOR)
        pairs.append(
            (
                qe.QueryRequest(
                    limit=top_k,
                    query=edge_query.nearest(vector),
                    filter=scope,
                    with_payload=False,
                    params=edge_query.DENSE_PARAMS,
                ),
                qe.QueryRequest(limit=top_k, query=sparse, filter=scope, with_payload=False),
            )
        )
    return pairs


def ids(found: Any) -> list[tuple[Any, float]]:
    return [(point.id, point.score) for point in found]


def branches(shard: qe.EdgeShard, pairs: list[tuple[Any, Any]]) -> dict[str, list[float]]:
    """Wall ms per variant (and the hand-off), each call after an idle gap."""
    beside = ThreadPoolExecutor(1, thread_name_prefix="beside")
    beside.submit(lambda: None).result()
    timed: dict[str, list[float]] = {name: [] for name in (*VARIANTS, "hand-off")}

    def started(request: Any) -> tuple[Any, float]:
        at = time.perf_counter()
        return shard.query(request), at

    rng = random.Random(7)
    for dense, bm25 in pairs:
        order = list(VARIANTS)
        rng.shuffle(order)
        results = {}
        for name in order:
            time.sleep(IDLE_S)
            begin = time.perf_counter()
            if name == "dense":
                shard.query(dense)
            elif name == "bm25":
                shard.query(bm25)
            elif name == "back to back":
                results[name] = (shard.query(dense), shard.query(bm25))
            else:
                future = beside.submit(started, bm25)
                dense_found = shard.query(dense)
                bm25_found, at = future.result()
                timed["hand-off"].append((at - begin) * 1e3)
                results[name] = (dense_found, bm25_found)
            timed[name].append((time.perf_counter() - begin) * 1e3)
        one, other = results["back to back"], results["two threads"]
        if ids(one[0]) != ids(other[0]) or ids(one[1]) != ids(other[1]):
            raise SystemExit("the two ways found different hits")
    beside.shutdown()
    return timed


def gil_probe(shard: qe.EdgeShard, pairs: list[tuple[Any, Any]]) -> dict[str, list[float]]:
    """Per call: how many times a thread waking every ~50 us ran during it."""
    stamps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            time.sleep(TICK_S)
            stamps.append(time.perf_counter())

    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    # A digest as long as a dense query: hashlib lets the GIL go over large buffers.
    block = b"x" * 1_000_000
    begin = time.perf_counter()
    for _ in range(20):
        hashlib.sha256(block).digest()
    per_byte = (time.perf_counter() - begin) / 20 / len(block)
    spans: dict[str, list[tuple[float, float]]] = {"query": [], "digest": [], "python": []}
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    calls: list[tuple[str, Callable[[], object]]] = []
    for dense, _ in pairs:
        begin = time.perf_counter()
        shard.query(dense)
        length = time.perf_counter() - begin
        data = memoryview(block)[: min(len(block), int(length / per_byte))]
        calls = [
            ("query", lambda d=dense: shard.query(d)),
            ("digest", lambda b=data: hashlib.sha256(b).digest()),
            ("python", lambda s=length: spin(s)),
        ]
        for name, call in calls:
            time.sleep(IDLE_S)
            begin = time.perf_counter()
            call()
            spans[name].append((begin, time.perf_counter()))
    stop.set()
    ticker.join()
    return {
        name: [
            float(bisect.bisect_left(stamps, end) - bisect.bisect_right(stamps, begin))
            for begin, end in ranges
        ]
        for name, ranges in spans.items()
    }


async def run(memories: int, questions: int, top_k: int) -> None:
    embedder = StaticEmbedder()
    tenant = pipeline.bench_tenant()
    text = "real" if realtext.available() else "synthetic"
    if text == "synthetic":  # a machine without the data still smoke-tests the machinery
        print("LoCoMo data absent: synthetic text", file=sys.stderr)
    with tempfile.TemporaryDirectory() as where:
        store = await EdgeStore.open(Path(where), dimensions=embedder.dimensions)
        try:
            seconds = await pipeline.seed_store(store, embedder, tenant, memories, text)
            await store.warmed()
            print(f"seeded {memories} memories in {seconds:.1f} s", file=sys.stderr)
            texts = (
                list(itertools.islice(realtext.RealText().questions(), questions))
                if text == "real"
                else [f"what did memory number {i} say about the trip" for i in range(questions)]
            )
            pairs = branch_requests(store, embedder, tenant, texts, top_k)
            shard = store._shard  # the bench measures the engine's calls themselves
            timed = branches(shard, pairs)
            ticks = gil_probe(shard, pairs)
        finally:
            await store.close()
    print(f"{len(pairs)} questions with BM25 terms, {memories} memories, limit {top_k}")
    print(f"{'branch queries':<16} {'p50 ms':>8} {'mean ms':>8}")
    for name, values in timed.items():
        print(f"{name:<16} {statistics.median(values):>8.3f} {statistics.mean(values):>8.3f}")
    print(f"{'GIL probe':<16} {'ticks p50':>9} {'calls with a tick':>18}")
    for name, counts in ticks.items():
        share = sum(count > 0 for count in counts) / len(counts)
        print(f"{name:<16} {statistics.median(counts):>9.0f} {share:>18.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--top-k", type=int, default=50)
    args = parser.parse_args()
    memories, questions = (300, 20) if args.smoke else (args.memories, args.questions)
    asyncio.run(run(memories, questions, args.top_k))


if __name__ == "__main__":
    main()
