"""Memory store benchmark: filtered search latency, import throughput, hybrid evidence recall.

Three questions about ``proxy.memory.edge.EdgeStore`` (ADRs 0010-0012, docs/benchmarks.md):

1. Search: filtered top-50 p50/p99 *including the query embedding* (the real ``StaticEmbedder``)
   at 100k memories in one tenant and at 1M memories over 1,000 tenants. By default the
   memories are real text (``bench/lib/realtext.py``: LoCoMo items, then generated ones) with
   their static embeddings, and every search asks a new LoCoMo question. ``--text synthetic``
   stores eight-word template texts with random unit vectors and cycles eight fixed queries
   (the figures before issue 14).
2. Import throughput (memories/s through ``add`` in batches: token counting, BM25 encoding,
   payloads, WAL; the embedding is done before and timed apart), then the index build
   (``optimize``) time, reported separately.
3. The cost of keeping the synchronous shard off the event loop: one search inline versus
   through the store's thread pool.
4. ``--recall``: LoCoMo dev evidence recall@k for dense-only versus hybrid (BM25 + RRF), reading
   the data from ``/work/shared/bench/locomo`` (never copied). ``--prune-share 0.05`` adds
   hybrid with the BM25 query's common terms dropped (a prototype, issue 14).
5. ``--ef-recall``: the dense query's top-k recall against an exact search (originals, no
   int8) at several ``hnsw_ef``, on ``--size`` real-text memories seeded as ``bench/pipeline.py``
   seeds them (tenant-shared, then ``optimize``): what the served store's graph finds.

Both dense-only and hybrid search are timed on the same store (hybrid is a search-time switch).

Run: ``.venv/bin/python bench/store.py`` (100k in one tenant, with the HNSW build: minutes);
``--size 1000000 --tenants 1000 --no-optimize --keep /tmp/store1m`` for the large case (tenant
filters narrow each search to ~1,000 points, no graph needed; ``--keep`` lets a second run reuse
the imported store); ``--recall`` for the retrieval study; ``--ef-recall --size 10000`` for
the graph's; ``--smoke`` for CI (seconds).
The machine is shared with other work: treat p99 as noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import qdrant_edge as qe

from bench import pipeline
from bench.lib import realtext
from bench.lib.locomo_data import CATEGORIES, build_memories, evidence_recall, questions
from bench.lib.report import save_results
from bench.lib.stats import format_table, summarize_ms
from proxy.context.records import SOURCES, MemoryRecord
from proxy.memory import lexical
from proxy.memory.edge import EdgeStore
from proxy.memory.edge_maintenance import unindexed_points
from proxy.memory.edge_query import RESCORE_OVERSAMPLING, scope_filter
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.inputs import MemoryInput
from proxy.memory.points import DENSE_VECTOR
from proxy.memory.service import MemoryService
from proxy.memory.store import SearchQuery

LOCOMO = Path("/work/shared/bench/locomo/locomo_dev.json")
SEED = 4
BATCH = 1_000
IMPORT_BATCH = 512  # the CLI's default batch
USERS = 5  # users per tenant; searches ask for u1's memories
PROGRESS_EVERY = 100_000
TOP_K = 50
RECALL_KS = (5, 10, 20, 50)
QUERIES = (
    "When did Caroline go to the LGBTQ support group?",
    "What does the user prefer for breakfast on weekends?",
    "Which database did we pick for the analytics service and why?",
    "What is the name of Melanie's dog?",
    "How should I format the quarterly report for finance?",
    "What did we decide about the deployment freeze in December?",
    "Where did John travel last summer with his family?",
    "What programming language does the team use for the backend?",
)
WORDS = [
    "project",
    "meeting",
    "deadline",
    "coffee",
    "budget",
    "travel",
    "family",
    "doctor",
    "birthday",
    "report",
    "server",
    "database",
    "garden",
    "painting",
    "concert",
    "hiking",
    "recipe",
    "invoice",
    "contract",
    "python",
    "kubernetes",
    "vacation",
    "museum",
    "library",
    "guitar",
    "marathon",
    "allergy",
    "apartment",
    "passport",
    "interview",
]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def synthetic_records(
    start: int, count: int, tenants: int, rng: np.random.Generator
) -> list[MemoryRecord]:
    """Records ``start..start+count`` spread round-robin over tenants, users and sources."""
    picks = rng.integers(0, len(WORDS), size=(count, 8))
    return [
        MemoryRecord(
            id=f"m{start + i}",
            tenant=f"t{(start + i) % tenants}",
            user=f"u{(start + i) // tenants % 5}",
            source=SOURCES[(start + i) % len(SOURCES)],
            content="The user mentioned "
            + " ".join(WORDS[j] for j in picks[i])
            + f" #{start + i}.",
            created_at=NOW - timedelta(minutes=start + i),
        )
        for i in range(count)
    ]


def unit_rows(count: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    rows = rng.standard_normal((count, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def tenant_inputs(
    source: realtext.RealText, tenant: int, size: int, tenants: int
) -> list[MemoryInput]:
    """Tenant ``tenant``'s share of ``size`` real-text items (a contiguous run of the stream),
    as validated inputs without ids, over five users: what an import of its history sends."""
    start, end = tenant * size // tenants, (tenant + 1) * size // tenants
    return [
        MemoryInput(
            content=content,
            user=f"u{(start + i) % USERS}",
            source=kind,
            created_at=NOW - timedelta(minutes=start + i),
        )
        for i, (kind, content) in enumerate(source.texts(end - start, start=start))
    ]


async def ingest_real(store: EdgeStore, size: int, tenants: int) -> dict[str, float]:
    """Import real-text memories tenant by tenant through ``MemoryService.import_batches`` (the
    path of ``memproxy memories import``: token counts, embedding, write hygiene, upsert).

    Making and validating the inputs is not timed (the CLI does it before its first write).
    """
    source = realtext.RealText()
    service = MemoryService(store, StaticEmbedder(), None)
    imported = cpu = 0.0
    stored = done = 0
    for tenant in range(tenants):
        inputs = tenant_inputs(source, tenant, size, tenants)
        chunks = [inputs[i : i + IMPORT_BATCH] for i in range(0, len(inputs), IMPORT_BATCH)]
        wall0, cpu0 = time.perf_counter(), time.process_time()
        async for records in service.import_batches(f"t{tenant}", chunks):
            stored += len({r.id for r in records})
        imported += time.perf_counter() - wall0
        cpu += time.process_time() - cpu0
        done += len(inputs)
        if done // PROGRESS_EVERY != (done - len(inputs)) // PROGRESS_EVERY:
            rate = f"{done:,} ({done / imported:,.0f}/s, {rss_mb():,.0f} MB)"
            print(f"  imported {rate}", file=sys.stderr, flush=True)  # stdout: the figures
    return {
        "memories": float(size),
        "stored": float(stored),
        "import_s": imported,
        "import_per_s": size / imported,
        "import_cpu_us_per_memory": cpu / size * 1e6,
        "rss_after_import_mb": rss_mb(),
    }


async def ingest_synthetic(store: EdgeStore, size: int, tenants: int) -> dict[str, float]:
    """Write ``size`` template memories with random vectors straight through ``add``."""
    rng = np.random.default_rng(SEED)
    imported = 0.0
    for start in range(0, size, BATCH):
        count = min(BATCH, size - start)
        records = synthetic_records(start, count, tenants, rng)
        vectors = unit_rows(count, store.dimensions, rng)
        started = time.perf_counter()
        await store.add(records, vectors)
        imported += time.perf_counter() - started
    return {"memories": float(size), "import_s": imported, "import_per_s": size / imported}


async def ingest(
    store: EdgeStore, size: int, tenants: int, optimize: bool, text: str
) -> dict[str, float]:
    """Write ``size`` memories; return the import figures and the index build's time."""
    if text == "real":
        figures = await ingest_real(store, size, tenants)
    else:
        figures = await ingest_synthetic(store, size, tenants)
    started = time.perf_counter()
    if optimize:
        await store.optimize()
    figures["optimize_s"] = time.perf_counter() - started if optimize else float("nan")
    return figures


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def search_latency(
    store: EdgeStore,
    embedder: StaticEmbedder,
    tenants: int,
    rounds: int,
    asked: Iterator[str] | None,
    seed: int,
) -> dict[str, Any]:
    """Filtered top-50 latency, embed + search, plus the inline-versus-offloaded comparison.

    Inline and offloaded calls alternate which goes first, so neither always gets warm caches.
    ``asked`` yields the questions (``None``: the synthetic ``QUERIES``); every phase takes new
    ones from the same stream, so no phase finds its records cached by an earlier one.
    """
    rng = np.random.default_rng(seed)
    end_to_end, embed_only, offloaded, inline = [], [], [], []
    for i in range(rounds):
        text = next(asked) if asked is not None else QUERIES[i % len(QUERIES)]
        tenant = f"t{int(rng.integers(0, tenants))}"
        t0 = time.perf_counter()
        vector = (await embedder.embed([text]))[0]
        t1 = time.perf_counter()
        query = SearchQuery(vector=vector, text=text, user="u1", sources=None, top_k=TOP_K)
        if i % 2:
            hits = await store.search(tenant, query)
            t2 = time.perf_counter()
            store.search_sync(tenant, query, vector)
            t3 = time.perf_counter()
            pool, direct = t2 - t1, t3 - t2
        else:
            store.search_sync(tenant, query, vector)
            t2 = time.perf_counter()
            hits = await store.search(tenant, query)
            t3 = time.perf_counter()
            pool, direct = t3 - t2, t2 - t1
        if not hits:
            raise RuntimeError(f"search in {tenant} found nothing")
        end_to_end.append(t1 - t0 + pool)
        embed_only.append(t1 - t0)
        offloaded.append(pool)
        inline.append(direct)
    return {
        "embed+search": summarize_ms(end_to_end),
        "embed": summarize_ms(embed_only),
        "search (thread pool)": summarize_ms(offloaded),
        "search (inline)": summarize_ms(inline),
    }


