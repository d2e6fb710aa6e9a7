"""What does each engine query of a chat search cost, and what would fewer calls save? (issue 14)

A chat search (``EdgeStore.search_near``: top_k, lexical candidates, neighbour seeds, as the
chat pipeline asks) makes 3-4 engine ``query`` calls: the dense branch, the BM25 branch, the
dense cosines of the lexical-only hits by id, and, when a seed has turns beside it, the
neighbour turns' cosines by id. One process, one store of ``--memories`` real-text memories
seeded and indexed as ``bench/pipeline.py`` seeds it (its search pool as served). Each question
first goes through ``_search_near_sync`` with the shard's requests recorded; then each recorded
request and each variant runs alone after a 3 ms sleep (a served search always follows such a
gap), the variants in a new random order per question:

- the recorded queries alone, and a by-id query of one id (what a call costs at least);
- fewer calls: both branches in one ``query_batch``; BM25 first, then the dense branch and the
  cosines of every BM25 hit in one batch; the engine's fused query (``Fusion.Rrf``, whose order
  is compared with ``fusion.fuse_ranks``'s); the BM25 hits rescored by the dense vector through
  a prefetch; the lexical-only hits and the neighbour turns in one by-id query;
- the dense branch at other ``hnsw_ef``, oversampling, without the int8 copies, or as an exact
  scan, with its top-k recall against an exact search of the originals.

Also counted: how often the neighbour turns' cosines were already among the dense branch's hits
(the query could be skipped) and how often the seeds were all dense hits (the two by-id queries
could be one).

    .venv/bin/python bench/engine_queries.py --smoke      # seconds, for CI
    .venv/bin/python bench/engine_queries.py              # 10k memories, 400 questions
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import qdrant_edge as qe  # noqa: E402

from bench import pipeline  # noqa: E402
from bench.lib import realtext  # noqa: E402
from proxy.composition import search_threads  # noqa: E402
from proxy.defaults import MEMORY_TOP_K, NEIGHBOUR_CANDIDATES, NEIGHBOUR_WINDOW_S  # noqa: E402
from proxy.memory import edge_query, lexical  # noqa: E402
from proxy.memory.edge import EdgeStore  # noqa: E402
from proxy.memory.embedders import StaticEmbedder  # noqa: E402
from proxy.memory.fusion import RRF_K, fuse_ranks  # noqa: E402
from proxy.memory.near import ranked, turns_query  # noqa: E402
from proxy.memory.points import SPARSE_VECTOR  # noqa: E402
from proxy.memory.store import SearchQuery  # noqa: E402
from proxy.settings import StoreSettings  # noqa: E402

IDLE_S = 0.003  # before each measured call: what precedes a served search
WARM_UP = 20
OVERSAMPLING = edge_query.RESCORE_OVERSAMPLING


class Recorder:
    """The shard, recording every query's request and result."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self.shard = shard
        self.log: list[tuple[Any, list[Any]]] = []

    def query(self, request: qe.QueryRequest) -> list[Any]:
        found = self.shard.query(request)
        self.log.append((request, found))
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


def ids(found: list[Any]) -> list[Any]:
    return [point.id for point in found]


def by_id(dense: qe.Query, wanted: set[Any]) -> qe.QueryRequest:
    """Cosines of ``wanted`` as ``edge_query`` asks for them."""
    return qe.QueryRequest(
        limit=len(wanted),
        query=dense,
        filter=qe.Filter(must=[qe.HasIdCondition(wanted)]),
        with_payload=False,
        params=edge_query.FEW_PARAMS,
    )


def dense_variants(dense: qe.Query, top_k: int) -> dict[str, qe.QueryRequest]:
    """The dense branch with other parameters; ``exact``: the originals, scanned."""

    def request(ef: int, *, ignore: bool = False, over: float = OVERSAMPLING, exact: bool = False):
        quantization = (
            qe.QuantizationSearchParams(ignore=True)
            if ignore
            else qe.QuantizationSearchParams(rescore=True, oversampling=over)
        )
        params = qe.SearchParams(hnsw_ef=ef, exact=exact, quantization=quantization)
        return qe.QueryRequest(limit=top_k, query=dense, with_payload=False, params=params)

    main = edge_query.HNSW_EF
    return {
        "exact": request(main, ignore=True, exact=True),
        f"ef {main} (main)": request(main),
        "ef 192": request(192),
        "ef 128": request(128),
        "oversampling 2": request(main, over=2.0),
        f"originals only, ef {main}": request(main, ignore=True),
        "exact scan of the int8 copies": request(main, exact=True),
    }