async def import_only(
    size: int, tenants: int, where: Path, optimize: bool, text: str
) -> dict[str, float]:
    """Build the store in ``where``, close it (flushed) and return the import figures."""
    store = await EdgeStore.open(where, dimensions=StaticEmbedder().dimensions, optimize_after=None)
    try:
        figures = await ingest(store, size, tenants, optimize, text)
    finally:
        started = time.perf_counter()
        await store.close()
    figures["close_s"] = time.perf_counter() - started
    return figures


def import_in_child(size: int, tenants: int, where: Path, optimize: bool, text: str) -> Any:
    """``import_only`` in a child process: the searches then run on a freshly opened store in
    a process that never imported, so its RSS is what serving the store costs."""
    argv = [sys.executable, __file__, "--import-only", "--size", str(size)]
    argv += ["--tenants", str(tenants), "--keep", str(where), "--text", text]
    argv += [] if optimize else ["--no-optimize"]
    done = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


async def run_search(
    size: int, tenants: int, rounds: int, keep: Path | None, optimize: bool, text: str
) -> dict[str, Any]:
    """Import (unless ``keep`` already holds a store) in a child process, then open the store
    and time dense and hybrid searches."""
    embedder = StaticEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        where = keep or Path(tmp)
        reuse = (where / "memories").is_dir()
        figures: dict[str, Any] = {}
        if reuse:
            print(f"reusing the store in {where}", flush=True)
        else:
            print(f"importing {size:,} memories over {tenants:,} tenants ...", flush=True)
            figures = import_in_child(size, tenants, where, optimize, text)
        rss_before = rss_mb()
        started = time.perf_counter()
        store = await EdgeStore.open(where, dimensions=embedder.dimensions, optimize_after=None)
        figures["open_s"] = time.perf_counter() - started
        latency: dict[str, Any] = {}
        asked = realtext.RealText().questions() if text == "real" else None
        try:
            # The first searches after opening read pages from disk (or the page cache): timed
            # apart, hybrid, so the two timed modes below compare warm stores.
            phases = [("after open (hybrid)", True, max(rounds // 4, 1))]
            phases += [("dense", False, rounds), ("hybrid", True, rounds)]
            for n, (phase, hybrid, count) in enumerate(phases):
                store.hybrid = hybrid
                latency[phase] = await search_latency(
                    store, embedder, tenants, count, asked, SEED + 1 + n
                )
            figures["rss_serving_mb"] = rss_mb()
            figures["rss_store_mb"] = rss_mb() - rss_before
        finally:
            await store.close()
    for mode, stats in latency.items():
        rows = [{"measure": f"{mode}: {name}", **row} for name, row in stats.items()]
        print(format_table(rows, ["measure", "count", "p50", "p90", "p99", "max"]))
    print(format_table([figures]))
    return {
        "text": text,
        "size": size,
        "tenants": tenants,
        "optimized": optimize,
        "reused": reuse,
        "latency_ms": latency,
        **figures,
    }


def locomo_records(sample: dict[str, Any]) -> list[MemoryRecord]:
    """One user per conversation: its observations, session summaries and dialog turns."""
    sample_id = str(sample["sample_id"])
    return [
        MemoryRecord(
            id=f"{sample_id}-{i}",
            tenant="locomo",
            user=sample_id,
            source=item["source"],
            content=item["content"],
            created_at=datetime.fromisoformat(item["created_at"]),
            metadata=item["metadata"],
        )
        for i, item in enumerate(build_memories(sample, sample_id, NOW))
    ]


@contextlib.contextmanager
def pruned_queries(df: Counter[int], documents: list[int], share: float) -> Iterator[None]:
    """Make BM25 queries drop terms in more than ``share`` of the asking user's memories.

    A bench-only prototype (issue 14): the store's query encoder is swapped for one that
    prunes with ``df`` (term -> memories holding it) and ``documents[0]`` (the user's memory
    count), both set by the caller per question; restored on exit.
    """
    original = lexical.encode_query

    def encode(text: str) -> lexical.SparsePair:
        indices, values = original(text)
        keep = [
            (i, v) for i, v in zip(indices, values, strict=True) if df[i] <= share * documents[0]
        ]
        return [i for i, _ in keep], [v for _, v in keep]

    lexical.encode_query = encode  # type: ignore[assignment]
    try:
        yield
    finally:
        lexical.encode_query = original  # type: ignore[assignment]


async def run_recall(
    samples: Sequence[dict[str, Any]], ks: Sequence[int], prune_shares: Sequence[float] = ()
) -> dict[str, Any]:
    """Evidence recall@k on LoCoMo for dense-only and hybrid search over the same store.

    Each of ``prune_shares`` adds a hybrid mode whose BM25 query drops the terms held by more
    than that share of the user's memories (``pruned_queries``).
    """
    embedder = StaticEmbedder()
    asked = [q for sample in samples for q in questions(sample, CATEGORIES)]
    vectors = embedder.embed_sync([q.text for q in asked])
    results: dict[str, Any] = {}
    frequencies: dict[str, Counter[int]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = await EdgeStore.open(tmp, dimensions=embedder.dimensions, optimize_after=None)
        try:
            for sample in samples:
                records = locomo_records(sample)
                await store.add(records, embedder.embed_sync([r.content for r in records]))
                df: Counter[int] = Counter()
                for record in records:
                    df.update(set(lexical.encode_document(record.content)[0]))
                frequencies[str(sample["sample_id"])] = df
                sizes[str(sample["sample_id"])] = len(records)
            modes: list[tuple[str, float | None]] = [("dense", None), ("hybrid", None)]
            modes += [(f"hybrid-pruned{share:g}", share) for share in prune_shares]
            for mode, share in modes:
                store.hybrid = mode != "dense"
                for k in ks:
                    by_category: dict[str, list[float]] = {}
                    for question, vector in zip(asked, vectors, strict=True):
                        query = SearchQuery(vector, question.text, question.sample_id, None, k)
                        if share is None:
                            hits = await store.search("locomo", query)
                        else:
                            user = question.sample_id
                            with pruned_queries(frequencies[user], [sizes[user]], share):
                                hits = await store.search("locomo", query)
                        recall = evidence_recall(
                            question.evidence, [{"metadata": h.record.metadata} for h in hits]
                        )
                        by_category.setdefault(CATEGORIES[question.category], []).append(recall)
                        by_category.setdefault("overall", []).append(recall)
                    results[f"{mode}@{k}"] = {c: float(np.mean(v)) for c, v in by_category.items()}
        finally:
            await store.close()
    rows = [{"mode@k": name, **scores} for name, scores in results.items()]
    print(f"{len(asked)} questions (categories 1-4) over {len(samples)} conversations")
    print(format_table(rows, ["mode@k", "overall", *CATEGORIES.values()]))
    return {"questions": len(asked), "conversations": len(samples), "recall": results}


async def run_ef_recall(size: int, count: int, efs: Sequence[int]) -> dict[str, Any]:
    """Top-10/50 recall of the dense query (``edge_query.DENSE_PARAMS`` but ``hnsw_ef``) against
    an exact search, over ``count`` real-text questions; mean engine ms per query."""
    embedder = StaticEmbedder()
    tenant = pipeline.bench_tenant()
    exact = qe.SearchParams(exact=True, quantization=qe.QuantizationSearchParams(ignore=True))
    rescore = qe.QuantizationSearchParams(rescore=True, oversampling=RESCORE_OVERSAMPLING)
    params = {ef: qe.SearchParams(hnsw_ef=ef, quantization=rescore) for ef in efs}
    ks = (10, TOP_K)
    with tempfile.TemporaryDirectory(prefix="mp-ef-") as where:
        store = await EdgeStore.open(where, dimensions=embedder.dimensions)
        try:
            await pipeline.seed_store(store, embedder, tenant, size, "real")
            shard = store._shard  # the bench queries the engine as edge_query does
            points = shard.info().points_count
            outside = unindexed_points(shard)
            asked = list(itertools.islice(realtext.RealText().questions(), count))
            found = {ef: dict.fromkeys(ks, 0) for ef in efs}
            seconds = dict.fromkeys([*efs, 0], 0.0)  # 0: exact
            total = dict.fromkeys(ks, 0)
            for text, vector in zip(asked, embedder.embed_sync(asked), strict=True):
                scope = scope_filter(tenant, SearchQuery(vector, text, "u1", None, TOP_K))
                dense = qe.Query.Nearest(vector.tolist(), using=DENSE_VECTOR)
                for ef in (0, *efs):
                    request = qe.QueryRequest(
                        limit=TOP_K,
                        query=dense,
                        filter=scope,
                        with_payload=False,
                        params=exact if ef == 0 else params[ef],
                    )
                    started = time.perf_counter()
                    ids = [p.id for p in shard.query(request)]
                    seconds[ef] += time.perf_counter() - started
                    if ef == 0:
                        truth = ids
                        for k in ks:
                            total[k] += len(truth[:k])
                        continue
                    for k in ks:
                        found[ef][k] += len(set(ids[:k]) & set(truth[:k]))
        finally:
            await store.close()
    rows = [
        {
            "hnsw_ef": ef or "exact",
            **{f"recall@{k}": round(found[ef][k] / total[k], 4) for k in ks if ef},
            "mean_ms": round(1000 * seconds[ef] / len(asked), 3),
        }
        for ef in (*efs, 0)
    ]
    print(f"{points} points, {outside} outside the graph, {len(asked)} questions")
    print(format_table(rows))
    return {"points": points, "outside_graph": outside, "questions": len(asked), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI (seconds)")
    parser.add_argument("--recall", action="store_true", help="LoCoMo dense vs hybrid recall")
    parser.add_argument(
        "--prune-share",
        type=float,
        action="append",
        default=[],
        help="--recall: also hybrid with BM25 query terms above this df share dropped",
    )
    parser.add_argument(
        "--ef-recall", action="store_true", help="dense top-k recall against exact, per hnsw_ef"
    )
    parser.add_argument("--ef", type=int, nargs="+", default=[64, 128, 150, 192, 256, 384])
    parser.add_argument("--questions", type=int, default=1_000, help="--ef-recall questions")
    parser.add_argument("--size", type=int, default=100_000, help="memories to import")
    parser.add_argument("--tenants", type=int, default=1, help="tenants to spread them over")
    parser.add_argument("--rounds", type=int, default=2_000, help="search queries to time")
    parser.add_argument(
        "--text",
        choices=("real", "synthetic"),
        default="real",
        help="real-text memories and questions (LoCoMo-based), or the synthetic templates",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="build the store here and keep it (or reuse it)"
    )
    parser.add_argument(
        "--no-optimize",
        action="store_true",
        help="skip the HNSW build: tenant-filtered searches scan only the tenant's points",
    )
    parser.add_argument("--import-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.import_only:  # the child of import_in_child: figures as the last line
        figures = asyncio.run(
            import_only(args.size, args.tenants, args.keep, not args.no_optimize, args.text)
        )
        print(json.dumps(figures))
        return
    if args.recall:
        if not LOCOMO.is_file():
            # LoCoMo is external data (CC BY-NC, never copied into the repo); a fresh CI machine
            # has none, and the smoke run has nothing to measure then.
            print(f"LoCoMo data not found at {LOCOMO}", file=sys.stderr)
            sys.exit(0 if args.smoke else 1)
        samples = json.loads(LOCOMO.read_text())
        out = asyncio.run(
            run_recall(
                samples[:1] if args.smoke else samples,
                (10,) if args.smoke else RECALL_KS,
                args.prune_share,
            )
        )
        if not args.smoke:
            print("saved", save_results("store_recall", out))
        return
    if args.ef_recall:
        if not realtext.available():
            print(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}", file=sys.stderr)
            sys.exit(0 if args.smoke else 1)
        size, asked = (500, 20) if args.smoke else (args.size, args.questions)
        out = asyncio.run(run_ef_recall(size, asked, args.ef))
        if not args.smoke:
            print("saved", save_results(f"store_ef_recall_{size}", out))
        return
    if args.smoke:
        args.size, args.tenants, args.rounds = 3_000, 10, 50
    if args.text == "real" and not realtext.available():
        if not args.smoke:
            raise SystemExit(f"real text needs the LoCoMo data at {realtext.LOCOMO_PATH}")
        print("LoCoMo data absent: smoke run on synthetic text", file=sys.stderr)
        args.text = "synthetic"
    out = asyncio.run(
        run_search(args.size, args.tenants, args.rounds, args.keep, not args.no_optimize, args.text)
    )
    if not args.smoke:
        suffix = "_noopt" if args.no_optimize else ""
        name = f"store_search_{args.text}_{args.size}_{args.tenants}{suffix}"
        print("saved", save_results(name, out))


if __name__ == "__main__":
    main()