def variant_calls(
    shard: qe.EdgeShard,
    log: list[tuple[Any, list[Any]]],
    dense: qe.Query,
    sparse: qe.Query,
    top_k: int,
) -> tuple[dict[str, Callable[[], Any]], dict[str, qe.QueryRequest]]:
    """The recorded queries and their variants, each a call; the dense variants' requests."""
    (dense_request, _), (bm25_request, bm25_found), (cosines_request, cosines_found) = log[:3]
    bm25_ids = ids(bm25_found)
    all_bm25 = by_id(dense, set(bm25_ids))
    one = by_id(dense, {bm25_ids[-1]})
    fused = qe.QueryRequest(
        limit=top_k,
        query=qe.Fusion.Rrf(k=RRF_K),
        prefetches=[
            qe.Prefetch(limit=top_k, query=dense, params=edge_query.DENSE_PARAMS),
            qe.Prefetch(limit=top_k, query=sparse),
        ],
        with_payload=False,
    )
    rescored = qe.QueryRequest(
        limit=top_k,
        query=dense,
        prefetches=[qe.Prefetch(limit=top_k, query=sparse)],
        with_payload=False,
        params=edge_query.FEW_PARAMS,
    )
    variants = dense_variants(dense, top_k)
    calls: dict[str, Callable[[], Any]] = {
        "dense branch": lambda: shard.query(dense_request),
        "BM25 branch": lambda: shard.query(bm25_request),
        "lexical-only cosines by id": lambda: shard.query(cosines_request),
        "one id by id": lambda: shard.query(one),
        "three queries back to back (main)": lambda: (
            shard.query(dense_request),
            shard.query(bm25_request),
            shard.query(cosines_request),
        ),
        "batch(dense, BM25), then cosines": lambda: (
            shard.query_batch(qe.QueryBatchRequest([dense_request, bm25_request])),
            shard.query(cosines_request),
        ),
        "BM25, then batch(dense, all BM25 cosines)": lambda: (
            shard.query(bm25_request),
            shard.query_batch(qe.QueryBatchRequest([dense_request, all_bm25])),
        ),
        "fused query (Fusion.Rrf)": lambda: shard.query(fused),
        "BM25 hits rescored through a prefetch": lambda: shard.query(rescored),
        **{f"dense: {name}": (lambda r=r: shard.query(r)) for name, r in variants.items()},
    }
    if len(log) > 3:
        turns_request, turns_found = log[3]
        both = by_id(dense, set(ids(cosines_found)) | set(ids(turns_found)))
        calls["neighbour cosines by id"] = lambda: shard.query(turns_request)
        calls["cosines, then neighbour cosines"] = lambda: (
            shard.query(cosines_request),
            shard.query(turns_request),
        )
        calls["cosines and neighbours in one query"] = lambda: shard.query(both)
    return calls, variants


def measure(
    store: EdgeStore, embedder: StaticEmbedder, tenant: str, texts: list[str], top_k: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
    """Wall ms per query kind and variant, recall per dense variant, and the counts."""
    recorder = Recorder(store._maintenance.shard)
    shard = recorder.shard
    store._maintenance.shard = recorder  # the bench records the store's own requests
    timed: dict[str, list[float]] = {}
    recall: dict[str, list[float]] = {}
    counts = dict.fromkeys(
        ("searches", "queries", "lookups", "turns known", "seeds all dense", "fused equal"), 0
    )
    rng = random.Random(7)
    try:
        for number, text in enumerate(texts):
            vector = embedder.embed_sync([text])[0]
            query = SearchQuery(
                vector, text, "", None, top_k, live_at=datetime.now(UTC), lexical=True
            )
            recorder.log = []
            found = store._search_near_sync(
                tenant, query, vector, NEIGHBOUR_CANDIDATES, NEIGHBOUR_WINDOW_S
            )
            log = recorder.log
            indices, values = lexical.encode_query(text)
            if number < WARM_UP or len(log) < 3 or not indices:
                continue  # a search without BM25 terms or lexical-only hits: not the usual one
            counts["searches"] += 1
            counts["queries"] += len(log)
            dense_found, bm25_found = log[0][1], log[1][1]
            dense = edge_query.nearest(vector)
            sparse = qe.Query.Nearest(qe.SparseVector(indices, values), using=SPARSE_VECTOR)
            bm25_ids = ids(bm25_found)
            calls, variants = variant_calls(shard, log, dense, sparse, top_k)
            if len(log) > 3:
                counts["lookups"] += 1
                turns_found = log[3][1]
                dense_ids = set(ids(dense_found))
                counts["turns known"] += set(ids(turns_found)) <= dense_ids
                chosen, _ = turns_query(
                    query, ranked(found.hits), NEIGHBOUR_CANDIDATES, NEIGHBOUR_WINDOW_S
                )
                keys = set(store._ids.scored(dense_found))
                counts["seeds all dense"] += all(
                    edge_query.key_of(store._point_id(tenant, seed.record.id)) in keys
                    for seed in chosen
                )
            order = list(calls)
            rng.shuffle(order)
            results = {}
            for name in order:
                time.sleep(IDLE_S)
                begin = time.perf_counter()
                results[name] = calls[name]()
                timed.setdefault(name, []).append((time.perf_counter() - begin) * 1e3)
            mine = [
                key for key, _ in fuse_ranks([ids(dense_found), bm25_ids], k=RRF_K, limit=top_k)
            ]
            counts["fused equal"] += ids(results["fused query (Fusion.Rrf)"]) == mine
            truth = set(ids(results["dense: exact"]))
            for name in variants:
                hits = set(ids(results[f"dense: {name}"]))
                recall.setdefault(name, []).append(len(hits & truth) / max(1, len(truth)))
            cosines = {p.id: p.score for p in log[2][1]}
            through = {p.id: p.score for p in results["BM25 hits rescored through a prefetch"]}
            if any(through.get(key, score) != score for key, score in cosines.items()):
                raise SystemExit("the prefetch rescoring gave other cosines than the by-id query")
    finally:
        store._maintenance.shard = shard
    return timed, recall, counts


async def run(memories: int, questions: int, top_k: int) -> None:
    embedder = StaticEmbedder()
    tenant = pipeline.bench_tenant()
    text = "real" if realtext.available() else "synthetic"
    if text == "synthetic":  # a machine without the data still smoke-tests the machinery
        print("LoCoMo data absent: synthetic text", file=sys.stderr)
    with tempfile.TemporaryDirectory() as where:
        # The pool a one-worker server gives its store (adr/0131), not the engine's default.
        threads = search_threads(StoreSettings(), workers=1)
        store = await EdgeStore.open(
            Path(where), dimensions=embedder.dimensions, search_threads=threads
        )
        try:
            seconds = await pipeline.seed_store(store, embedder, tenant, memories, text)
            await store.warmed()
            print(
                f"seeded {memories} memories in {seconds:.1f} s, search pool {threads}",
                file=sys.stderr,
            )
            asked = questions + WARM_UP
            texts = (
                list(itertools.islice(realtext.RealText().questions(), asked))
                if text == "real"
                else [f"what did memory number {i} say about the trip" for i in range(asked)]
            )
            timed, recall, counts = measure(store, embedder, tenant, texts, top_k)
        finally:
            await store.close()
    if not timed:
        print("no search made all three branch queries: nothing measured")
        return
    searches = counts["searches"]
    print(
        f"{counts['searches']} searches, {counts['queries'] / searches:.2f} queries each;"
        f" neighbour lookups {counts['lookups']}, their turns all dense hits"
        f" {counts['turns known']}, their seeds all dense hits {counts['seeds all dense']};"
        f" fused query in fuse_ranks's order {counts['fused equal']}"
    )
    width = max(map(len, timed))
    for name, values in sorted(timed.items(), key=lambda item: statistics.median(item[1])):
        extra = (
            f"  recall@{top_k} {statistics.mean(recall[name[7:]]):.4f}"
            if name[7:] in recall
            else ""
        )
        print(
            f"{name:<{width}}  n {len(values):4d}  p50 {statistics.median(values):.3f} ms"
            f"  mean {statistics.mean(values):.3f}{extra}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, for CI")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--top-k", type=int, default=MEMORY_TOP_K)
    args = parser.parse_args()
    if args.smoke:
        asyncio.run(run(300, 10, 20))
    else:
        asyncio.run(run(args.memories, args.questions, args.top_k))


if __name__ == "__main__":
    main()
